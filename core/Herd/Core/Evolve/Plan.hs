-- | The state of the evolve scheduler ("Herd.Core.Evolve.Schedule") during one
-- call, and the few operations every step of it goes through: what the
-- plan knows of each worker, the index of workers by unstarted states
-- (kept true by 'putWorker' and 'removeWorker', the only ways a worker's
-- entry changes), and the queue length the lead time asks for. Pure; the
-- decisions (start, balance, steal) stay in "Herd.Core.Evolve.Schedule".
module Herd.Core.Evolve.Plan
  ( PlanSettings (..)
  , defaultPlanSettings
  , WorkerPlan (..)
  , module Herd.Core.Evolve.Unstarted
  , Plan (..)
  , Move (..)
  , PlanEvent (..)
  , Command (..)
  , planDone
  , planLeft
  , planUnstarted
  , planIdleWorkers
  , planIsMoving
  , planWorkers
  , planRunning
  , isIdle
  , unstarted
  , likelyUnstarted
  , module Herd.Core.Evolve.Queued
  , keptQueued
  , leftQueue
  , adjust
  , putWorker
  , removeWorker
  , planBusy
  , leastLoaded
  , meanCost
  , queueTarget
  , refillDue
  , moveRoundTrip
  , noteRoundTrip
  , moveShortens
  ) where

import qualified Data.ByteString as B
import qualified Data.Map.Strict as M
import Data.Sequence (Seq, ViewL (..), viewl)
import qualified Data.Sequence as Seq
import qualified Data.Set as S
import Herd.Core.Base (WorkerId)
import Herd.Core.Evolve.Unstarted
import Herd.Core.Evolve.Queued
import Herd.Core.Evolve.StateMap (StateId, StateMap)
import qualified Herd.Core.Evolve.StateMap as SM

-- | What the scheduler needs to know besides the states.
data PlanSettings = PlanSettings
  { settingsLead      :: !Double
    -- ^ seconds of work to keep queued at each worker beyond the state it
    -- is evolving, to hide the round trip to the master
  , settingsMeanCost  :: !(Maybe Double)
    -- ^ the mean step time measured before this call, if any
  , settingsMaxQueue  :: !Int  -- ^ most states queued at one worker
  , settingsRoundTrip :: !(Maybe Double)
    -- ^ the time asking a state back took in the last call (seconds), if
    -- measured: until this call has measured its own, moves are judged by it
  } deriving (Eq, Show)

-- | 100 ms of lead, no history, at most 1000 queued.
defaultPlanSettings :: PlanSettings
defaultPlanSettings = PlanSettings 0.1 Nothing 1000 Nothing

