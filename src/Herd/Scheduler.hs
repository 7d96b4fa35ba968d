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
--
-- Batch sizes adapt to the measured time per task ("Herd.Scheduler.Sizing").
module Herd.Scheduler
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
  ) where

import Data.List (sortOn)
import qualified Data.Map.Strict as M
import Data.Sequence (Seq, (<|))
import qualified Data.Sequence as Seq
import Herd.Base (BatchId, Batching (..), JobId, Range (..), WorkerId, rangeIndices, rangeSize, takeTasks)
import Herd.Scheduler.Presence
import Herd.Scheduler.Sizing

data Batch = Batch
  { batchJob    :: !JobId
  , batchRanges :: ![Range]
  , batchTasks  :: !Int
  } deriving (Show)

data Worker = Worker
  { workerOutstanding :: !(M.Map BatchId Batch)
  } deriving (Show)

data Job = Job
  { jobId        :: !JobId
  , jobTotal     :: !Int
  , jobPending   :: !(Seq Range)
  , jobPendingN  :: !Int
  , jobDone      :: !Int
  , jobStart     :: !Double
  , jobBatching  :: !Batching
  , jobTarget    :: !Double
  , jobEstimate  :: !(Maybe Double)   -- ^ seconds per task, moving average
  , jobPresence  :: !Presence
  } deriving (Show)

-- | The scheduler's state.
data Sched = Sched
  { schedWorkers   :: !(M.Map WorkerId Worker)
  , schedJobs      :: !(M.Map JobId Job)
  , schedTurn      :: ![JobId]
    -- ^ the running jobs in the order they get the next batch (INV-FAIR)
  , schedNextBatch :: !BatchId
  } deriving (Show)

-- | A scheduler with no workers and no job.
emptySched :: Sched
emptySched = Sched M.empty M.empty [] 1

-- | Why a job ended without all its results.
data JobFailure
  = TaskError !Int !String        -- ^ task index and the exception's text
  | FunctionRefused !String       -- ^ a worker could not run the function
  | NoWorkersLeft                 -- ^ no live worker remained
  deriving (Eq, Show)

-- | Something that happened.
data Event
  = WorkerJoined !WorkerId
  | WorkerLost !WorkerId
  | JobSubmitted !JobId !Int !Batching !Double
    -- ^ a job of this many tasks, with a batching policy and target seconds per batch
  | BatchCompleted !WorkerId !BatchId !Double !(Maybe (Int, String))
    -- ^ a batch's results arrived, with the worker's busy seconds and the
    -- first failed task (position within the batch, message), if any
  | BatchRefused !WorkerId !BatchId !String
    -- ^ the worker could not run the function at all
  | JobCancelled !JobId
    -- ^ the caller gave up on the job; its outstanding batches become stale
  deriving (Eq, Show)

-- | Something the master loop must do.
data Command
  = SendBatch !WorkerId !BatchId ![Range]
    -- ^ send these tasks to this worker as one batch
  | AcceptResults !JobId !BatchId ![Range]
    -- ^ the batch's results are for these tasks of this job: deliver them
  | DropResults !BatchId
    -- ^ the batch's results are stale or unwanted: drop them
  | FinishJob !JobId !JobStats
  | AbortJob !JobId !JobFailure !JobStats
  deriving (Eq, Show)

-- | The workers known to the scheduler.
liveWorkers :: Sched -> [WorkerId]
liveWorkers = M.keys . schedWorkers

-- | Outstanding batches of a worker, with their tasks.
outstandingFor :: WorkerId -> Sched -> [(BatchId, [Range])]
outstandingFor w s = maybe [] (map (\(b, x) -> (b, batchRanges x)) . M.toList . workerOutstanding)
                               (M.lookup w (schedWorkers s))

-- | The job an outstanding batch belongs to.
batchJobOf :: WorkerId -> BatchId -> Sched -> Maybe JobId
batchJobOf w b s = batchJob <$> (M.lookup w (schedWorkers s) >>= M.lookup b . workerOutstanding)

-- | Tasks of the running jobs not yet given to any worker.
pendingTasks :: Sched -> Int
pendingTasks = sum . map jobPendingN . M.elems . schedJobs

