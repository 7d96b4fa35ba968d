-- | What each worker has done since it joined the cluster, for watching a
-- cluster while it runs (the dashboard, @/metrics@): tasks and evolve
-- steps done, busy seconds as the worker measured them, and waiting
-- seconds. Pure; the master's core ("Herd.Core.Master") keeps one and
-- updates it as events arrive.
--
-- Waiting is the particle-filter seed's diagnosis: time a worker was
-- present while the cluster had work (a farm job, a stream or an evolve
-- call running) and it was not computing. Time with no work at all is
-- neither busy nor waiting. The cost does not grow with the number of
-- workers: the ledger keeps one clock of the cluster's working time,
-- changed only when the cluster starts or stops having work, and each
-- worker notes that clock when it joins and when it is lost.
--
-- Promises (checked by properties): busy and waiting are never negative;
-- while a worker is connected, its busy plus waiting is the working time
-- it was present for (or its busy time, if its own measurements say
-- more); a lost worker's figures stop growing; accounts of lost workers
-- are kept, the oldest dropped beyond 'keptLost'.
module Herd.Core.Monitor.Ledger
  ( Ledger
  , emptyLedger
  , Account (..)
  , Departure (..)
  , ledgerTick
  , ledgerJoin
  , ledgerLose
  , ledgerCredit
  , ledgerAccounts
  , ledgerWorkingSeconds
  , ledgerWorking
  , ledgerLostCount
  , ledgerTasksDone
  , accountWaiting
  , keptLost
  ) where

import qualified Data.Set as S
import qualified Data.Map.Strict as M
import Herd.Core.Base (WorkerId)

-- | How a worker left.
data Departure = Departure
  { departedAt     :: !Double  -- ^ when its loss was noticed
  , departedActive :: !Double  -- ^ the cluster's working seconds then
  , departedWhy    :: !String  -- ^ why it was lost
  } deriving (Eq, Show)

-- | One worker's record since it joined.
data Account = Account
  { accountJoined   :: !Double   -- ^ when it joined
  , accountActiveAtJoin :: !Double  -- ^ the cluster's working seconds then
  , accountTasks    :: !Int      -- ^ farm tasks it returned results for
  , accountBatches  :: !Int      -- ^ farm batches it finished
  , accountEvolved  :: !Int      -- ^ evolve steps it answered
  , accountBusy     :: !Double   -- ^ seconds computing, as it measured
  , accountLeft     :: !(Maybe Departure)  -- ^ 'Nothing' while it is connected
  } deriving (Eq, Show)

-- | Every worker's account and the cluster's working clock.
data Ledger = Ledger
  { ledAccounts :: !(M.Map WorkerId Account)
  , ledActive   :: !Double  -- ^ working seconds up to 'ledSince'
  , ledSince    :: !Double  -- ^ when the cluster last started or stopped having work
  , ledWorking  :: !Bool    -- ^ whether the cluster has had work since 'ledSince'
  , ledLost     :: !Int     -- ^ workers lost since the start
  , ledLostKept :: !(S.Set WorkerId)  -- ^ the lost workers whose accounts are kept
  , ledTasks    :: !Int     -- ^ farm tasks returned since the start
  } deriving (Eq, Show)

-- | No worker yet, and no work.
emptyLedger :: Ledger
emptyLedger = Ledger M.empty 0 0 False 0 S.empty 0

-- | Lost workers whose accounts are kept (the newest).
keptLost :: Int
keptLost = 256

-- | Time has come to this point; from now on the cluster has work or not.
-- Only a change of that costs anything: the ledger is returned as it is
-- while the cluster goes on working (or idling), which is almost every
-- event the master's core steps.
ledgerTick :: Double -> Bool -> Ledger -> Ledger
ledgerTick now working l
  | working == ledWorking l = l
  | otherwise = l { ledActive = activeAt now l, ledSince = max now (ledSince l), ledWorking = working }

-- The working seconds up to this time.
activeAt :: Double -> Ledger -> Double
activeAt now l
  | ledWorking l = ledActive l + max 0 (now - ledSince l)
  | otherwise = ledActive l

-- | The cluster's working seconds up to this time.
ledgerWorkingSeconds :: Double -> Ledger -> Double
ledgerWorkingSeconds = activeAt

-- | Whether the cluster has work, as of the last tick.
ledgerWorking :: Ledger -> Bool
ledgerWorking = ledWorking

-- | A worker joined (a number is never reused, so a rejoin is a new account).
ledgerJoin :: Double -> WorkerId -> Ledger -> Ledger
ledgerJoin now w l = l { ledAccounts = M.insert w (Account now (activeAt now l) 0 0 0 0 Nothing) (ledAccounts l) }

-- | A worker was lost, for this reason.
ledgerLose :: Double -> WorkerId -> String -> Ledger -> Ledger
ledgerLose now w why l = case M.lookup w (ledAccounts l) of
  Just a | Nothing <- accountLeft a ->
    -- the reason is copied out whole: a lazy tail of it (a link's name,
    -- say) would keep that link's buffers alive as long as the row is kept
    let reason = foldr (:) [] why
        accounts = length reason `seq` M.insert w a { accountLeft = Just (Departure now (activeAt now l) reason) } (ledAccounts l)
        (kept, accounts') = pruneLost (S.insert w (ledLostKept l)) accounts
    in l { ledAccounts = accounts', ledLostKept = kept, ledLost = ledLost l + 1 }
  _ -> l

-- Keep the newest 'keptLost' lost accounts (worker numbers grow with
-- time), dropping the oldest. The lost are kept in a set of their own:
-- finding them among all accounts on every loss made a cluster of n
-- workers that lost them all (its end, say) cost n^2 steps, about four
-- million list cells at 2048 workers.
pruneLost :: S.Set WorkerId -> M.Map WorkerId Account -> (S.Set WorkerId, M.Map WorkerId Account)
pruneLost kept accounts = case S.minView kept of
  Just (oldest, rest) | S.size kept > keptLost -> pruneLost rest (M.delete oldest accounts)
  _ -> (kept, accounts)

-- | A worker finished a batch of this many tasks, or (with 0 tasks and 0
-- batches) this many evolve steps, after this many seconds of computing.
ledgerCredit :: WorkerId -> Int -> Int -> Int -> Double -> Ledger -> Ledger
ledgerCredit w tasks batches evolved busy l = case M.lookup w (ledAccounts l) of
  Just a -> l { ledAccounts = M.insert w a { accountTasks = accountTasks a + tasks
                                           , accountBatches = accountBatches a + batches
                                           , accountEvolved = accountEvolved a + evolved
                                           , accountBusy = accountBusy a + max 0 busy }
                                        (ledAccounts l)
              , ledTasks = ledTasks l + tasks }
  Nothing -> l

-- | Every account, by worker number: the connected and the kept lost.
ledgerAccounts :: Ledger -> [(WorkerId, Account)]
ledgerAccounts = M.toList . ledAccounts

-- | Workers lost since the start.
ledgerLostCount :: Ledger -> Int
ledgerLostCount = ledLost

-- | Farm tasks returned since the start.
ledgerTasksDone :: Ledger -> Int
ledgerTasksDone = ledTasks

-- | A worker's waiting seconds as of this time: working time it was
-- present for, less its busy time (never negative).
accountWaiting :: Double -> Ledger -> Account -> Double
accountWaiting now l a =
  let until = maybe (activeAt now l) departedActive (accountLeft a)
  in max 0 (until - accountActiveAtJoin a - accountBusy a)
