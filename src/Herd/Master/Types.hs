-- | The records the master's modules and its callers share: what is known
-- of a worker, connection counters, a farm job as its caller hands it
-- over, and a stream process's caller side. Plain data, no behaviour.
module Herd.Master.Types
  ( WorkerInfo (..)
  , ConnectionCounters (..)
  , noCounters
  , JobSpec (..)
  , StreamEnds (..)
  , StreamEvent (..)
  ) where

import Control.Concurrent.STM (TQueue, TVar)
import qualified Data.ByteString as B
import Herd.Wire.Batch (ArgTable)
import Herd.Scheduler (Range, WorkerId)
import Herd.Task (TaskRef)
import Herd.Transport (TransportKind)
import Herd.Error (HerdError)

-- | What the master knows about a connected worker.
data WorkerInfo = WorkerInfo
  { infoId   :: !WorkerId
  , infoPid  :: !Int
  , infoHost :: !String
  , infoPeer :: !String   -- ^ the connection's address
  , infoGroup :: !String  -- ^ the launch that started it (@local@, @ssh:HOST@, @slurm@; empty: joined by hand)
  , infoTransport :: !TransportKind  -- ^ how it is linked to the master
  , infoCpu :: !(Maybe Int)  -- ^ the CPU it is pinned to, as it reported
  } deriving (Eq, Show)

-- | What happened to connections since the cluster started.
data ConnectionCounters = ConnectionCounters
  { countAccepted       :: !Int  -- ^ connections accepted
  , countBusyRefused    :: !Int  -- ^ closed at once: too many handshakes in progress
  , countAuthFailures   :: !Int  -- ^ peers that could not prove the secret
  , countHandshakeFailures :: !Int  -- ^ other failed handshakes: timeouts, bad frames, wrong build
  , countJoined         :: !Int  -- ^ workers that passed the handshake
  , countJoining        :: !Int  -- ^ handshakes in progress now
  , countWorkerMessages :: !Int  -- ^ messages from joined workers handed to the core
  , countRestarts       :: !Int  -- ^ local worker processes started again after dying
  } deriving (Eq, Show)

-- | All counters at zero.
noCounters :: ConnectionCounters
noCounters = ConnectionCounters 0 0 0 0 0 0 0 0

-- | A farm job as its caller hands it to the master: its encoded
-- arguments, and where results go. The functions run in the driver.
data JobSpec = JobSpec
  { specTasks    :: !Int
  , specRef      :: !TaskRef
  , specArgs     :: !ArgTable
    -- ^ every task's argument, encoded
  , specStage    :: [Range] -> B.ByteString -> IO (Either (Int, String) ())
    -- ^ decode a run of these tasks' results and keep them ('Left': the
    -- first that did not decode); a task may be staged twice when its
    -- worker was lost
  , specAccept   :: [Range] -> IO ()
    -- ^ these tasks' staged results are final; called once per task
  , specKeepGoing :: !Bool
    -- ^ a failed task is reported to 'specFail' and the job goes on;
    -- otherwise the first failure ends the job
  , specFail     :: Int -> HerdError -> IO ()
    -- ^ this task failed (only when keeping going); called once per task,
    -- never for a task whose result was accepted
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
