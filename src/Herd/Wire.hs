{-# LANGUAGE BangPatterns #-}
-- | herd's protocol: the encodings of the messages between master and
-- worker, and (re-exported) the messages themselves ("Herd.Wire.Messages")
-- and the handshake before them ("Herd.Wire.Handshake").
--
-- Every message is an envelope decoded by "Herd.Wire.Codec" (lengths and
-- counts checked against the bytes present), its first byte a tag from
-- the one table in "Herd.Wire.Tags"; only the task arguments and results
-- inside are @store@-encoded user values. Pure.
module Herd.Wire
  ( -- * Handshake
    protocolVersion
  , handshakeFrameLimit
  , WorkerHello (..)
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
  , encodeToWorker
  , toWorkerParts
  , decodeToWorker
  , encodeFromWorker
  , decodeFromWorker
  ) where

import Control.Monad (replicateM)
import qualified Data.ByteString as B
import qualified Data.ByteString.Builder as BB
import qualified Data.Text as T
import qualified Data.ByteString.Unsafe as BU
import Data.Word (Word64, Word8)
import Foreign.Ptr (plusPtr)
import Foreign.Storable (pokeByteOff)
import Herd.Packet.Policy (runHeadBytes)
import GHC.Fingerprint (Fingerprint (..))
import Herd.Base (Encoder (..), TaskRef (..), encodeBytes, encodeWithTail)
import Herd.Bytes (pokeBE, word32At, word64At)
import Herd.Wire.Codec
import Herd.Wire.Evolved (decodeEvolved, evolvedEncoder)
import Herd.Wire.Handshake
import Herd.Wire.Messages
import Herd.Wire.Tags

putFingerprint :: Fingerprint -> BB.Builder
putFingerprint (Fingerprint a b) = putWord64 a <> putWord64 b

getFingerprint :: Get Fingerprint
getFingerprint = Fingerprint <$> getWord64 <*> getWord64

putRef :: TaskRef -> BB.Builder
putRef ref = putFingerprint (refKey ref) <> putText (T.pack (refName ref))
             <> putFingerprint (refArgType ref) <> putFingerprint (refResultType ref)

getRef :: Get TaskRef
getRef = do
  key <- getFingerprint
  name <- getText
  TaskRef key (T.unpack name) <$> getFingerprint <*> getFingerprint

getRest :: Get B.ByteString
getRest = remaining >>= getBytes

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
  where built b = (encodeBytes (buildStrict b), B.empty)

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
      | otherwise -> failGet ("unknown message tag " ++ show tag)

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
      | otherwise -> failGet ("unknown message tag " ++ show tag)

taggedStream :: Word8 -> Word64 -> Encoder -> Encoder
taggedStream tag sid (Encoder n write) = Encoder (n + 9) $ \p -> do
  pokeByteOff p 0 tag
  pokeBE 8 p 1 sid
  write (p `plusPtr` 9)

-- The head of a message whose tail is its value: the tag and the number.
taggedHead :: Word8 -> Word64 -> Encoder
taggedHead tag sid = Encoder 9 $ \p -> pokeByteOff p 0 tag >> pokeBE 8 p 1 sid
