-- | herd's protocol messages after the handshake, as values: what the
-- master sends a worker, what a worker answers, and how soon each must
-- leave. Their encodings are in "Herd.Core.Wire". Pure.
module Herd.Core.Wire.Messages
  ( ToWorker (..)
  , FromWorker (..)
  , toWorkerUrgency
  , fromWorkerUrgency
  ) where

import qualified Data.ByteString as B
import Data.Text (Text)
import Data.Word (Word32, Word64)
import Herd.Core.Base (TaskRef (..))
import Herd.Core.Packet.Policy (Urgency (..))

-- | Messages from master to worker. After the handshake every frame is a
-- packet ("Herd.Packet") of these.
data ToWorker
  = RunBatch
      { runBatchId :: !Word64
      , runRef     :: !TaskRef
      , runCount   :: !Word32   -- ^ the number of arguments that follow
      }
    -- ^ Start a batch; its arguments follow in 'Args' messages, in order.
  | Args !Word32 !B.ByteString
    -- ^ the next arguments of the batch, this many, their @store@
    -- encodings back to back ("Herd.Wire.ArgTable")
  | Shutdown                    -- ^ stop serving and exit
  | StreamOpen !Word64 !TaskRef -- ^ instantiate a stream process under this number
  | StreamIn !Word64 !Word32 !B.ByteString
    -- ^ the next input elements, this many, their @store@ encodings back
    -- to back (a run message of the packet layer: 'Herd.Packet.appendValuesToRun')
  | StreamEnd !Word64           -- ^ the input list ended
  | StreamCredit !Word64 !Word32    -- ^ the caller consumed this many more output elements
  | StreamClose !Word64         -- ^ the caller wants no more output: stop the process
  | StatesReset
    -- ^ drop every evolve state held and queued ("Herd.Master.Job.Evolve"), wait for
    -- the one being evolved, and answer 'StatesCleared'
  | StateAdd !Word64 !B.ByteString  -- ^ hold this state under this id
  | EvolveWith !TaskRef         -- ^ the evolve function for the 'EvolveState' messages that follow
  | EvolveState !Word64 !B.ByteString
    -- ^ evolve this held state with this input, after those asked before
  | StateRelease !Word64
    -- ^ give this state back if its evolution has not started ('StateReleased'),
    -- else say so ('StateKept')
  | StateReplay !Word64 !B.ByteString ![(TaskRef, B.ByteString, Word32)]
    -- ^ recompute a state lost with its worker: from this state, apply each
    -- function to its input and keep the child at the given position; hold
    -- the result under this id and answer 'StateReplayed'
  | Ping !Word64 !B.ByteString  -- ^ answer 'Pong' with the same number at once; the bytes are padding (latency and bandwidth probes)
  | SharePart !Word64 !Word64 !B.ByteString
    -- ^ the next piece of shared value number @n@, whose encoding is this
    -- many bytes long in all ("Herd.Master.Job.Shared"); once they are all here, hold
    -- the value and answer 'ShareHeld'
  | ShareDrop !Word64
    -- ^ forget this shared value (and any pieces of it) and answer 'ShareDropped'
  | HoldBudget !Word64
    -- ^ keep at most this many bytes of shared values in memory, spilling
    -- the rest to local disk (0: no bound); sent by whoever watches the
    -- worker's memory
  | GroupRun !Word64 !Word32 !TaskRef !Word32 ![(Word32, Word64)] !B.ByteString
    -- ^ keyed reduction @x@ ("Herd.Core.Exchange"): map and combine this
    -- group of inputs (the bytes) with the reducer, cut the result into
    -- this many partitions of the keys (0: keep it whole, as the part of
    -- the one partition listed), send each listed partition's part to the
    -- worker given ('Forward'), and answer 'GroupSent'
  | PartIn !Word64 !Word32 !Word32 !B.ByteString
    -- ^ reduction @x@, group @g@'s part of partition @j@ (relayed from the
    -- worker that made it): hold it and answer 'PartHeld'
  | PartitionCombine !Word64 !Word32 !TaskRef !Word32
    -- ^ combine the parts held of this partition, one from each of this
    -- many groups, in group order, and answer 'PartitionDone'
  | ExchangeEnd !Word64
    -- ^ reduction @x@ is over: drop everything held for it
  | StatesDrop ![Word64]
    -- ^ forget these evolve states (of a call that failed), and any
    -- evolution of them not started; no answer
  | BatchCancel !Word64
    -- ^ the master no longer wants this batch's results (its copy won,
    -- or its caller gave up): stop it, running or not started, and
    -- answer 'BatchStopped'; a batch that already ended is not answered
  | PartRun !Word64 !Word32 !TaskRef ![Word64] !Word64 !B.ByteString
    -- ^ dataset step @s@ ("Herd.Master.Job.Dataset"), partition @j@: run
    -- the partition function on partition @j@ of each dataset listed
    -- (held here) and this argument; hold what it keeps as partition @j@
    -- of the dataset numbered next (0: keep nothing) and answer 'PartRan'
    -- with its answer ('PartMissing' if an input is not held here)
  | PartsDrop ![Word64]
    -- ^ forget every partition held of these datasets; no answer
  | GroupRunHeld !Word64 !Word32 !TaskRef !Word32 ![(Word32, Word64)] !Word64
    -- ^ as 'GroupRun', the group's input being partition @g@ of the
    -- dataset numbered last, held here ('GroupMissing' if it is not)
  | PartitionKeep !Word64 !Word32 !TaskRef !Word32 !Word64
    -- ^ as 'PartitionCombine', but hold the combined partition here as
    -- partition @j@ of the dataset numbered last and answer
    -- 'PartitionDone' with no bytes
  | PartsDirectory !Text
    -- ^ this worker shares a host (and this directory) with the master:
    -- a reduction's part of at least 'Herd.Core.Wire.partFileBytes' for
    -- another worker goes into a file there, named in a 'ForwardFile'
  | PartInFile !Word64 !Word32 !Word32 !Word64 !Text
    -- ^ as 'PartIn', the part being the file of this many bytes at this
    -- path (in the parts directory), now this worker's to keep and delete
  | TaskDeadline !Word64
    -- ^ from now on, stop a farm task that computes longer than this many
    -- milliseconds and answer it as thrown ('TaskThrew', saying so); 0: no
    -- deadline
  | StealAsk !Word64
    -- ^ steal @n@ ("Herd.Core.Steal"): hand over the oldest child of a
    -- "Herd.Par" computation that another worker may run ('StealGiven'),
    -- or say there is none ('StealNone')
  | StolenRun !Word64 !TaskRef !B.ByteString
    -- ^ run this child stolen from another worker on this argument (its
    -- @store@ encoding) and answer 'StolenDone' or 'StolenThrew'
  | ChildDone !Word64 !B.ByteString
    -- ^ a child of this worker's, run elsewhere, gave this value (its
    -- @store@ encoding)
  | ChildThrew !Word64 !Text
    -- ^ a child of this worker's, run elsewhere, threw this
  | ChildLost !Word64
    -- ^ the worker that stole this child was lost: run it here
  | StolenCancel !Word64
    -- ^ the holder of steal @n@'s child no longer wants it: stop it if it
    -- runs (answering 'StolenDropped'), drop it if it waits
  deriving (Eq, Show)

