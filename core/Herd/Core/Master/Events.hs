-- | The vocabulary of the master's core ("Herd.Core.Master"): the events a
-- driver feeds it and the commands it returns. Plain data; the core gives
-- them their meaning. Both can be printed and compared, so a test can show
-- and check a trace of the core.
module Herd.Core.Master.Events
  ( FarmJob (..)
  , Event (..)
  , Command (..)
  , eventKind
  ) where

import qualified Data.ByteString as B
import Data.Word (Word64)
import Herd.Core.Base (BatchId, Batching, JobId, Range, TaskRef, WorkerId)
import Herd.Core.Error (HerdError)
import Herd.Core.Exchange (ExchangeJob)
import Herd.Core.Dataset.Stage (StageJob)
import Herd.Core.Fault (LinkFault, StreamBreak)
import Herd.Core.Session (SessionOutcome, SessionRequest)
import Herd.Core.Packet.Policy (Urgency)
import Herd.Core.Farm (JobStats)
import Herd.Core.Wire (FromWorker, ToWorker)

-- | A farm job as the core knows it.
data FarmJob = FarmJob
  { farmRef      :: !TaskRef
  , farmTasks    :: !Int
  , farmBatching :: !Batching
  , farmTarget   :: !Double    -- ^ seconds of work per batch
  , farmMaxDeaths :: !Int      -- ^ workers one task may kill before the job fails
  , farmMaxJobDeaths :: !Int   -- ^ workers the job's tasks may kill before it stops
  , farmKeepGoing :: !Bool     -- ^ a failed task is answered alone, and the job goes on
  , farmCopies   :: !Bool      -- ^ a straggling batch may be copied to an idle worker
  } deriving (Eq, Show)

-- | Something that happened, or that a caller asks for.
data Event
  = LinkUp !WorkerId                    -- ^ a worker passed the handshake
  | LinkDown !WorkerId !LinkFault       -- ^ its link or its process died
  | LinkBroken !WorkerId !LinkFault     -- ^ it broke the protocol: drop it (what ran there is not charged)
  | WorkersAwaited !Int                 -- ^ this many lost workers are being restarted now
  | Tick                                -- ^ time passed (a few times a second): look for stragglers
  | WorkerHeld !WorkerId !Bool          -- ^ the worker is near its memory limit (feed it no more while others can take work), or fell back
  | Received !WorkerId !FromWorker      -- ^ one message from a worker
  | FarmSubmit !JobId !FarmJob
  | FarmCancel !JobId                   -- ^ the caller gave up (no answer is due)
  | FarmBroken !JobId !HerdError        -- ^ an argument or a result failed in the driver: end the job
  | BatchNotSent !WorkerId !BatchId !HerdError
    -- ^ the driver could not send a batch (its job is gone): end its job
  | OpenStream !Word64 !TaskRef !Int    -- ^ a stream process, and its flow window
  | EndStreamInput !Word64
  | ConsumedStream !Word64 !Int         -- ^ the caller read this many more output elements
  | CloseStream !Word64                 -- ^ the caller wants no more output
  | SessionStart !Word64 !SessionRequest  -- ^ an evolve session, under its caller's number
  | SessionCancel !Word64               -- ^ its caller gave up (no answer is due)
  | ShareValue !Word64 !B.ByteString     -- ^ hold this encoded value on every worker under this number ("Herd.Core.Shared")
  | Unshare !Word64                     -- ^ drop it everywhere
  | ExchangeStart !Word64 !ExchangeJob   -- ^ a keyed reduction ("Herd.Core.Exchange"), under its caller's number
  | ExchangeCancel !Word64               -- ^ its caller gave up (no answer is due)
  | StageStart !Word64 !StageJob         -- ^ a dataset's narrow step ("Herd.Core.Dataset.Stage"), under its caller's number
  | StageCancel !Word64                  -- ^ its caller gave up (no answer is due)
  | DatasetsDrop ![Word64]               -- ^ every worker forgets these datasets' partitions
  | Stop                                -- ^ the cluster stops: answer everyone, stop the workers
  deriving (Eq, Show)

-- | What the driver must do, in order.
data Command
  = Send !WorkerId !Urgency !ToWorker
  | SendAll !WorkerId ![ToWorker]
    -- ^ these messages to one worker, in order, the last one urgent: one
    -- hold of its sender for them all (an evolve call's first asks)
  | SendBatch !WorkerId !JobId !BatchId !TaskRef ![Range]
    -- ^ send these tasks' arguments (encoded already) as one batch
  | Stage !JobId ![Range] !B.ByteString
    -- ^ a run of these tasks' encoded results (a task may be staged twice
    -- when its first worker was lost)
  | Accept !JobId ![Range]              -- ^ these tasks' staged results are final
  | FailTask !JobId !Int !HerdError     -- ^ in a job that keeps going: this task failed
  | JobDone !JobId !(Either HerdError JobStats)
  | StreamOpened !Word64 !(Either HerdError WorkerId)
  | StreamOutput !Word64 !Int !B.ByteString  -- ^ a run of this many output elements
  | StreamGrant !Word64 !Int            -- ^ the caller may send this many more input elements
  | StreamEnded !Word64 !(Maybe StreamBreak) -- ^ finished ('Nothing') or broken, with why
  | SessionEnded !Word64 !(Either HerdError SessionOutcome)
    -- ^ the session under this number ended (or could not start): tell its caller
  | ShareTo !WorkerId !Word64 !B.ByteString
    -- ^ this worker must hold this shared value ("Herd.Core.Shared") before
    -- anything sent after: send it, or see that its host agent has it
  | Unshared !Word64                    -- ^ the value is dropped everywhere: host agents may forget it
  | ExchangeEnded !Word64 !(Either HerdError [B.ByteString])
    -- ^ the keyed reduction or dataset step under this number ended:
    -- each partition's combined bytes (a step's answers), in order, or
    -- why not; tell its caller
  | Drop !WorkerId !LinkFault           -- ^ close this link; stop reading it
  | Note !String                        -- ^ a line for the log
  deriving (Eq, Show)

-- | The event's kind, without its contents (for traces).
eventKind :: Event -> String
eventKind ev = case ev of
  LinkUp _ -> "link up"
  LinkDown _ _ -> "link down"
  LinkBroken _ _ -> "link broken"
  WorkersAwaited _ -> "workers awaited"
  Tick -> "tick"
  WorkerHeld _ _ -> "worker held"
  Received _ _ -> "message"
  FarmSubmit _ _ -> "farm submitted"
  FarmCancel _ -> "farm cancelled"
  FarmBroken _ _ -> "farm broken"
  BatchNotSent {} -> "batch not sent"
  OpenStream {} -> "stream opened"
  EndStreamInput _ -> "stream input ended"
  ConsumedStream _ _ -> "stream output consumed"
  CloseStream _ -> "stream closed"
  SessionStart _ _ -> "session started"
  SessionCancel _ -> "session cancelled"
  ShareValue _ _ -> "value shared"
  Unshare _ -> "value unshared"
  ExchangeStart _ _ -> "keyed reduction start"
  ExchangeCancel _ -> "keyed reduction cancel"
  StageStart _ _ -> "dataset step start"
  StageCancel _ -> "dataset step cancel"
  DatasetsDrop _ -> "datasets dropped"
  Stop -> "stop"
