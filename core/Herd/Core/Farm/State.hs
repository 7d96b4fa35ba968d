-- | The task farm scheduler's state and vocabulary: its workers, jobs and
-- outstanding batches, the events it is fed and the commands it returns,
-- and the questions a driver or a test may ask of it. Plain data; every
-- change to it is "Herd.Core.Farm"'s 'Herd.Core.Farm.step'. Pure.
module Herd.Core.Farm.State
  ( -- * State
    Batch (..)
  , Worker (..)
  , Job (..)
  , Sched (..)
  , emptySched
  , putWorker
  , dropWorker
    -- * Vocabulary
  , Death (..)
  , Event (..)
  , Command (..)
  , JobFailure (..)
    -- * Inspection
  , liveWorkers
  , outstandingFor
  , batchJobOf
  , pendingTasks
  , JobProgress (..)
  , jobProgress
  , inFlightFor
  , jobActive
  , taskDeaths
  , awaitedWorkers
  , copiesMade
  ) where

import qualified Data.IntMap.Strict as IM
import qualified Data.Map.Strict as M
import qualified Data.Set as S
import Data.Sequence (Seq)
import Herd.Core.Base (BatchId, Batching (..), JobId, Range (..), WorkerId)
import Herd.Core.Farm.Presence

-- | A batch handed to a worker whose results have not come back.
data Batch = Batch
  { batchJob     :: !JobId
  , batchRanges  :: ![Range]
  , batchTasks   :: !Int
  , batchSuspect :: !Bool
    -- ^ one task that was running when a worker died: the worker that
    -- runs it gets nothing else meanwhile, so a second death is its own
  , batchSent    :: !Double   -- ^ when it was handed out
  , batchTwin    :: !(Maybe BatchId)
    -- ^ the other copy of a batch run twice because one ran far too long
  , batchSuperseded :: !Bool
    -- ^ its twin's results were accepted: its own are dropped, and its
    -- tasks are not run again if its worker is lost
  , batchCancelled :: !Bool
    -- ^ its worker was told to stop it ('CancelBatch'): its results are
    -- not wanted, and its worker is free once it answers
  } deriving (Show)

-- | A live worker.
newtype Worker = Worker
  { workerOutstanding :: M.Map BatchId Batch
  } deriving (Show)

-- | A running job.
data Job = Job
  { jobId        :: !JobId
  , jobTotal     :: !Int
  , jobPending   :: !(Seq Range)   -- ^ tasks not handed out, suspects aside
  , jobPendingN  :: !Int           -- ^ how many tasks are not handed out, suspects included
  , jobDone      :: !Int
  , jobStart     :: !Double
  , jobBatching  :: !Batching
  , jobTarget    :: !Double
  , jobEstimate  :: !(Maybe Double)   -- ^ seconds per task, moving average
  , jobPresence  :: !Presence
  , jobMaxDeaths :: !Int
    -- ^ a task that was running on this many workers that died ends the job
  , jobDeaths    :: !(IM.IntMap Int)  -- ^ task index -> workers that died while it ran
  , jobWorkerDeaths :: !Int           -- ^ workers that died while running its tasks
  , jobMaxWorkerDeaths :: !Int        -- ^ so many end the job
  , jobSuspects  :: !(Seq Int)
    -- ^ tasks that may have killed a worker, not handed out: each goes
    -- alone to a worker with nothing else to do
  , jobKeepGoing :: !Bool
    -- ^ a failed task is reported on its own ('TaskFailedAt') and the job
    -- goes on; otherwise it ends the job
  , jobCopies    :: !Bool
    -- ^ a straggling batch may be copied to an idle worker
  } deriving (Show)

-- | The scheduler's state.
data Sched = Sched
  { schedWorkers   :: !(M.Map WorkerId Worker)
  , schedJobs      :: !(M.Map JobId Job)
  , schedTurn      :: ![JobId]
    -- ^ the running jobs in the order they get the next batch (INV-FAIR)
  , schedNextBatch :: !BatchId
  , schedAwaited   :: !Int
    -- ^ workers being restarted: while some are, a job waits for them
    -- rather than failing for want of workers
  , schedHeld      :: !(S.Set WorkerId)
    -- ^ workers near their memory limit: no new batch while another worker can take it
  , schedCopies    :: !Int
    -- ^ straggler copies started since the start ("Herd.Core.Farm.Straggle")
  , schedHungry    :: !(S.Set WorkerId)
    -- ^ the workers with fewer than two batches outstanding: the only
    -- ones 'Herd.Core.Farm.Assign.assign' can feed ('putWorker' keeps it)
  , schedIdle      :: !(S.Set WorkerId)
    -- ^ of those, the ones with none: the only ones it can feed while no
    -- job takes a prefetch
  } deriving (Show)