-- | Messages from worker to master.
data FromWorker
  = Results !Word32 !B.ByteString
    -- ^ the next results of the batch in progress, this many, in batch
    -- order, their @store@ encodings back to back
  | BatchDone
      { doneBatchId :: !Word64
      , doneBusyNs  :: !Word64  -- ^ time spent computing the batch
      }
    -- ^ Every task of the batch gave a result.
  | TaskThrew !Word64 !Word32 !Text
    -- ^ The task at this position of the batch threw (results before it
    -- were sent; none after it will be).
  | BatchRejected !Word64 !Text  -- ^ the function cannot run here; no result was sent
  | StreamOut !Word64 !Word32 !B.ByteString
    -- ^ the next output elements, this many, their encodings back to back
  | StreamDone !Word64           -- ^ the output list ended
  | StreamAborted !Word64 !Text   -- ^ the process threw, or could not start
  | StreamTaken !Word64 !Word32  -- ^ the process consumed this many more input elements
  | StateEvolved !Word64 !Word64 ![(Word64, B.ByteString)]
    -- ^ a state was evolved in this many nanoseconds; its children's new
    -- ids and their encoded outputs (the children stay here)
  | EvolveThrew !Word64 !Text     -- ^ the evolve function threw on this state
  | EvolveRejected !Text          -- ^ the evolve function cannot run here
  | StateReleased !Word64 !B.ByteString  -- ^ a released state, no longer held here
  | StateKept !Word64             -- ^ a state asked back whose evolution had started
  | StateMissing !Word64          -- ^ a state the master named is not held here
  | StatesCleared                 -- ^ answers 'StatesReset': nothing is held or running now
  | StateReplayed !Word64         -- ^ a state asked for by 'StateReplay' is held now
  | Pong !Word64                  -- ^ answers 'Ping'
  | ShareHeld !Word64             -- ^ every piece of this shared value came: it is held here
  | ShareDropped !Word64          -- ^ answers 'ShareDrop': it is held here no more
  | ShareSpilled !Word64          -- ^ this shared value is held on the worker's disk now, past its budget ('HoldBudget')
  | Forward !Word64 !Word64 !Word32 !Word32 !B.ByteString
    -- ^ for the worker numbered first: reduction @x@, group @g@'s part
    -- of partition @j@; the master relays it as a 'PartIn' without its
    -- core reading the bytes
  | GroupSent !Word64 !Word32     -- ^ the group ran and its parts were sent
  | GroupThrew !Word64 !Word32 !Text  -- ^ the reducer threw on this group (or its inputs did not decode)
  | PartHeld !Word64 !Word32 !Word32  -- ^ this group's part of this partition is held here
  | PartitionDone !Word64 !Word32 !B.ByteString  -- ^ this partition's parts, combined
  | PartitionThrew !Word64 !Word32 !Text  -- ^ combining this partition failed
  | PartRan !Word64 !Word32 !B.ByteString   -- ^ answers 'PartRun': the function's answer
  | PartThrew !Word64 !Word32 !Text        -- ^ the partition function threw (or its inputs did not decode)
  | PartMissing !Word64 !Word32            -- ^ an input partition of this step is not held here
  | GroupMissing !Word64 !Word32           -- ^ the held input of this group ('GroupRunHeld') is not held here
  | ForwardFile !Word64 !Word64 !Word32 !Word32 !Word64 !Text
    -- ^ as 'Forward', the part being the file of this many bytes at this
    -- path in the parts directory ('PartsDirectory')
  | BatchStopped !Word64
    -- ^ answers 'BatchCancel': the batch ended here early (the results
    -- before it were sent; none after it will be)
  | WantWork
    -- ^ this worker is idle (or waits on children run elsewhere): it may
    -- be given a stolen child ('StolenRun')
  | ChildrenHeld !Word32
    -- ^ this worker holds this many children others may steal
  | StealGiven !Word64 !Word64 !Word32 !TaskRef !B.ByteString
    -- ^ answers 'StealAsk' @n@: child @c@ (this many are left here), its
    -- function and its argument's encoding
  | StealNone !Word64
    -- ^ answers 'StealAsk': no child is left here to steal
  | StolenDone !Word64 !B.ByteString
    -- ^ the child of steal @n@ gave this value (its @store@ encoding)
  | StolenThrew !Word64 !Text
    -- ^ the child of steal @n@ threw this (or could not run here)
  | StolenDropped !Word64
    -- ^ the child of steal @n@ was stopped here before it ended (its
    -- computation was cancelled): its holder runs it
  | ChildCounts !Word64 !Word64 !Word64 !Word64 !Word64
    -- ^ since it started, this worker spawned this many stealable
    -- children, this many were stolen from it, it ran this many stolen
    -- from others, ran this many of its own again after their thief was
    -- lost, and stopped this many stolen ones their holder no longer
    -- wanted (sent as a steal happens, and when it is idle and the spawns
    -- moved)
  | ChildrenAbandoned ![Word64]
    -- ^ these children of this worker's, run elsewhere, are no longer
    -- wanted: the computation that spawned them ended
  deriving (Eq, Show)

-- | How soon a message to a worker must leave: control messages and the
-- last word of a stream at once, data may wait for company.
toWorkerUrgency :: ToWorker -> Urgency
toWorkerUrgency msg = case msg of
  RunBatch {} -> Bulk
  Args _ _ -> Bulk
  StreamOpen _ _ -> Bulk
  StreamIn {} -> Bulk
  StateAdd _ _ -> Bulk
  EvolveWith _ -> Bulk
  EvolveState _ _ -> Bulk
  SharePart {} -> Bulk
  GroupRun {} -> Bulk
  GroupRunHeld {} -> Bulk
  PartRun {} -> Bulk
  PartIn {} -> Bulk
  _ -> Urgent

-- | How soon a message to the master must leave.
fromWorkerUrgency :: FromWorker -> Urgency
fromWorkerUrgency msg = case msg of
  Results _ _ -> Bulk
  BatchDone _ _ -> Bulk
  StreamOut {} -> Bulk
  Forward {} -> Bulk
  ChildCounts {} -> Bulk
  _ -> Urgent
