{-# LANGUAGE BangPatterns #-}
-- | herd's protocol: the decoding of the messages between master and
-- worker, and (re-exported) the messages themselves ("Herd.Core.Wire.Messages")
-- and the handshake before them ("Herd.Core.Wire.Handshake"). Their
-- encoders, which write into send buffers, are "Herd.Wire.Encode".
--
-- Every message is an envelope decoded by "Herd.Core.Wire.Codec" (lengths and
-- counts checked against the bytes present), its first byte a tag from
-- the one table in "Herd.Core.Wire.Tags"; only the task arguments and results
-- inside are @store@-encoded user values. Pure.
module Herd.Core.Wire
  ( -- * Handshake
    protocolVersion
  , handshakeFrameLimit
  , WorkerHello (..)
  , HelloLink (..)
  , noCpu
  , MasterReply (..)
  , encodeWorkerHello
  , decodeWorkerHello
  , encodeMasterReply
  , decodeMasterReply
  , checkHello
  , encodeAuthResponse
  , decodeAuthResponse
    -- * Messages
  , ToWorker (..)
  , FromWorker (..)
  , toWorkerUrgency
  , fromWorkerUrgency
  , partFileBytes
  , inPartsDirectory
  , decodeToWorker
  , decodeFromWorker
    -- * For the encoders ("Herd.Wire.Encode")
  , putRef
  , getRef
  ) where

import Control.Monad (replicateM)
import qualified Data.ByteString as B
import qualified Data.ByteString.Builder as BB
import qualified Data.Text as T
import qualified Data.ByteString.Unsafe as BU
import Herd.Core.Packet.Policy (runHeadBytes)
import GHC.Fingerprint (Fingerprint (..))
import Herd.Core.Base (TaskRef (..))
import Data.Word (Word32, Word64)
import Data.List (isPrefixOf)
import Herd.Core.Bytes (word32At, word64At)
import Herd.Core.Wire.Codec
import Herd.Core.Wire.Evolved (decodeEvolved)
import Herd.Core.Wire.Handshake
import Herd.Core.Wire.Messages
import Herd.Core.Wire.Tags

putFingerprint :: Fingerprint -> BB.Builder
putFingerprint (Fingerprint a b) = putWord64 a <> putWord64 b

getFingerprint :: Get Fingerprint
getFingerprint = Fingerprint <$> getWord64 <*> getWord64

-- | A function's name on the wire: its key, name and types.
putRef :: TaskRef -> BB.Builder
putRef ref = putFingerprint (refKey ref) <> putText (T.pack (refName ref))
             <> putFingerprint (refArgType ref) <> putFingerprint (refResultType ref)

-- | Decode a function's name ('putRef').
getRef :: Get TaskRef
getRef = do
  key <- getFingerprint
  name <- getText
  TaskRef key (T.unpack name) <$> getFingerprint <*> getFingerprint

getRest :: Get B.ByteString
getRest = remaining >>= getBytes

-- | The smallest part a worker on the master's host hands over in a file
-- ('PartsDirectory'): 64 KiB. A smaller one costs less on the link than
-- a file does.
partFileBytes :: Int
partFileBytes = 64 * 1024

-- | Whether a path names a file of this parts directory (inside it, no
-- @..@ on the way): the only files a worker takes and the master reads
-- or deletes for a part handed over.
inPartsDirectory :: FilePath -> FilePath -> Bool
inPartsDirectory dir path = (dir ++ "/") `isPrefixOf` path && ".." `notElem` pieces path
  where
    pieces p = case break (== '/') p of
      (a, []) -> [a]
      (a, _ : rest) -> a : pieces rest

-- | Decode one message to a worker (a value inside is a slice of the input).
decodeToWorker :: B.ByteString -> Either String ToWorker
decodeToWorker bs
  | B.length bs >= 5 && BU.unsafeHead bs == tagArgs = Right (Args (fromIntegral (word32At bs 1)) (BU.unsafeDrop 5 bs))   -- the hot path
  | B.length bs >= runHeadBytes && BU.unsafeHead bs == tagStreamIn =
      Right (StreamIn (word64At bs 1) (fromIntegral (word32At bs 9)) (BU.unsafeDrop runHeadBytes bs))
  | B.length bs >= 9 && BU.unsafeHead bs == tagPing = Right (Ping (word64At bs 1) (BU.unsafeDrop 9 bs))  -- the latency probe
  | B.length bs >= 9 && BU.unsafeHead bs == tagEvolveState = Right (EvolveState (word64At bs 1) (BU.unsafeDrop 9 bs))
  | B.length bs == 9 && BU.unsafeHead bs == tagStateRelease = Right (StateRelease (word64At bs 1))
  | otherwise = decodeToWorkerSlow bs

decodeToWorkerSlow :: B.ByteString -> Either String ToWorker
decodeToWorkerSlow = runGet $ do
  tag <- getWord8
  case () of
    _ | tag == tagRunBatch -> RunBatch <$> getWord64 <*> getRef <*> getWord32
      | tag == tagArgs -> Args <$> getWord32 <*> getRest
      | tag == tagShutdown -> pure Shutdown
      | tag == tagStreamOpen -> StreamOpen <$> getWord64 <*> getRef
      | tag == tagStreamIn -> StreamIn <$> getWord64 <*> getWord32 <*> getRest
      | tag == tagStreamEnd -> StreamEnd <$> getWord64
      | tag == tagStreamCredit -> StreamCredit <$> getWord64 <*> getWord32
      | tag == tagStreamClose -> StreamClose <$> getWord64
      | tag == tagStatesReset -> pure StatesReset
      | tag == tagStateAdd -> StateAdd <$> getWord64 <*> getRest
      | tag == tagEvolveWith -> EvolveWith <$> getRef
      | tag == tagEvolveState -> EvolveState <$> getWord64 <*> getRest
      | tag == tagStateRelease -> StateRelease <$> getWord64
      | tag == tagStateReplay -> do
          sid <- getWord64
          root <- getSizedBytes
          n <- getCount 60
          StateReplay sid root <$> replicateM n ((,,) <$> getRef <*> getSizedBytes <*> getWord32)
      | tag == tagPing -> Ping <$> getWord64 <*> getRest
      | tag == tagSharePart -> SharePart <$> getWord64 <*> getWord64 <*> getRest
      | tag == tagShareDrop -> ShareDrop <$> getWord64
      | tag == tagHoldBudget -> HoldBudget <$> getWord64
      | tag == tagGroupRun -> groupHead GroupRun <*> getRest
      | tag == tagPartIn -> PartIn <$> getWord64 <*> getWord32 <*> getWord32 <*> getRest
      | tag == tagPartitionCombine -> PartitionCombine <$> getWord64 <*> getWord32 <*> getRef <*> getWord32
      | tag == tagExchangeEnd -> ExchangeEnd <$> getWord64
      | tag == tagStatesDrop -> do
          n <- getCount 8
          StatesDrop <$> replicateM n getWord64
      | tag == tagBatchCancel -> BatchCancel <$> getWord64
      | tag == tagTaskDeadline -> TaskDeadline <$> getWord64
      | tag == tagPartRun -> do
          sid <- getWord64
          j <- getWord32
          ref <- getRef
          n <- getCount 8
          inputs <- replicateM n getWord64
          PartRun sid j ref inputs <$> getWord64 <*> getRest
      | tag == tagPartsDrop -> do
          n <- getCount 8
          PartsDrop <$> replicateM n getWord64
      | tag == tagGroupRunHeld -> groupHead GroupRunHeld <*> getWord64
      | tag == tagPartitionKeep -> PartitionKeep <$> getWord64 <*> getWord32 <*> getRef <*> getWord32 <*> getWord64
      | tag == tagPartsDirectory -> PartsDirectory <$> getText
      | tag == tagPartInFile -> PartInFile <$> getWord64 <*> getWord32 <*> getWord32 <*> getWord64 <*> getText
      | tag == tagStealAsk -> StealAsk <$> getWord64
      | tag == tagStolenRun -> StolenRun <$> getWord64 <*> getRef <*> getRest
      | tag == tagChildDone -> ChildDone <$> getWord64 <*> getRest
      | tag == tagChildThrew -> ChildThrew <$> getWord64 <*> getText
      | tag == tagChildLost -> ChildLost <$> getWord64
      | tag == tagStolenCancel -> StolenCancel <$> getWord64
      | otherwise -> failGet ("unknown message tag " ++ show tag)

-- A group's run as 'GroupRun' and 'GroupRunHeld' begin: the reduction,
-- the group, the reducer, the partition count and the owners to send to.
groupHead :: (Word64 -> Word32 -> TaskRef -> Word32 -> [(Word32, Word64)] -> a) -> Get a
groupHead run = do
  xid <- getWord64
  g <- getWord32
  ref <- getRef
  parts <- getWord32
  n <- getCount 12
  run xid g ref parts <$> replicateM n ((,) <$> getWord32 <*> getWord64)

-- | Decode one message to the master (a value inside is a slice of the input).
decodeFromWorker :: B.ByteString -> Either String FromWorker
decodeFromWorker bs
  | B.length bs >= 5 && BU.unsafeHead bs == tagResults = Right (Results (fromIntegral (word32At bs 1)) (BU.unsafeDrop 5 bs))   -- the hot path
  | B.length bs >= runHeadBytes && BU.unsafeHead bs == tagStreamOut =
      Right (StreamOut (word64At bs 1) (fromIntegral (word32At bs 9)) (BU.unsafeDrop runHeadBytes bs))
  | B.length bs == 9 && BU.unsafeHead bs == tagPong = Right (Pong (word64At bs 1))
  | not (B.null bs) && BU.unsafeHead bs == tagStateEvolved, Just (sid, busy, kids) <- decodeEvolved bs =
      Right (StateEvolved sid busy kids)
  | B.length bs >= 9 && BU.unsafeHead bs == tagStateReleased = Right (StateReleased (word64At bs 1) (BU.unsafeDrop 9 bs))
  | otherwise = decodeFromWorkerSlow bs

decodeFromWorkerSlow :: B.ByteString -> Either String FromWorker
decodeFromWorkerSlow = runGet $ do
  tag <- getWord8
  case () of
    _ | tag == tagResults -> Results <$> getWord32 <*> getRest
      | tag == tagBatchDone -> BatchDone <$> getWord64 <*> getWord64
      | tag == tagTaskThrew -> TaskThrew <$> getWord64 <*> getWord32 <*> getText
      | tag == tagBatchRejected -> BatchRejected <$> getWord64 <*> getText
      | tag == tagStreamOut -> StreamOut <$> getWord64 <*> getWord32 <*> getRest
      | tag == tagStreamDone -> StreamDone <$> getWord64
      | tag == tagStreamAborted -> StreamAborted <$> getWord64 <*> getText
      | tag == tagStreamTaken -> StreamTaken <$> getWord64 <*> getWord32
      | tag == tagStateEvolved -> do
          sid <- getWord64
          busy <- getWord64
          n <- getCount 12
          StateEvolved sid busy <$> replicateM n ((,) <$> getWord64 <*> getSizedBytes)
      | tag == tagEvolveThrew -> EvolveThrew <$> getWord64 <*> getText
      | tag == tagEvolveRejected -> EvolveRejected <$> getText
      | tag == tagStateReleased -> StateReleased <$> getWord64 <*> getRest
      | tag == tagStateKept -> StateKept <$> getWord64
      | tag == tagStateMissing -> StateMissing <$> getWord64
      | tag == tagStatesCleared -> pure StatesCleared
      | tag == tagStateReplayed -> StateReplayed <$> getWord64
      | tag == tagPong -> Pong <$> getWord64
      | tag == tagShareHeld -> ShareHeld <$> getWord64
      | tag == tagShareDropped -> ShareDropped <$> getWord64
      | tag == tagShareSpilled -> ShareSpilled <$> getWord64
      | tag == tagForward -> Forward <$> getWord64 <*> getWord64 <*> getWord32 <*> getWord32 <*> getRest
      | tag == tagGroupSent -> GroupSent <$> getWord64 <*> getWord32
      | tag == tagGroupThrew -> GroupThrew <$> getWord64 <*> getWord32 <*> getText
      | tag == tagPartHeld -> PartHeld <$> getWord64 <*> getWord32 <*> getWord32
      | tag == tagPartitionDone -> PartitionDone <$> getWord64 <*> getWord32 <*> getRest
      | tag == tagPartitionThrew -> PartitionThrew <$> getWord64 <*> getWord32 <*> getText
      | tag == tagBatchStopped -> BatchStopped <$> getWord64
      | tag == tagPartRan -> PartRan <$> getWord64 <*> getWord32 <*> getRest
      | tag == tagPartThrew -> PartThrew <$> getWord64 <*> getWord32 <*> getText
      | tag == tagPartMissing -> PartMissing <$> getWord64 <*> getWord32
      | tag == tagGroupMissing -> GroupMissing <$> getWord64 <*> getWord32
      | tag == tagForwardFile -> ForwardFile <$> getWord64 <*> getWord64 <*> getWord32 <*> getWord32 <*> getWord64 <*> getText
      | tag == tagWantWork -> pure WantWork
      | tag == tagChildrenHeld -> ChildrenHeld <$> getWord32
      | tag == tagStealGiven -> StealGiven <$> getWord64 <*> getWord64 <*> getWord32 <*> getRef <*> getRest
      | tag == tagStealNone -> StealNone <$> getWord64
      | tag == tagStolenDone -> StolenDone <$> getWord64 <*> getRest
      | tag == tagStolenThrew -> StolenThrew <$> getWord64 <*> getText
      | tag == tagStolenDropped -> StolenDropped <$> getWord64
      | tag == tagChildCounts -> ChildCounts <$> getWord64 <*> getWord64 <*> getWord64 <*> getWord64 <*> getWord64
      | tag == tagChildrenAbandoned -> do
          n <- getCount 8
          ChildrenAbandoned <$> replicateM n getWord64
      | otherwise -> failGet ("unknown message tag " ++ show tag)

