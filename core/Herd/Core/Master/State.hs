-- | The master core's state ("Herd.Core.Master") and what a watcher can
-- read from it: the running jobs' progress, streams per worker, the
-- evolve call. Pure data; every change to it is "Herd.Core.Master"'s
-- 'Herd.Core.Master.step'.
module Herd.Core.Master.State
  ( Core (..)
  , Stream (..)
  , Running (..)
  , CallView (..)
  , emptyCore
  , coreFarmJobs
  , coreJobView
  , coreStreamCount
  , coreSessionView
  , coreRunsExchange
  ) where

import Data.Maybe (listToMaybe, mapMaybe)
import qualified Data.Map.Strict as M
import Data.Word (Word64)
import Herd.Core.Base (JobId, Range (..), TaskRef (..), WorkerId)
import Herd.Core.Exchange (Exchange)
import Herd.Core.Dataset.Stage (Stage)
import Herd.Core.Master.Events (FarmJob (..))
import Herd.Core.Master.Expect (Expected)
import Herd.Core.Session (Hosted, SessionView, hostView)
import Herd.Core.Monitor.Ledger (Ledger, emptyLedger)
import Herd.Core.Shared (Shares, emptyShares)
import Herd.Core.Steal (Steals, emptySteals)
import Herd.Core.Farm (Sched, emptySched)
import qualified Herd.Core.Farm as S

-- | An open stream process.
data Stream = Stream
  { streamWorker  :: !WorkerId  -- ^ the worker it runs on
  , streamAllowed :: !Int    -- ^ output elements the worker may still send
  }

-- | The master's state.
data Core = Core
  { coreSched    :: !Sched                      -- ^ the farm's scheduler
  , coreLinks    :: !(M.Map WorkerId Expected)   -- ^ per live link, the batches due on it
  , coreFarms    :: !(M.Map JobId FarmJob)       -- ^ the running farm jobs
  , coreStreams  :: !(M.Map Word64 Stream)       -- ^ the open stream processes
  , coreSessions :: !(M.Map Word64 Running)     -- ^ the running sessions, by the numbers their callers gave them
  , coreResets   :: !(M.Map WorkerId [Word64])   -- ^ the sessions each worker owes a 'StatesCleared', oldest first
  , coreRunners  :: !(M.Map WorkerId TaskRef)    -- ^ the evolve function each worker was told last
  , coreStopping :: !Bool   -- ^ the cluster is stopping: no new link or job is taken
  , coreRequeued :: ![(WorkerId, Double, [Range])]  -- ^ a lost worker's tasks not yet re-sent, for the log
  , coreLedger   :: !Ledger  -- ^ what each worker has done since it joined, for watching the cluster
  , coreShares   :: !Shares  -- ^ the shared values, and who holds them ("Herd.Core.Shared")
  , coreExchanges :: !(M.Map Word64 Exchange)  -- ^ the keyed reductions running ("Herd.Core.Exchange")
  , coreStages   :: !(M.Map Word64 Stage)      -- ^ the datasets' narrow steps running ("Herd.Core.Dataset.Stage")
  , coreSteals   :: !Steals                    -- ^ children of "Herd.Par" stolen between workers ("Herd.Core.Steal")
  }

-- | A running call of any kind (a farm, a stream, an evolve or Ref call,
-- a keyed reduction), as a watcher is shown it.
data CallView = CallView
  { callKind     :: !String      -- ^ @farm@, @stream@, @evolve@ (evolve and Ref calls), @reduce@ (and shuffles) or @dataset@
  , callFunction :: !String      -- ^ its function's name
  , callLeft     :: !Int         -- ^ its units not yet answered (tasks, evolutions, partitions; 0 for a stream)
  , callWorkers  :: ![WorkerId]  -- ^ the workers with some of its work now
  } deriving (Eq, Show)

-- | A session the core hosts: its machine, the most workers it may have,
-- and the evolve function its requests to evolve need on a worker.
data Running = Running
  { runHosted   :: !Hosted
  , runLimit    :: !(Maybe Int)
  , runFunction :: !(Maybe TaskRef)
  }

-- | No links, no jobs.
emptyCore :: Core
emptyCore = Core emptySched M.empty M.empty M.empty M.empty M.empty M.empty False [] emptyLedger emptyShares M.empty M.empty emptySteals

-- | The farm jobs running.
coreFarmJobs :: Core -> [JobId]
coreFarmJobs = M.keys . coreFarms

-- | The running farm jobs: each one's function name and progress.
coreJobView :: Core -> [(String, S.JobProgress)]
coreJobView core = [ (maybe "" (refName . farmRef) (M.lookup (S.progressJob p) (coreFarms core)), p)
                   | p <- S.jobProgress (coreSched core) ]

-- | Open stream processes per worker.
coreStreamCount :: Core -> M.Map WorkerId Int
coreStreamCount core = M.fromListWith (+) [ (streamWorker s, 1) | s <- M.elems (coreStreams core) ]

-- | The running evolve call, as a watcher is shown it (of several, the
-- oldest that has something to show).
coreSessionView :: Core -> Maybe SessionView
coreSessionView core = listToMaybe (mapMaybe (hostView . runHosted) (M.elems (coreSessions core)))

-- | Whether this keyed reduction (or shuffle) is running.
coreRunsExchange :: Word64 -> Core -> Bool
coreRunsExchange xid = M.member xid . coreExchanges
