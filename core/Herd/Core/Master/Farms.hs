-- | The farm jobs as a feature of the master's core ("Herd.Core.Master",
-- "Herd.Core.Master.Feature"): a caller's submission, cancel and breakage,
-- the workers' results checked against what each link has due
-- (INV-ORDER), the cluster's events handed to the pure scheduler
-- ("Herd.Core.Farm"), and its decisions turned into the core's commands
-- (batches to send with what their link now expects, results to accept,
-- answers to callers, log lines). Pure.
module Herd.Core.Master.Farms
  ( farmFeature
  , farmEvent
  ) where

import Control.Monad (forM_)
import Data.List (group, partition, sort)
import qualified Data.Map.Strict as M
import qualified Data.Text as T
import Herd.Core.Base (JobId, Range (..), TaskRef (..), WorkerId)
import Herd.Core.Error (HerdError (..))
import Herd.Core.Fault (Violation (..))
import Herd.Core.Master.State
import Herd.Core.Master.Events
import Herd.Core.Master.Expect
import Herd.Core.Master.Feature
import Herd.Core.Monitor.Ledger (ledgerCredit)
import Herd.Core.Step (runStep, transition, update)
import qualified Herd.Core.Farm as S
import Herd.Core.Packet.Policy (Urgency (..))
import Herd.Core.Wire (FromWorker (..), ToWorker (..))

-- | The farm jobs: the scheduler hears of every worker's arrival, loss,
-- hold and of the time passing; the workers' batch answers are theirs.
farmFeature :: Feature
farmFeature = (quiet "farm")
  { featureOwns = ownsFarm
  , featureReceived = received
  , featureJoined = \_ now w -> sched now (S.WorkerJoined w)
  , featureLost = lost
  , featureAwaited = \now n -> sched now (S.WorkersAwaited n)
  , featureHeld = \now w held -> sched now (S.WorkerHeld w held)
  , featureTick = \now core -> if M.null (coreFarms core) then (core, []) else sched now S.Tick core
  , featureStop = stop
  , featureBusy = not . M.null . coreFarms
  , featureCalls = \core ->
      let holding = M.fromListWith (++) [ (jid, [w]) | w <- S.liveWorkers (coreSched core), (bid, _) <- S.outstandingFor w (coreSched core)
                                                      , Just jid <- [S.batchJobOf w bid (coreSched core)] ]
      in [ CallView "farm" name (S.progressTotal p - S.progressDone p) (nubOrdered (M.findWithDefault [] (S.progressJob p) holding))
         | (name, p) <- coreJobView core ]
  }

-- Each worker once, in order.
nubOrdered :: [WorkerId] -> [WorkerId]
nubOrdered = map head . group . sort

ownsFarm :: FromWorker -> Bool
ownsFarm msg = case msg of
  Results {} -> True
  BatchDone {} -> True
  TaskThrew {} -> True
  BatchRejected {} -> True
  BatchStopped {} -> True
  _ -> False

-- | A farm job's submission, cancel or breakage, and a batch that could not be sent.
farmEvent :: Double -> Event -> Core -> (Core, [Command])
farmEvent now ev core = case ev of
  FarmSubmit jid job
    | coreStopping core -> (core, [JobDone jid (Left ClusterClosed)])
    | otherwise -> sched now (S.JobSubmitted jid (farmTasks job) (farmBatching job) (farmTarget job) (farmMaxDeaths job) (farmMaxJobDeaths job) (farmKeepGoing job) (farmCopies job))
                         core { coreFarms = M.insert jid job (coreFarms core) }
  FarmCancel jid -> sched now (S.JobCancelled jid) core { coreFarms = M.delete jid (coreFarms core) }
  FarmBroken jid err -> endFarm now jid err core
  BatchNotSent w bid err -> case M.lookup w (coreLinks core) of
    Nothing -> (core, [])
    Just l ->
      let (gone, kept) = forgetBatch bid l
      in flip runStep core $ do
           update (\c -> c { coreLinks = M.insert w kept (coreLinks c) })
           forM_ gone $ \jid -> do
             transition (endFarm now jid err)
             -- the batch is stale now: the scheduler forgets it
             transition (sched now (S.BatchCompleted w bid 0 Nothing))
  _ -> (core, [])

-- A worker's answer about a batch of its link.
received :: Hooks -> Double -> WorkerId -> FromWorker -> Core -> (Core, [Command])
received hooks now w msg core = case msg of
  -- INV-ORDER: a run of results is for the next tasks of the oldest batch due on its link
  Results k value -> case nextResults (fromIntegral k) link of
    Just (jid, tasks, link') -> (setExpect link', [ Stage jid tasks value | M.member jid (coreFarms core) ])
    Nothing -> bad (UnexpectedResults (fromIntegral k))
  BatchDone bid busyNs -> popExpect bid $ \e core1 ->
    if expLeft e > 0
      then badIn core1 (EarlyBatchEnd bid (expGot e) (expGot e + expLeft e))
      else let busy = fromIntegral busyNs / 1e9
           in sched now (S.BatchCompleted w bid busy Nothing)
                    core1 { coreLedger = ledgerCredit w (expGot e) 1 0 busy (coreLedger core1) }
  TaskThrew bid pos why -> popExpect bid $ \e core1 ->
    if fromIntegral pos /= expGot e
      then badIn core1 (MisplacedFailure bid (fromIntegral pos) (expGot e))
      else sched now (S.BatchCompleted w bid 0 (Just (fromIntegral pos, T.unpack why))) core1
  BatchRejected bid why -> popExpect bid $ \_ core1 -> sched now (S.BatchRefused w bid (T.unpack why)) core1
  -- a batch stopped as it was told: what came of it is dropped
  BatchStopped bid -> popExpect bid $ \_ core1 -> sched now (S.BatchStopped w bid) core1
  _ -> (core, [])
  where
    link = M.findWithDefault noneExpected w (coreLinks core)
    setExpect l = core { coreLinks = M.insert w l (coreLinks core) }
    -- INV-ORDER: a batch's end must be the oldest batch's
    popExpect bid act = case endOfBatch bid link of
      Just (e, later) -> act e (setExpect later)
      Nothing -> bad (UnknownBatchEnd bid)
    bad = badIn core
    badIn c violation = hookDropPeer hooks w violation c

