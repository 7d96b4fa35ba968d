{-# LANGUAGE BangPatterns #-}
-- | The task farm's scheduler: a pure state machine.
--
-- The master core feeds it 'Event's (a worker joined or left, a job was
-- submitted, a batch came back) with the time they happened, and carries
-- out the 'Command's it returns (send a batch, keep or drop a batch's
-- results, end a job). It never does IO, so every scheduling decision can be
-- replayed in a QuickCheck property.
--
-- Invariants, upheld by 'step' and checked by the properties:
--
-- * INV-PARTITION: the unfinished tasks of each running job are exactly
--   its pending ranges plus its outstanding batches, with no overlap; so
--   every task's result is accepted exactly once.
-- * INV-BUSY: while pending tasks remain, every live worker has at least
--   one batch outstanding.
-- * INV-LOST: a lost worker's unfinished batches go back to the front of
--   the pending queue; results of a batch that is not outstanding (a lost
--   worker's, or one from an aborted job) are dropped.
-- * INV-POISON: the tasks that may have been running on a worker that
--   died are charged with the death and then run one at a time, each on a
--   worker holding nothing else; a task charged with its job's limit of
--   deaths ends the job with 'TaskKilledWorkers' naming it
--   ("Herd.Core.Farm.Loss").
-- * INV-AWAIT: a job fails for want of workers only when none is live and
--   none is being restarted.
--
-- Batch sizes adapt to the measured time per task ("Herd.Core.Farm.Sizing").
module Herd.Core.Farm
  ( -- * Identifiers
    WorkerId
  , BatchId
  , JobId
  , Range (..)
  , rangeSize
  , rangeIndices
    -- * The machine
  , Sched
  , emptySched
  , Event (..)
  , Command (..)
  , JobFailure (..)
  , step
    -- * Statistics
  , WorkerStats (..)
  , JobStats (..)
    -- * Inspection (for tests and the master loop)
  , liveWorkers
  , outstandingFor
  , pendingTasks
  , jobActive
  , batchJobOf
  , JobProgress (..)
  , jobProgress
  , inFlightFor
  , taskDeaths
  , awaitedWorkers
  , copiesMade
  , Death (..)
  ) where

import qualified Data.Map.Strict as M
import qualified Data.Set as S
import Data.Sequence ((<|))
import qualified Data.Sequence as Seq
import Herd.Core.Base (Batching, BatchId, JobId, Range (..), WorkerId, rangeIndices, rangeSize)
import Herd.Core.Farm.Loss
import Herd.Core.Farm.Presence
import Herd.Core.Farm.Sizing
import Herd.Core.Farm.State
import Herd.Core.Farm.Straggle
import Herd.Core.Farm.Assign

-- | Advance the machine by one event at the given time (seconds, from any
-- fixed origin).
step :: Double -> Event -> Sched -> (Sched, [Command])
step now ev s = case ev of
  WorkerJoined w
    | M.member w (schedWorkers s) -> (s, [])
    | otherwise ->
        let s1 = (putWorker w (Worker M.empty) s)
                   { schedJobs = M.map (\j -> j { jobPresence = joined now w (jobPresence j) }) (schedJobs s) }
        in assign now s1 []

  WorkerLost w death -> workerLost now w death s

  WorkersAwaited n -> starved now s { schedAwaited = max 0 n } []

  Tick -> let (s1, out) = speculate now s in assign now s1 out

  -- holding the last free worker frees them all ('assign'), so both
  -- directions may hand out work
  WorkerHeld w held ->
    assign now s { schedHeld = (if held then S.insert else S.delete) w (schedHeld s) } []

  JobSubmitted jid n batching target maxDeaths maxJobDeaths keepGoing copies ->
    jobSubmitted now jid n batching target (maxDeaths, maxJobDeaths) keepGoing copies s

  BatchCompleted w bid busy failure -> batchCompleted now w bid busy failure s

  JobCancelled jid -> let (s1, cancels) = endJob jid s in assign now s1 cancels

  BatchRefused w bid why -> case takeBatch w bid s of
    Nothing -> (s, [])
    Just (b, s1) -> case M.lookup (batchJob b) (schedJobs s1) of
      Just j -> let (s2, cancels) = endJob (jobId j) s1
                in assign now s2 (AbortJob (jobId j) (FunctionRefused why) (statsOf now j) : cancels)
      Nothing -> assign now s1 []

  BatchStopped w bid -> case takeBatch w bid s of
    Nothing -> (s, [])
    Just (b, s1)
      -- a batch stopped without being told (or before its twin's results
      -- were taken): its tasks go back to the front of the queue, uncharged
      | not (batchCancelled b), not (batchSuperseded b), Just j <- M.lookup (batchJob b) (schedJobs s1) ->
          assign now s1 { schedJobs = M.insert (jobId j) (requeue b j) (schedJobs s1) } [DropResults bid]
      | otherwise -> assign now s1 [DropResults bid]

-- INV-LOST, INV-POISON: a lost worker's batches of running jobs go back
-- to their jobs, the tasks that may have killed it charged.
workerLost :: Double -> WorkerId -> Maybe Death -> Sched -> (Sched, [Command])
workerLost now w death s = case M.lookup w (schedWorkers s) of
  Nothing -> (s, [])
  Just worker ->
    -- INV-LOST, INV-POISON: the lost worker's batches of running jobs
    -- go back to their jobs, the tasks that may have killed it charged
    let s1 = dropWorker w s
        -- a batch whose twin lives on (or whose results were taken
        -- from its twin) needs no second run: the twin forgets it
        twinned = [ t | b <- M.elems (workerOutstanding worker), not (batchSuperseded b), Just t <- [batchTwin b] ]
        s1' = foldr forgetTwin s1 twinned
        ofJob jid = [ x | x@(_, b) <- M.toAscList (workerOutstanding worker), batchJob b == jid, not (batchSuperseded b) ]
        batchesOf jid = [ x | x@(_, b) <- ofJob jid, not (twinLives b) ]
        copiedOn jid = [ x | x@(_, b) <- ofJob jid, twinLives b ]
        twinLives b = case batchTwin b of
          Just t -> any (M.member t . workerOutstanding) (M.elems (schedWorkers s1))
          Nothing -> False
        -- a death while the job's tasks ran counts against the job's bound too
        ranHere j = death /= Nothing && not (null (ofJob (jobId j)))
        counted j = if ranHere j then j { jobWorkerDeaths = jobWorkerDeaths j + 1 } else j
        back (st, out) j = case returnBatches death (batchesOf (jobId j)) (copiedOn (jobId j))
                                              (counted j) { jobPresence = left now w (jobPresence j) } of
          Requeued j'
            | ranHere j, jobWorkerDeaths j' >= jobMaxWorkerDeaths j' ->
                let (st', cancels) = endJob (jobId j) st
                in (st', out ++ [AbortJob (jobId j) (JobKilledWorkers (jobWorkerDeaths j') (maybe "" deathWhy death)) (statsOf now j')] ++ cancels)
          Requeued j' -> (st { schedJobs = M.insert (jobId j) j' (schedJobs st) }, out)
          Poisoned i d j'
            | jobKeepGoing j ->
                let failure = TaskKilledWorkers i d (maybe "" deathWhy death)
                in finishedAfter now (st { schedJobs = M.insert (jobId j) j' { jobDone = jobDone j' + 1 } (schedJobs st) })
                                 j' { jobDone = jobDone j' + 1 } (out ++ [TaskFailedAt (jobId j) i failure])
            | otherwise ->
                let (st', cancels) = endJob (jobId j) st
                in (st', out ++ [AbortJob (jobId j) (TaskKilledWorkers i d (maybe "" deathWhy death)) (statsOf now j)] ++ cancels)
        (s2, aborted) = foldl back (s1', []) (M.elems (schedJobs s1'))
    in starved now s2 aborted

-- A job submitted: queued, or answered at once (no task, no worker).
jobSubmitted :: Double -> JobId -> Int -> Batching -> Double -> (Int, Int) -> Bool -> Bool -> Sched -> (Sched, [Command])
jobSubmitted now jid n batching target (maxDeaths, maxJobDeaths) keepGoing copies s =
  let job = Job { jobId = jid, jobTotal = n, jobPending = if n > 0 then Seq.singleton (Range 0 n) else Seq.empty
                , jobPendingN = n, jobDone = 0, jobStart = now, jobBatching = batching
                , jobTarget = target, jobEstimate = Nothing
                , jobPresence = presentFrom now (M.keys (schedWorkers s))
                , jobMaxDeaths = max 1 maxDeaths, jobDeaths = mempty, jobSuspects = Seq.empty
                , jobWorkerDeaths = 0, jobMaxWorkerDeaths = max 1 maxJobDeaths
                , jobKeepGoing = keepGoing, jobCopies = copies }
  in if M.member jid (schedJobs s) then (s, [])   -- a repeated submission is ignored
     else if n == 0 then (s, [FinishJob jid (statsOf now job)])
     else if M.null (schedWorkers s) && schedAwaited s == 0 then (s, [AbortJob jid NoWorkersLeft (statsOf now job)])
     else assign now s { schedJobs = M.insert jid job (schedJobs s), schedTurn = jid : schedTurn s } []

-- A batch answered, whole or up to a failed task.
batchCompleted :: Double -> WorkerId -> BatchId -> Double -> Maybe (Int, String) -> Sched -> (Sched, [Command])
batchCompleted now w bid busy failure s = case takeBatch w bid s of
  Nothing -> (s, [DropResults bid])
  -- INV-TWIN: the copy that ends first counts; the other's results are dropped
  Just (b, s0) | batchSuperseded b -> assign now s0 [DropResults bid]
  Just (b, s0) -> let (s1, stopTwin) = maybe (s0, []) (\t -> supersede t s0) (batchTwin b) in case M.lookup (batchJob b) (schedJobs s1) of
    Just j -> case failure of
      Just (pos, msg) -> let (s2, out) = batchFailed now w bid busy b j pos msg s1 in (s2, stopTwin ++ out)
      Nothing ->
        let j1 = (credit w b busy j) { jobDone = jobDone j + batchTasks b
                                     , jobEstimate = Just (estimate (jobEstimate j) busy (batchTasks b)) }
            accept = AcceptResults (jobId j) bid (batchRanges b)
        in if jobDone j1 == jobTotal j1
             then let (s2, cancels) = endJob (jobId j) s1
                  in assign now s2 (accept : FinishJob (jobId j1) (statsOf now j1) : stopTwin ++ cancels)
             else assign now s1 { schedJobs = M.insert (jobId j) j1 (schedJobs s1) } (accept : stopTwin)
    Nothing -> assign now s1 (DropResults bid : stopTwin)

-- A batch whose task at this position failed: in a job that keeps going,
-- the tasks before it count and those after it go back to the queue;
-- otherwise the job ends with that task's error.
batchFailed :: Double -> WorkerId -> BatchId -> Double -> Batch -> Job -> Int -> String -> Sched -> (Sched, [Command])
batchFailed now w bid busy b j pos msg s1
  -- the tasks before the failed one gave results; those after it
  -- did not run: they go back to the queue
  | jobKeepGoing j =
      let at = max 0 (min (batchTasks b - 1) pos)
          (done, rest) = splitAtTask at (batchRanges b)
          (failedAt, after) = splitAtTask 1 rest
          idx = head (rangeIndices failedAt)
          j1 = (credit w b busy j) { jobDone = jobDone j + at + 1
                                   , jobPending = foldr (<|) (jobPending j) after
                                   , jobPendingN = jobPendingN j + sum (map rangeSize after) }
          out = [ AcceptResults (jobId j) bid done | at > 0 ] ++ [TaskFailedAt (jobId j) idx (TaskError idx msg)]
      in finishedAfter now s1 { schedJobs = M.insert (jobId j) j1 (schedJobs s1) } j1 out
  | otherwise =
      let j1 = credit w b busy j
          idx = rangeIndices (batchRanges b) !! max 0 (min (batchTasks b - 1) pos)
          (s2, cancels) = endJob (jobId j) s1
      in assign now s2 ([DropResults bid, AbortJob (jobId j) (TaskError idx msg) (statsOf now j1)] ++ cancels)

-- A job that kept going past a failed task: finished if that was its last.
finishedAfter :: Double -> Sched -> Job -> [Command] -> (Sched, [Command])
finishedAfter now s j out
  | jobDone j >= jobTotal j = let (s1, cancels) = endJob (jobId j) s
                              in assign now s1 (out ++ [FinishJob (jobId j) (statsOf now j)] ++ cancels)
  | otherwise = assign now s out

-- INV-AWAIT: with no live worker and none being restarted, every running
-- job fails; otherwise the tasks go out to whoever can take them.
starved :: Double -> Sched -> [Command] -> (Sched, [Command])
starved now s out
  | M.null (schedWorkers s) && schedAwaited s == 0 && not (M.null (schedJobs s)) =
      (s { schedJobs = M.empty, schedTurn = [] }, out ++ [ AbortJob (jobId j) NoWorkersLeft (statsOf now j) | j <- M.elems (schedJobs s) ])
  | otherwise = assign now s out