-- | How far a running job has come.
data JobProgress = JobProgress
  { progressJob     :: !JobId
  , progressTotal   :: !Int     -- ^ its tasks
  , progressDone    :: !Int     -- ^ tasks whose results were accepted
  , progressPending :: !Int     -- ^ tasks not yet handed to a worker
  , progressStarted :: !Double  -- ^ when it was submitted
  } deriving (Eq, Show)

-- | The running jobs' progress, by job number.
jobProgress :: Sched -> [JobProgress]
jobProgress s = [ JobProgress (jobId j) (jobTotal j) (jobDone j) (jobPendingN j) (jobStart j) | j <- M.elems (schedJobs s) ]

-- | Tasks handed to a worker whose results have not come back.
inFlightFor :: WorkerId -> Sched -> Int
inFlightFor w s = maybe 0 (sum . map batchTasks . M.elems . workerOutstanding) (M.lookup w (schedWorkers s))

-- | Whether any job is running.
jobActive :: Sched -> Bool
jobActive = not . M.null . schedJobs

-- | Advance the machine by one event at the given time (seconds, from any
-- fixed origin).
step :: Double -> Event -> Sched -> (Sched, [Command])
step now ev s = case ev of
  WorkerJoined w
    | M.member w (schedWorkers s) -> (s, [])
    | otherwise ->
        let s1 = s { schedWorkers = M.insert w (Worker M.empty) (schedWorkers s)
                   , schedJobs = M.map (\j -> j { jobPresence = joined now w (jobPresence j) }) (schedJobs s) }
        in assign s1 []

  WorkerLost w -> case M.lookup w (schedWorkers s) of
    Nothing -> (s, [])
    Just worker ->
      -- INV-LOST: the lost worker's batches of running jobs go back to the
      -- front of their jobs' pending queues
      let s1 = s { schedWorkers = M.delete w (schedWorkers s) }
          returned jid = [ b | b <- M.elems (workerOutstanding worker), batchJob b == jid ]
          requeue j = j { jobPending = foldr (\b q -> foldr (<|) q (batchRanges b)) (jobPending j) (returned (jobId j))
                        , jobPendingN = jobPendingN j + sum (map batchTasks (returned (jobId j)))
                        , jobPresence = left now w (jobPresence j) }
          s2 = s1 { schedJobs = M.map requeue (schedJobs s1) }
      in if M.null (schedWorkers s2) && not (M.null (schedJobs s2))
           then ( s2 { schedJobs = M.empty, schedTurn = [] }
                , [ AbortJob (jobId j) NoWorkersLeft (statsOf now j) | j <- M.elems (schedJobs s2) ] )
           else assign s2 []

  JobSubmitted jid n batching target ->
    let job = Job { jobId = jid, jobTotal = n, jobPending = if n > 0 then Seq.singleton (Range 0 n) else Seq.empty
                  , jobPendingN = n, jobDone = 0, jobStart = now, jobBatching = batching
                  , jobTarget = target, jobEstimate = Nothing
                  , jobPresence = presentFrom now (M.keys (schedWorkers s)) }
    in if M.member jid (schedJobs s) then (s, [])   -- a repeated submission is ignored
       else if n == 0 then (s, [FinishJob jid (statsOf now job)])
       else if M.null (schedWorkers s) then (s, [AbortJob jid NoWorkersLeft (statsOf now job)])
       else assign s { schedJobs = M.insert jid job (schedJobs s), schedTurn = jid : schedTurn s } []

  BatchCompleted w bid busy failure -> case takeBatch w bid s of
    Nothing -> (s, [DropResults bid])
    Just (b, s1) -> case M.lookup (batchJob b) (schedJobs s1) of
      Just j -> case failure of
        Just (pos, msg) ->
          let j1 = credit w b busy j
              idx = rangeIndices (batchRanges b) !! max 0 (min (batchTasks b - 1) pos)
          in assign (endJob (jobId j) s1) [DropResults bid, AbortJob (jobId j) (TaskError idx msg) (statsOf now j1)]
        Nothing ->
          let j1 = (credit w b busy j) { jobDone = jobDone j + batchTasks b
                                       , jobEstimate = Just (estimate (jobEstimate j) busy (batchTasks b)) }
              accept = AcceptResults (jobId j) bid (batchRanges b)
          in if jobDone j1 == jobTotal j1
               then assign (endJob (jobId j) s1) [accept, FinishJob (jobId j1) (statsOf now j1)]
               else assign s1 { schedJobs = M.insert (jobId j) j1 (schedJobs s1) } [accept]
      Nothing -> assign s1 [DropResults bid]

  JobCancelled jid -> assign (endJob jid s) []

  BatchRefused w bid why -> case takeBatch w bid s of
    Nothing -> (s, [])
    Just (b, s1) -> case M.lookup (batchJob b) (schedJobs s1) of
      Just j -> assign (endJob (jobId j) s1) [AbortJob (jobId j) (FunctionRefused why) (statsOf now j)]
      Nothing -> assign s1 []

