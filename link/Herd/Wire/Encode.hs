{-# LANGUAGE BangPatterns #-}
-- | The encoders of herd's messages ("Herd.Core.Wire" decodes them): each
-- message's size and a writer that puts it straight into a send buffer.
-- The evolve report, the most frequent message at thousands of workers,
-- is written field by field; the rest through the codec's builders. The
-- bytes are what the decoders accept, which the wire tests check both ways.
module Herd.Wire.Encode
  ( encodeToWorker
  , toWorkerParts
  , encodeFromWorker
  , evolvedEncoder
  ) where

import qualified Data.ByteString as B
import qualified Data.ByteString.Builder as BB
import qualified Data.ByteString.Internal as BI
import qualified Data.ByteString.Unsafe as BU
import Data.Word (Word64, Word8)
import Foreign.Ptr (Ptr, castPtr, plusPtr)
import Foreign.Storable (pokeByteOff)
import Herd.Core.Wire
import Herd.Core.Wire.Codec
import Herd.Core.Wire.Tags
import Herd.Wire.Writer

-- | The encoder of a message to a worker.
encodeToWorker :: ToWorker -> Encoder
encodeToWorker msg = uncurry encodeWithTail (toWorkerParts msg)

-- | One message to a worker as a head and a tail: its encoding is the
-- head's bytes, then the tail's. The tail is the value that ends the
-- message (a probe's padding, an evolve state), so the packet layer can
-- send a large one without copying it ('Herd.Packet.sendMessageTail');
-- it is empty for every other message.
toWorkerParts :: ToWorker -> (Encoder, B.ByteString)
toWorkerParts msg = case msg of
  Ping n pad -> (taggedHead tagPing n, pad)
  EvolveState sid v -> (taggedHead tagEvolveState sid, v)
  StateAdd sid v -> (taggedHead tagStateAdd sid, v)
  StateRelease sid -> (taggedHead tagStateRelease sid, B.empty)
  SharePart n total piece -> (built' (putWord8 tagSharePart <> putWord64 n <> putWord64 total), piece)
  ShareDrop n -> (taggedHead tagShareDrop n, B.empty)
  BatchCancel bid -> (taggedHead tagBatchCancel bid, B.empty)
  TaskDeadline ms -> (taggedHead tagTaskDeadline ms, B.empty)
  HoldBudget b -> (taggedHead tagHoldBudget b, B.empty)
  GroupRun xid g ref parts targets args ->
    ( built' (putWord8 tagGroupRun <> putWord64 xid <> putWord32 g <> putRef ref <> putWord32 parts
              <> putWord32 (fromIntegral (length targets)) <> foldMap (\(j, w) -> putWord32 j <> putWord64 w) targets)
    , args )
  GroupRunHeld xid g ref parts targets did ->
    built (putWord8 tagGroupRunHeld <> putWord64 xid <> putWord32 g <> putRef ref <> putWord32 parts
           <> putWord32 (fromIntegral (length targets)) <> foldMap (\(j, w) -> putWord32 j <> putWord64 w) targets <> putWord64 did)
  PartitionKeep xid j ref groups did -> built (putWord8 tagPartitionKeep <> putWord64 xid <> putWord32 j <> putRef ref <> putWord32 groups <> putWord64 did)
  PartRun sid j ref inputs out arg ->
    ( built' (putWord8 tagPartRun <> putWord64 sid <> putWord32 j <> putRef ref
              <> putWord32 (fromIntegral (length inputs)) <> foldMap putWord64 inputs <> putWord64 out)
    , arg )
  PartsDirectory dir -> built (putWord8 tagPartsDirectory <> putText dir)
  StealAsk n -> (taggedHead tagStealAsk n, B.empty)
  StolenRun n ref arg -> (built' (putWord8 tagStolenRun <> putWord64 n <> putRef ref), arg)
  ChildDone c v -> (taggedHead tagChildDone c, v)
  ChildThrew c why -> built (putWord8 tagChildThrew <> putWord64 c <> putText why)
  ChildLost c -> (taggedHead tagChildLost c, B.empty)
  StolenCancel n -> (taggedHead tagStolenCancel n, B.empty)
  PartInFile xid g j size path -> built (putWord8 tagPartInFile <> putWord64 xid <> putWord32 g <> putWord32 j <> putWord64 size <> putText path)
  PartsDrop dids -> built (putWord8 tagPartsDrop <> putWord32 (fromIntegral (length dids)) <> foldMap putWord64 dids)
  PartIn xid g j part -> (built' (putWord8 tagPartIn <> putWord64 xid <> putWord32 g <> putWord32 j), part)
  PartitionCombine xid j ref groups -> built (putWord8 tagPartitionCombine <> putWord64 xid <> putWord32 j <> putRef ref <> putWord32 groups)
  ExchangeEnd xid -> (taggedHead tagExchangeEnd xid, B.empty)
  StatesDrop sids -> built (putWord8 tagStatesDrop <> putWord32 (fromIntegral (length sids)) <> foldMap putWord64 sids)
  Args k v -> built (putWord8 tagArgs <> putWord32 k <> BB.byteString v)
  StreamIn sid k v -> built (putWord8 tagStreamIn <> putWord64 sid <> putWord32 k <> BB.byteString v)
  RunBatch bid ref count -> built (putWord8 tagRunBatch <> putWord64 bid <> putRef ref <> putWord32 count)
  Shutdown -> built (putWord8 tagShutdown)
  StreamOpen sid ref -> built (putWord8 tagStreamOpen <> putWord64 sid <> putRef ref)
  StreamEnd sid -> built (putWord8 tagStreamEnd <> putWord64 sid)
  StreamCredit sid n -> built (putWord8 tagStreamCredit <> putWord64 sid <> putWord32 n)
  StreamClose sid -> built (putWord8 tagStreamClose <> putWord64 sid)
  StatesReset -> built (putWord8 tagStatesReset)
  EvolveWith ref -> built (putWord8 tagEvolveWith <> putRef ref)
  StateReplay sid root path -> built (putWord8 tagStateReplay <> putWord64 sid <> putSizedBytes root
    <> putWord32 (fromIntegral (length path))
    <> foldMap (\(ref, input, k) -> putRef ref <> putSizedBytes input <> putWord32 k) path)
  where built b = (built' b, B.empty)
        built' = encodeBytes . buildStrict

-- | The encoder of a message to the master.
encodeFromWorker :: FromWorker -> Encoder
-- the latency probe's answer is written straight into the packet
encodeFromWorker (Pong n) = Encoder 9 $ \p -> pokeByteOff p 0 tagPong >> pokeBE 8 p 1 n
encodeFromWorker (StateEvolved sid busy children) = evolvedEncoder tagStateEvolved sid busy children
encodeFromWorker (StateKept sid) = taggedStream tagStateKept sid (encodeBytes B.empty)
encodeFromWorker (StateReleased sid v) = taggedStream tagStateReleased sid (encodeBytes v)
encodeFromWorker msg = encodeBytes $ buildStrict $ case msg of
  Results k v -> putWord8 tagResults <> putWord32 k <> BB.byteString v
  BatchDone bid busy -> putWord8 tagBatchDone <> putWord64 bid <> putWord64 busy
  TaskThrew bid pos why -> putWord8 tagTaskThrew <> putWord64 bid <> putWord32 pos <> putText why
  BatchRejected bid why -> putWord8 tagBatchRejected <> putWord64 bid <> putText why
  StreamOut sid k v -> putWord8 tagStreamOut <> putWord64 sid <> putWord32 k <> BB.byteString v
  StreamDone sid -> putWord8 tagStreamDone <> putWord64 sid
  StreamAborted sid why -> putWord8 tagStreamAborted <> putWord64 sid <> putText why
  StreamTaken sid n -> putWord8 tagStreamTaken <> putWord64 sid <> putWord32 n
  EvolveThrew sid why -> putWord8 tagEvolveThrew <> putWord64 sid <> putText why
  EvolveRejected why -> putWord8 tagEvolveRejected <> putText why
  StateMissing sid -> putWord8 tagStateMissing <> putWord64 sid
  StatesCleared -> putWord8 tagStatesCleared
  StateReplayed sid -> putWord8 tagStateReplayed <> putWord64 sid
  ShareHeld n -> putWord8 tagShareHeld <> putWord64 n
  ShareDropped n -> putWord8 tagShareDropped <> putWord64 n
  ShareSpilled n -> putWord8 tagShareSpilled <> putWord64 n
  Forward dest xid g j part -> putWord8 tagForward <> putWord64 dest <> putWord64 xid <> putWord32 g <> putWord32 j <> BB.byteString part
  GroupSent xid g -> putWord8 tagGroupSent <> putWord64 xid <> putWord32 g
  GroupThrew xid g why -> putWord8 tagGroupThrew <> putWord64 xid <> putWord32 g <> putText why
  PartHeld xid g j -> putWord8 tagPartHeld <> putWord64 xid <> putWord32 g <> putWord32 j
  PartitionDone xid j v -> putWord8 tagPartitionDone <> putWord64 xid <> putWord32 j <> BB.byteString v
  PartitionThrew xid j why -> putWord8 tagPartitionThrew <> putWord64 xid <> putWord32 j <> putText why
  BatchStopped bid -> putWord8 tagBatchStopped <> putWord64 bid
  PartRan sid j v -> putWord8 tagPartRan <> putWord64 sid <> putWord32 j <> BB.byteString v
  PartThrew sid j why -> putWord8 tagPartThrew <> putWord64 sid <> putWord32 j <> putText why
  PartMissing sid j -> putWord8 tagPartMissing <> putWord64 sid <> putWord32 j
  GroupMissing xid g -> putWord8 tagGroupMissing <> putWord64 xid <> putWord32 g
  WantWork -> putWord8 tagWantWork
  ChildrenHeld n -> putWord8 tagChildrenHeld <> putWord32 n
  StealGiven n c left ref arg -> putWord8 tagStealGiven <> putWord64 n <> putWord64 c <> putWord32 left <> putRef ref <> BB.byteString arg
  StealNone n -> putWord8 tagStealNone <> putWord64 n
  StolenDone n v -> putWord8 tagStolenDone <> putWord64 n <> BB.byteString v
  StolenThrew n why -> putWord8 tagStolenThrew <> putWord64 n <> putText why
  StolenDropped n -> putWord8 tagStolenDropped <> putWord64 n
  ChildCounts a b c d e -> putWord8 tagChildCounts <> putWord64 a <> putWord64 b <> putWord64 c <> putWord64 d <> putWord64 e
  ChildrenAbandoned cs -> putWord8 tagChildrenAbandoned <> putWord32 (fromIntegral (length cs)) <> foldMap putWord64 cs
  ForwardFile dest xid g j size path -> putWord8 tagForwardFile <> putWord64 dest <> putWord64 xid <> putWord32 g <> putWord32 j <> putWord64 size <> putText path

taggedStream :: Word8 -> Word64 -> Encoder -> Encoder
taggedStream tag sid (Encoder n write) = Encoder (n + 9) $ \p -> do
  pokeByteOff p 0 tag
  pokeBE 8 p 1 sid
  write (p `plusPtr` 9)

-- The head of a message whose tail is its value: the tag and the number.
taggedHead :: Word8 -> Word64 -> Encoder
taggedHead tag sid = Encoder 9 $ \p -> pokeByteOff p 0 tag >> pokeBE 8 p 1 sid
-- | Tag, state id, busy nanoseconds, child count, then per child its id,
-- its output's length and the output.
evolvedEncoder :: Word8 -> Word64 -> Word64 -> [(Word64, B.ByteString)] -> Encoder
evolvedEncoder tag sid busy children = Encoder size write
  where
    size = 21 + sum [ 12 + B.length o | (_, o) <- children ]
    write p = do
      pokeByteOff p 0 tag
      pokeBE 8 p 1 sid
      pokeBE 8 p 9 busy
      pokeBE 4 p 17 (fromIntegral (length children))
      go (p `plusPtr` 21) children
    go :: Ptr Word8 -> [(Word64, B.ByteString)] -> IO ()
    go _ [] = pure ()
    go q ((c, o) : rest) = do
      pokeBE 8 q 0 c
      pokeBE 4 q 8 (fromIntegral (B.length o))
      copyInto (q `plusPtr` 12) o
      go (q `plusPtr` (12 + B.length o)) rest

copyInto :: Ptr Word8 -> B.ByteString -> IO ()
copyInto dst bs = BU.unsafeUseAsCStringLen bs $ \(src, n) -> BI.memcpy dst (castPtr src) n