-- A worker's link is gone: its batches run elsewhere; a link that died
-- charges the oldest batch due on it (INV-POISON).
lost :: Hooks -> Double -> WorkerId -> Loss -> Core -> (Core, [Command])
lost _ now w loss core =
  let unfinished = concatMap snd (S.outstandingFor w (coreSched core))
      death = [ S.Death bid got (lossWhy loss) | lossDied loss, Just (bid, got) <- [oldestDue (lossDue loss)] ]
      requeued = [ (w, now, unfinished) | not (null unfinished), not (coreStopping core) ]
  in sched now (S.WorkerLost w (case death of { d : _ -> Just d; [] -> Nothing }))
           core { coreRequeued = requeued ++ coreRequeued core }

-- The cluster stops: every job is answered and forgotten.
stop :: Double -> Core -> (Core, [Command])
stop now core =
  ( core { coreFarms = M.empty
         , coreSched = foldr (\jid sc -> fst (S.step now (S.JobCancelled jid) sc)) (coreSched core) (M.keys (coreFarms core)) }
  , [ JobDone jid (Left ClusterClosed) | jid <- M.keys (coreFarms core) ] )

-- End a farm job with an error (if it is still running).
endFarm :: Double -> JobId -> HerdError -> Core -> (Core, [Command])
endFarm now jid err core
  | M.member jid (coreFarms core) =
      let (core1, out) = sched now (S.JobCancelled jid) core { coreFarms = M.delete jid (coreFarms core) }
      in (core1, JobDone jid (Left err) : out)
  | otherwise = (core, [])

-- Step the scheduler and turn its commands into the core's.
sched :: Double -> S.Event -> Core -> (Core, [Command])
sched now ev core =
  let (s', cmds) = S.step now ev (coreSched core)
  in foldl run (core { coreSched = s' }, []) cmds
  where
    run (c, out) cmd = case cmd of
      S.SendBatch w bid ranges -> case (S.batchJobOf w bid (coreSched c), M.lookup w (coreLinks c)) of
        (Just jid, Just l) | Just job <- M.lookup jid (coreFarms c) ->
          let c1 = c { coreLinks = M.insert w (expectBatch jid bid ranges l) (coreLinks c) }
              (c2, notes) = noteRerun w ranges c1
          in (c2, out ++ notes ++ [SendBatch w jid bid (farmRef job) ranges])
        _ -> (c, out)
      S.AcceptResults jid _ ranges
        | M.member jid (coreFarms c) -> (c, out ++ [Accept jid ranges])
        | otherwise -> (c, out)
      S.DropResults _ -> (c, out)
      S.CancelBatch w bid
        | M.member w (coreLinks c) -> (c, out ++ [Send w Urgent (BatchCancel bid)])
        | otherwise -> (c, out)
      S.TaskFailedAt jid i failure -> case M.lookup jid (coreFarms c) of
        Just job -> (c, out ++ [FailTask jid i (failureError (refName (farmRef job)) failure)])
        Nothing -> (c, out)
      S.SlowBatch slow bid n late est copy ->
        (c, out ++ [Note ("herd: worker " ++ show slow ++ " is slow: its batch " ++ show bid ++ " of " ++ show n
                          ++ " tasks has run " ++ secs late ++ (if est > 0 then " (estimate " ++ secs est ++ ")" else "")
                          ++ "; a copy runs on worker " ++ show copy)])
      S.FinishJob jid stats -> answer c out jid (Right stats)
      S.AbortJob jid failure _ -> case M.lookup jid (coreFarms c) of
        Just job -> answer c out jid (Left (failureError (refName (farmRef job)) failure))
        Nothing -> (c, out)
    -- INV-ONCE: a job is answered only while it is known, and forgotten then
    answer c out jid result
      | M.member jid (coreFarms c) = (c { coreFarms = M.delete jid (coreFarms c) }, out ++ [JobDone jid result])
      | otherwise = (c, out)
    noteRerun w ranges c =
      let overlaps rs = or [ lo < hi' && lo' < hi | Range lo hi <- ranges, Range lo' hi' <- rs ]
          (hit, rest) = partition (\(_, _, rs) -> overlaps rs) (coreRequeued c)
      in ( c { coreRequeued = rest }
         , [ Note ("herd: tasks of lost worker " ++ show lost ++ " re-sent to worker " ++ show w ++ " "
                   ++ show (round ((now - at) * 1000) :: Int) ++ " ms after the loss was noticed")
           | (lost, at, _) <- hit ] )

-- Seconds for the log, to the millisecond.
secs :: Double -> String
secs t = show (fromIntegral (round (t * 1000) :: Int) / 1000 :: Double) ++ " s"

failureError :: String -> S.JobFailure -> HerdError
failureError name failure = case failure of
  S.TaskError i msg -> TaskFailed i name msg
  S.FunctionRefused why -> RemoteFunctionError name why
  S.NoWorkersLeft -> AllWorkersLost "the cluster has no live worker"
  S.TaskKilledWorkers i deaths why -> TaskKilledWorkers i name deaths why
  S.JobKilledWorkers deaths why -> JobKilledWorkers deaths name why