-- Forget a job: its outstanding batches stay with their workers (their
-- results will be dropped) but no more of its tasks are handed out.
endJob :: JobId -> Sched -> Sched
endJob jid s = s { schedJobs = M.delete jid (schedJobs s), schedTurn = filter (/= jid) (schedTurn s) }

-- Remove an outstanding batch from a worker.
takeBatch :: WorkerId -> BatchId -> Sched -> Maybe (Batch, Sched)
takeBatch w bid s = do
  worker <- M.lookup w (schedWorkers s)
  b <- M.lookup bid (workerOutstanding worker)
  let worker' = worker { workerOutstanding = M.delete bid (workerOutstanding worker) }
  pure (b, s { schedWorkers = M.insert w worker' (schedWorkers s) })

credit :: WorkerId -> Batch -> Double -> Job -> Job
credit w b busy j = j { jobPresence = credited w (batchTasks b) busy (jobPresence j) }

statsOf :: Double -> Job -> JobStats
statsOf now j = jobStatsOf now (jobStart j) (jobTotal j) (jobPresence j)

-- The next batch's size for this job, with this many live workers.
sizeOf :: Int -> Job -> Int
sizeOf live j = batchSize (jobBatching j) (jobEstimate j) (jobTarget j) (jobPendingN j) live

-- Whether a worker with these outstanding batches should get another now.
wantsWork :: Job -> Worker -> Bool
wantsWork j worker = wantsBatch (jobBatching j) (jobEstimate j) (jobTarget j) (M.size (workerOutstanding worker))

-- Hand out pending tasks: first to workers with nothing outstanding (fewest
-- first), then a prefetch to those that want one. Each batch comes from the
-- first job in turn that has pending tasks this worker should take; that
-- job then goes to the back of the turn (INV-FAIR: concurrent jobs take
-- workers in turn).
assign :: Sched -> [Command] -> (Sched, [Command])
assign s acc
  | M.null (schedJobs s) = (s, acc)
  | otherwise = go s (sortOn (M.size . workerOutstanding . snd) (M.toList (schedWorkers s))) acc
  where
    go st [] out = (st, out)
    go st ((w, _) : rest) out = case M.lookup w (schedWorkers st) of
      Nothing -> go st rest out
      Just worker -> case [ j | jid <- schedTurn st, Just j <- [M.lookup jid (schedJobs st)]
                              , jobPendingN j > 0, wantsWork j worker ] of
        [] -> go st rest out
        j : _ ->
          let live = M.size (schedWorkers st)
              (ranges, n, pending') = takeTasks (sizeOf live j) (jobPending j)
              bid = schedNextBatch st
              worker' = worker { workerOutstanding = M.insert bid (Batch (jobId j) ranges n)
                                                              (workerOutstanding worker) }
              st' = st { schedWorkers = M.insert w worker' (schedWorkers st)
                       , schedJobs = M.insert (jobId j) j { jobPending = pending', jobPendingN = jobPendingN j - n }
                                              (schedJobs st)
                       , schedTurn = filter (/= jobId j) (schedTurn st) ++ [jobId j]
                       , schedNextBatch = bid + 1 }
              -- a worker that can take a prefetch stays in line for one more
              again = [ (w, worker') | M.size (workerOutstanding worker') < 2 ]
          in go st' (rest ++ again) (out ++ [SendBatch w bid ranges])
