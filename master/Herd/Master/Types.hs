-- | The records the master's modules and its callers share: what is known
-- of a worker, connection counters, a farm job as its caller hands it
-- over, and a stream process's caller side. Plain data, no behaviour.
module Herd.Master.Types
  ( WorkerInfo (..)
  , ConnectionCounters (..)
  , noCounters
  , JobSpec (..)
  , FarmNews (..)
  , JobCallbacks (..)
  , StreamEnds (..)
  , StreamEvent (..)
  ) where

import Control.Concurrent.STM (TQueue, TVar)
import qualified Data.ByteString as B
import Herd.Wire.ArgTable (ArgTable)
import Herd.Core.Farm (JobStats, Range)
import Herd.Task (TaskRef)
import Herd.Core.Error (HerdError)
import Herd.Core.Master.Workers (ConnectionCounters (..), WorkerInfo (..), noCounters)

-- | A farm job as its caller hands it to the master: its encoded
-- arguments. Nothing of the caller's code: the shell never decodes a
-- result or runs a callback (it hands the caller 'FarmNews' instead).
data JobSpec = JobSpec
  { specTasks    :: !Int
  , specRef      :: !TaskRef
  , specArgs     :: !ArgTable
    -- ^ every task's argument, encoded
  , specKeepGoing :: !Bool
    -- ^ a failed task is reported ('NewsFailed') and the job goes on;
    -- otherwise the first failure ends the job
  }

-- | What the shell tells a farm's caller, in order, on the caller's queue
-- (in lists: what one step of the shell had for the job).
data FarmNews
  = NewsStaged ![Range] !B.ByteString
    -- ^ a run of these tasks' encoded results (a task may come twice when
    -- its first worker was lost)
  | NewsAccepted ![Range]   -- ^ these tasks' results are final (each task once)
  | NewsFailed !Int !HerdError
    -- ^ this task failed (only when keeping going; never a task accepted)
  | NewsDone !(Either HerdError JobStats)  -- ^ the job ended: nothing follows

-- | What a farm's caller does with its news, on its own thread.
data JobCallbacks = JobCallbacks
  { onStaged   :: [Range] -> B.ByteString -> IO (Either (Int, String) ())
    -- ^ decode a run of results and keep them ('Left': the first that did
    -- not decode, and why)
  , onAccepted :: [Range] -> IO ()
  , onFailed   :: Int -> HerdError -> IO ()
  }

-- | A stream process's caller side, as the master sees it.
data StreamEnds = StreamEnds
  { endsOutput  :: !(TQueue StreamEvent)  -- ^ to the caller's output list
  , endsCredit  :: !(TVar Int)            -- ^ input elements the worker took, not yet counted by the feeder
  }

-- | What the caller of a stream process receives.
data StreamEvent
  = StreamElements [(Int, B.ByteString)]  -- ^ runs of encoded output elements (a count, the bytes), in order
  | StreamFinished                 -- ^ the output ended
  | StreamBroken String            -- ^ the process failed, or its worker was lost