-- | What the plan knows of one worker.
data WorkerPlan = WorkerPlan
  { wpHeld     :: !Held                 -- ^ to evolve, not asked yet, longest first
  , wpQueued   :: !(Seq StateId)
    -- ^ asked, not answered, oldest first (the first may be running); a
    -- sequence, not a list: a cheap step's queue holds up to
    -- 'settingsMaxQueue' states, and a list copied it on every answer
  , wpIncoming :: !Int                  -- ^ states being moved to it
  , wpLeaving  :: !Int                  -- ^ its states being asked back
  , wpStarted  :: !Int
    -- ^ queued states behind the first that it is known to have started:
    -- it kept one asked back, so that one and those before it run or
    -- ran. A thief asking for them again would hear "kept" again, and on
    -- a host whose workers answer at once that ping-pong ran for seconds
  , wpHeard    :: !Double
    -- ^ when it last answered, or was last given work while it had none
    -- (the master's clock): its running state started then at the latest
  , wpBusy     :: !Double
    -- ^ seconds of the steps it answered in this call (kept here, where
    -- an answer rebuilds the entry anyway: a map of its own cost an
    -- insert per answer)
  } deriving (Eq, Show)

-- | The scheduler's state during one call.
data Plan = Plan
  { plWorkers  :: !(M.Map WorkerId WorkerPlan)
  , plLeft     :: !Int                                -- ^ evolutions not yet answered
  , plMoving   :: !(StateMap Move)  -- ^ states asked back, not yet answered
  , plIdle     :: !(S.Set WorkerId)   -- ^ workers with nothing to do and nothing coming
  , plVictims  :: !(S.Set (Int, WorkerId))  -- ^ workers with unstarted states, by how many
  , plCostSum  :: !Double
  , plCostN    :: !Int
  , plRoundTrip :: !(Maybe Double)
    -- ^ how long asking a state back takes, as measured in this call (a
    -- moving average of the release round trips)
  , plSettings :: !PlanSettings
  , plGoneBusy :: !(M.Map WorkerId Double)
    -- ^ the 'wpBusy' of workers lost during the call
  } deriving (Eq, Show)

-- | A state asked back from one worker for another.
data Move = Move
  { moveFrom   :: !WorkerId
  , moveTo     :: !WorkerId
  , moveCost   :: !Double
  , moveQueued :: !Bool  -- ^ it had been asked to evolve there (else it was only held)
  , moveAsked  :: !Double  -- ^ when it was asked back (the master's clock, seconds)
  } deriving (Eq, Show)

-- | What happened.
data PlanEvent
  = Evolved !WorkerId !StateId !Double   -- ^ a worker evolved a state in this many seconds
  | Released !WorkerId !StateId !B.ByteString  -- ^ a worker gave a state back
  | Kept !WorkerId !StateId
    -- ^ a worker did not give a state back: it had started it (or
    -- already evolved it)
  | WorkerGone !WorkerId                 -- ^ a worker was lost
  | WorkerCame !WorkerId                 -- ^ a worker joined the call (it holds nothing yet)
  | Adopted !WorkerId ![(StateId, Double)]
    -- ^ states lost with a worker were recomputed on this one, and are to
    -- be evolved in this call after all
  deriving (Eq, Show)

-- | What the driver must do.
data Command
  = Ask !WorkerId ![StateId]          -- ^ evolve these held states, in this order
  | Release !WorkerId !StateId        -- ^ ask for this unstarted state back
  | Place !WorkerId !StateId !B.ByteString  -- ^ hand this state to this worker
  | Lose ![StateId]                   -- ^ these states were on a lost worker and are gone
  deriving (Eq, Show)

-- | Whether every state of the call has been evolved (or lost) and every
-- state asked back has been answered for (so no answer of this call can
-- arrive during the next).
planDone :: Plan -> Bool
planDone p = plLeft p == 0 && SM.null (plMoving p)

-- | Evolutions not yet answered.
planLeft :: Plan -> Int
planLeft = plLeft

-- | Each worker's unstarted states as the plan sees them: not asked yet,
-- or asked but behind the one that may be running; states being asked
-- back are not counted.
planUnstarted :: Plan -> M.Map WorkerId Int
planUnstarted = M.map unstarted . plWorkers

-- | Workers with nothing held, nothing asked and nothing coming.
planIdleWorkers :: Plan -> [WorkerId]
planIdleWorkers p = [ w | (w, wp) <- M.toList (plWorkers p), isIdle wp ]

-- | Whether a worker holds nothing, was asked nothing and has nothing coming.
isIdle :: WorkerPlan -> Bool
isIdle wp = heldNull (wpHeld wp) && Seq.null (wpQueued wp) && wpIncoming wp == 0

-- | Whether this state has been asked back and the answer is still due.
planIsMoving :: StateId -> Plan -> Bool
planIsMoving s p = SM.member s (plMoving p)

-- | A worker's states that have not started: held, or queued behind the
-- one that may be running, less those being asked back.
unstarted :: WorkerPlan -> Int
unstarted wp = heldSize (wpHeld wp) + max 0 (Seq.length (wpQueued wp) - 1 - wpStarted wp) - wpLeaving wp

-- | A worker's unstarted states less those it has probably started since
-- the master last heard from it: one per mean step time gone by, at most
-- all of its queue behind the running one. A master that falls behind
-- reads answers late, and a worker whose answers wait unread looked
-- further behind than it was: thieves took states from it that it was
-- already running (at 2048 simulated workers, 1,199 asks back in a first
-- call that started with four states at every worker).
likelyUnstarted :: Double -> Plan -> WorkerPlan -> Int
likelyUnstarted now p wp = unstarted wp - min queuedBehind started
  where
    queuedBehind = max 0 (Seq.length (wpQueued wp) - 1 - wpStarted wp - wpLeaving wp)
    started = case meanCost p of
      Just c | c > 0 && now > wpHeard wp -> floor ((now - wpHeard wp) / c)
      _ -> 0

-- | A worker's entry after it kept this state, asked back from its queue.
keptQueued :: StateId -> WorkerPlan -> WorkerPlan
keptQueued s wp = wp { wpStarted = keptAt s (wpQueued wp) (wpStarted wp) }

-- | A worker's entry after this state left its queue (answered or given back).
leftQueue :: StateId -> WorkerPlan -> WorkerPlan
leftQueue s wp = let (q, k) = leaving s (wpQueued wp) (wpStarted wp) in wp { wpQueued = q, wpStarted = k }

-- | Change one worker's entry, if the plan has it ('putWorker').
adjust :: WorkerId -> (WorkerPlan -> WorkerPlan) -> Plan -> Plan
adjust w f p = maybe p (\wp -> putWorker w (f wp) p) (M.lookup w (plWorkers p))

-- | Put a worker's entry. Every change to a worker goes through here, so
-- that the index of victims by unstarted count stays true.
putWorker :: WorkerId -> WorkerPlan -> Plan -> Plan
putWorker w wp p = p { plWorkers = M.insert w wp (plWorkers p), plVictims = victims }
  where
    n = unstarted wp
    -- the index changes only when the count does: most puts (a state
    -- asked, one answered) leave it as it was, and rebuilding a path of a
    -- set of thousands of workers twice per put was most of a start's
    -- allocation
    victims = case M.lookup w (plWorkers p) of
      Just old | unstarted old == n -> plVictims p
               | otherwise -> enter (S.delete (unstarted old, w) (plVictims p))
      Nothing -> enter (plVictims p)
    enter vs = if n >= 1 then S.insert (n, w) vs else vs

-- | Drop a worker's entry, and its place in the index of victims.
removeWorker :: WorkerId -> Plan -> Plan
removeWorker w p =
  p { plWorkers = M.delete w (plWorkers p)
    , plVictims = maybe id (\old -> S.delete (unstarted old, w)) (M.lookup w (plWorkers p)) (plVictims p)
    , plGoneBusy = maybe id (\old -> M.insertWith (+) w (wpBusy old)) (M.lookup w (plWorkers p)) (plGoneBusy p) }

-- | Seconds of steps each worker of the call answered, lost workers
-- included (0 for one that answered none).
planBusy :: Plan -> M.Map WorkerId Double
planBusy p = M.unionWith (+) (M.map wpBusy (plWorkers p)) (plGoneBusy p)

-- | The worker with the fewest states held and queued (the lowest id on a
-- tie); the plan must have a worker.
leastLoaded :: Plan -> WorkerId
leastLoaded p = snd (minimum [ (heldSize (wpHeld wp) + Seq.length (wpQueued wp), w) | (w, wp) <- M.toList (plWorkers p) ])

-- | The mean cost of the evolutions answered so far in this call, else the
-- settings' guess, if any.
meanCost :: Plan -> Maybe Double
meanCost p
  | plCostN p > 0 = Just (plCostSum p / fromIntegral (plCostN p))
  | otherwise = settingsMeanCost (plSettings p)

-- | How many states to keep queued at a worker: the one running, and enough
-- behind it to cover the lead time.
queueTarget :: Plan -> Int
queueTarget p = min (max 2 (settingsMaxQueue s)) (1 + max 1 behind)
  where
    s = plSettings p
    behind = case meanCost p of
      Just m | m > 0 -> ceiling (settingsLead s / m)
      _ -> 1

-- | Whether a worker's queue of this many states is short enough to fill
-- again, given the target ('queueTarget', which the caller has at hand):
-- at half the target or less. Filling it after
-- every answer sent one ask per answer, a system call on each side for
-- each state; filling it at half sends the asks in groups of about half
-- the target, while the half left still covers the round trip to the
-- master (a target of 2, with nothing measured yet, fills at 1, as before).
refillDue :: Int -> Int -> Bool
refillDue target queued = queued <= target `div` 2

-- | How long asking a state back takes: measured in this call, else in
-- the last one, if at all.
moveRoundTrip :: Plan -> Maybe Double
moveRoundTrip p = maybe (settingsRoundTrip (plSettings p)) Just (plRoundTrip p)

-- | A state asked back at the first time was answered at the second: one
-- more sample of the round trip (a moving average weighing the newest by
-- a fifth, so a master that falls behind is seen within a few moves).
noteRoundTrip :: Double -> Double -> Plan -> Plan
noteRoundTrip asked answered p =
  let sample = max 0 (answered - asked)
  in p { plRoundTrip = Just (maybe sample (\old -> 0.8 * old + 0.2 * sample) (plRoundTrip p)) }

-- | Whether taking the last @k@ of a victim's @n@ unstarted states shortens
-- the step, given the mean step time and the round trip of a move. A moved
-- state can start at the thief after about one and a half round trips
-- (asked back, then handed over); at the victim, the first of them would
-- start after the @n - k@ before it and half of the one running. A move
-- that arrives later than that only costs messages, and those add to the
-- load that made it slow: with 2048 simulated workers on two cores,
-- refusing such moves took the moves of a run from 5400-6000 to
-- 3100-3700 and the master's CPU time down by about a tenth. With nothing
-- measured yet, every move counts as shortening.
moveShortens :: Plan -> Int -> Int -> Bool
moveShortens p n k = case (meanCost p, moveRoundTrip p) of
  (Just c, Just rtt) | c > 0 -> 1.5 * rtt < (fromIntegral (n - k) + 0.5) * c
  _ -> True

-- | The workers taking part in the call.
planWorkers :: Plan -> [WorkerId]
planWorkers = M.keys . plWorkers

-- | The state a worker is evolving now, as far as the plan knows: the
-- first of those asked of it (a worker evolves them in order).
planRunning :: WorkerId -> Plan -> Maybe StateId
planRunning w p = case M.lookup w (plWorkers p) of
  Just wp | s :< _ <- viewl (wpQueued wp) -> Just s
  _ -> Nothing