-- | A scheduler with no workers and no job.
emptySched :: Sched
emptySched = Sched M.empty M.empty [] 1 0 S.empty 0 S.empty S.empty

-- | Set a worker's outstanding batches, keeping 'schedHungry' and
-- 'schedIdle' true.
putWorker :: WorkerId -> Worker -> Sched -> Sched
putWorker w wk s = s
  { schedWorkers = M.insert w wk (schedWorkers s)
  , schedHungry = (if n < 2 then S.insert else S.delete) w (schedHungry s)
  , schedIdle = (if n == 0 then S.insert else S.delete) w (schedIdle s) }
  where n = M.size (workerOutstanding wk)

-- | Forget a worker.
dropWorker :: WorkerId -> Sched -> Sched
dropWorker w s = s { schedWorkers = M.delete w (schedWorkers s), schedHeld = S.delete w (schedHeld s)
                   , schedHungry = S.delete w (schedHungry s), schedIdle = S.delete w (schedIdle s) }

-- | How a worker died, as far as its link tells: the oldest batch it held
-- and how many of that batch's results had arrived (the task after those,
-- or one of the worker's later tasks whose results it had not sent yet,
-- was running), and why the link went down.
data Death = Death
  { deathBatch :: !BatchId
  , deathGot   :: !Int
  , deathWhy   :: !String
  } deriving (Eq, Show)

-- | Why a job ended without all its results.
data JobFailure
  = TaskError !Int !String        -- ^ task index and the exception's text
  | FunctionRefused !String       -- ^ a worker could not run the function
  | NoWorkersLeft                 -- ^ no live worker remained
  | TaskKilledWorkers !Int !Int !String
    -- ^ this task was running on this many workers that died; the last
    -- death's reason
  | JobKilledWorkers !Int !String
    -- ^ this many workers died while running the job's tasks (its
    -- bound); the last death's reason
  deriving (Eq, Show)

-- | Something that happened.
data Event
  = WorkerJoined !WorkerId
  | WorkerLost !WorkerId !(Maybe Death)
    -- ^ a worker is gone: its process or link died ('Just', which charges
    -- the tasks that may have been running), or it was dropped for
    -- another reason ('Nothing': a protocol error, the cluster stopping)
  | JobSubmitted !JobId !Int !Batching !Double !Int !Int !Bool !Bool
    -- ^ a job of this many tasks, with a batching policy, target seconds
    -- per batch, how many worker deaths one task may cause, how many the
    -- whole job may, whether it keeps going past failed tasks, and whether
    -- a straggling batch may be copied
  | BatchCompleted !WorkerId !BatchId !Double !(Maybe (Int, String))
    -- ^ a batch's results arrived, with the worker's busy seconds and the
    -- first failed task (position within the batch, message), if any
  | BatchRefused !WorkerId !BatchId !String
    -- ^ the worker could not run the function at all
  | JobCancelled !JobId
    -- ^ the caller gave up on the job; its outstanding batches become stale
  | WorkersAwaited !Int
    -- ^ this many lost workers are being restarted now
  | Tick
    -- ^ time passed: run a copy of any batch that has run far longer than
    -- its estimate, if a worker is idle ("Herd.Core.Farm.Straggle")
  | WorkerHeld !WorkerId !Bool
    -- ^ the worker is near its memory limit ('True': give it no new batch
    -- while another worker can take it) or has fallen back ('False')
  | BatchStopped !WorkerId !BatchId
    -- ^ the worker stopped a batch early, as it was told ('CancelBatch'):
    -- what it sent of it is not wanted
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
  | TaskFailedAt !JobId !Int !JobFailure
    -- ^ in a job that keeps going: this task failed, and has no result
  | CancelBatch !WorkerId !BatchId
    -- ^ tell the worker to stop this batch: its twin's results were
    -- accepted, or its job ended; it answers with 'BatchStopped' (or its
    -- results, if it had finished)
  | SlowBatch !WorkerId !BatchId !Int !Double !Double !WorkerId
    -- ^ for the log: this worker's batch of this many tasks has run this
    -- many seconds against an estimate of that many; a copy went to the
    -- other worker
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

-- | Workers being restarted now.
awaitedWorkers :: Sched -> Int
awaitedWorkers = schedAwaited

-- | A running job's tasks that were running on workers that died, with
-- how many died.
taskDeaths :: JobId -> Sched -> [(Int, Int)]
taskDeaths jid s = maybe [] (IM.toList . jobDeaths) (M.lookup jid (schedJobs s))

-- | Straggler copies started since the start.
copiesMade :: Sched -> Int
copiesMade = schedCopies
