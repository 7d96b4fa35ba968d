{-# LANGUAGE BangPatterns #-}
-- | herd's protocol: the handshake and the messages between master and
-- worker, with their encodings.
--
-- The handshake is decoded by hand from a frame of at most
-- 'handshakeFrameLimit' bytes, so nothing a peer sends is given to @store@
-- before its protocol version and build identity have been accepted. After
-- the handshake every message is an envelope decoded by "Herd.Wire.Codec"
-- (lengths and counts checked against the bytes present); only the task
-- arguments and results inside are @store@-encoded user values.
module Herd.Wire
  ( -- * Handshake
    protocolVersion
  , handshakeFrameLimit
  , WorkerHello (..)
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
  , decodeToWorker
  , encodeFromWorker
  , decodeFromWorker
    -- * Encoders for the hot paths
  , argEncoder
  , resultEncoder
  , streamInEncoder
  , streamOutEncoder
  ) where

import Control.Monad (replicateM, unless, when)
import qualified Data.ByteString as B
import qualified Data.ByteString.Builder as BB
import qualified Data.ByteString.Char8 as BC
import Data.Text (Text)
import qualified Data.Text as T
import Data.Bits (shiftL, shiftR, (.|.))
import qualified Data.ByteString.Unsafe as BU
import Data.Word (Word16, Word32, Word64, Word8)
import Foreign.Ptr (plusPtr)
import Foreign.Storable (pokeByteOff)
import Herd.Packet.Policy (Urgency (..))
import GHC.Fingerprint (Fingerprint (..))
import Herd.Base (Encoder (..), TaskRef (..), encodeBytes, shortBuildId)
import Herd.Wire.Codec

-- | Version of this protocol; peers must match exactly.
protocolVersion :: Word16
protocolVersion = 5

-- | Largest handshake frame either side accepts.
handshakeFrameLimit :: Int
handshakeFrameLimit = 4096

magic :: B.ByteString
magic = BC.pack "HERD"

-- | The first frame a worker sends.
data WorkerHello = WorkerHello
  { helloVersion :: !Word16
  , helloBuild   :: !B.ByteString  -- ^ build identity of the worker's binary
  , helloPid     :: !Word32
  , helloHost    :: !Text
  , helloGroup   :: !Text          -- ^ the launch that started it (empty: joined by hand)
  , helloWantsShm :: !Bool         -- ^ switch to shared memory after the welcome ("Herd.Transport.Shm")
  } deriving (Eq, Show)

-- | The master's handshake frames: the authentication challenge, the proof
-- that accepts the worker's answer, and the answer to a hello.
data MasterReply
  = Welcome
      { welcomeBuild    :: !B.ByteString  -- ^ the master's build identity
      , welcomeWorkerId :: !Word32
      , welcomeMaxFrame :: !Word32        -- ^ the frame cap the worker should apply too
      , welcomeLiveness :: !Word32        -- ^ milliseconds of silence after which a link is dead
      , welcomeChunking :: !Bool          -- ^ gather messages into packets (else one per packet)
      , welcomePacketBytes :: !Word32     -- ^ the packet buffer's capacity
      , welcomePacketTimeoutUs :: !Word32 -- ^ microseconds a buffered message may wait
      , welcomeStreamWindow :: !Word32    -- ^ stream elements in flight per direction
      }
  | Refused { refusedReason :: !Text }
  | Challenge { challengeNonce :: !B.ByteString }  -- ^ the master's nonce ("Herd.Auth")
  | AuthAccepted { acceptedProof :: !B.ByteString } -- ^ the master's proof of the secret
  deriving (Eq, Show)

-- | Encode a hello.
encodeWorkerHello :: WorkerHello -> B.ByteString
encodeWorkerHello h = buildStrict $
  BB.byteString magic <> putWord16 (helloVersion h) <> putSizedBytes (helloBuild h)
  <> putWord32 (helloPid h) <> putText (helloHost h) <> putText (helloGroup h)
  <> putWord8 (if helloWantsShm h then 1 else 0)

-- | Decode a hello, checking the magic bytes.
decodeWorkerHello :: B.ByteString -> Either String WorkerHello
decodeWorkerHello = runGet $ do
  m <- getBytes 4
  unless (m == magic) $ failGet "not a herd peer (bad magic bytes)"
  WorkerHello <$> getWord16 <*> getSizedBytes <*> getWord32 <*> getText <*> getText <*> getFlag
  where
    getFlag = getWord8 >>= \b -> case b of
      0 -> pure False
      1 -> pure True
      _ -> failGet ("bad transport flag " ++ show b)

-- | Encode the worker's answer to a challenge: its nonce and its proof.
encodeAuthResponse :: B.ByteString -> B.ByteString -> B.ByteString
encodeAuthResponse nonce proof = buildStrict $
  BB.byteString magic <> putWord16 protocolVersion <> putSizedBytes nonce <> putSizedBytes proof

-- | Decode the worker's answer to a challenge; both parts must be 32 bytes.
decodeAuthResponse :: B.ByteString -> Either String (B.ByteString, B.ByteString)
decodeAuthResponse = runGet $ do
  getPreamble "peer" "this master"
  nonce <- getSizedBytes
  proof <- getSizedBytes
  unless (B.length nonce == 32 && B.length proof == 32) $
    failGet "malformed authentication answer (nonce and proof must be 32 bytes each)"
  pure (nonce, proof)

-- | Decide whether to accept a hello, given the master's build identity.
checkHello :: B.ByteString -> WorkerHello -> Either String ()
checkHello ourBuild h
  | helloVersion h /= protocolVersion =
      Left ("protocol version " ++ show (helloVersion h) ++ " differs from the master's "
            ++ show protocolVersion)
  | helloBuild h /= ourBuild =
      Left ("worker binary is a different build (worker " ++ shortBuildId (helloBuild h)
            ++ ", master " ++ shortBuildId ourBuild ++ "); run the same executable on both sides")
  | otherwise = Right ()

-- | Encode the master's reply.
encodeMasterReply :: MasterReply -> B.ByteString
encodeMasterReply r = buildStrict $ BB.byteString magic <> putWord16 protocolVersion <> case r of
  Welcome b w f l c pb pt sw -> putWord8 0 <> putSizedBytes b <> putWord32 w <> putWord32 f <> putWord32 l
    <> putWord8 (if c then 1 else 0) <> putWord32 pb <> putWord32 pt <> putWord32 sw
  Refused why -> putWord8 1 <> putText why
  Challenge n -> putWord8 2 <> putSizedBytes n
  AuthAccepted p -> putWord8 3 <> putSizedBytes p

-- The magic bytes and protocol version that open the handshake frames
-- after the hello, naming the sender and the receiver in errors.
getPreamble :: String -> String -> Get ()
getPreamble sender receiver = do
  m <- getBytes 4
  unless (m == magic) $ failGet ("not a herd " ++ sender ++ " (bad magic bytes)")
  v <- getWord16
  when (v /= protocolVersion) $
    failGet (sender ++ " speaks protocol " ++ show v ++ ", " ++ receiver ++ " " ++ show protocolVersion)

-- | Decode the master's reply.
decodeMasterReply :: B.ByteString -> Either String MasterReply
decodeMasterReply = runGet $ do
  getPreamble "master" "this worker"
  tag <- getWord8
  case tag of
    0 -> Welcome <$> getSizedBytes <*> getWord32 <*> getWord32 <*> getWord32
                 <*> ((/= 0) <$> getWord8) <*> getWord32 <*> getWord32 <*> getWord32
    1 -> Refused <$> getText
    2 -> Challenge <$> getSizedBytes
    3 -> AuthAccepted <$> getSizedBytes
    _ -> failGet ("unknown reply tag " ++ show tag)

-- | Messages from master to worker. After the handshake every frame is a
-- packet ("Herd.Packet") of these.
data ToWorker
  = RunBatch
      { runBatchId :: !Word64
      , runRef     :: !TaskRef
      , runCount   :: !Word32   -- ^ the number of 'Arg' messages that follow
      }
    -- ^ Start a batch; its arguments follow as 'Arg' messages, in order.
  | Arg !B.ByteString           -- ^ one task's @store@-encoded argument
  | Shutdown                    -- ^ stop serving and exit
  | StreamOpen !Word64 !TaskRef -- ^ instantiate a stream process under this number
  | StreamIn !Word64 !B.ByteString  -- ^ one input element
  | StreamEnd !Word64           -- ^ the input list ended
  | StreamCredit !Word64 !Word32    -- ^ the caller consumed this many more output elements
  | StreamClose !Word64         -- ^ the caller wants no more output: stop the process
  | StatesReset
    -- ^ drop every evolve state held and queued ("Herd.Evolve"), wait for
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
  deriving (Eq, Show)

-- | Messages from worker to master.
data FromWorker
  = Result !B.ByteString        -- ^ the next task's @store@-encoded result, in batch order
  | BatchDone
      { doneBatchId :: !Word64
      , doneBusyNs  :: !Word64  -- ^ time spent computing the batch
      }
    -- ^ Every task of the batch gave a 'Result'.
  | TaskThrew !Word64 !Word32 !Text
    -- ^ The task at this position of the batch threw (results before it
    -- were sent; none after it will be).
  | BatchRejected !Word64 !Text  -- ^ the function cannot run here; no result was sent
  | StreamOut !Word64 !B.ByteString  -- ^ one output element
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
  deriving (Eq, Show)

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

-- | How soon a message to a worker must leave: control messages and the
-- last word of a stream at once, data may wait for company.
toWorkerUrgency :: ToWorker -> Urgency
toWorkerUrgency msg = case msg of
  RunBatch {} -> Bulk
  Arg _ -> Bulk
  StreamOpen _ _ -> Bulk
  StreamIn _ _ -> Bulk
  StateAdd _ _ -> Bulk
  EvolveWith _ -> Bulk
  EvolveState _ _ -> Bulk
  _ -> Urgent

-- | How soon a message to the master must leave.
fromWorkerUrgency :: FromWorker -> Urgency
fromWorkerUrgency msg = case msg of
  Result _ -> Bulk
  BatchDone _ _ -> Bulk
  StreamOut _ _ -> Bulk
  _ -> Urgent

-- | The encoder of a message to a worker.
encodeToWorker :: ToWorker -> Encoder
-- a probe's padding is written straight into the packet: it may be large
encodeToWorker (Ping n pad) = taggedStream 15 n (encodeBytes pad)
encodeToWorker msg = encodeBytes $ buildStrict $ case msg of
    Arg v -> putWord8 2 <> BB.byteString v
    StreamIn sid v -> putWord8 5 <> putWord64 sid <> BB.byteString v
    RunBatch bid ref count -> putWord8 1 <> putWord64 bid <> putRef ref <> putWord32 count
    Shutdown -> putWord8 3
    StreamOpen sid ref -> putWord8 4 <> putWord64 sid <> putRef ref
    StreamEnd sid -> putWord8 6 <> putWord64 sid
    StreamCredit sid n -> putWord8 7 <> putWord64 sid <> putWord32 n
    StreamClose sid -> putWord8 8 <> putWord64 sid
    StatesReset -> putWord8 9
    StateAdd sid v -> putWord8 10 <> putWord64 sid <> BB.byteString v
    EvolveWith ref -> putWord8 11 <> putRef ref
    EvolveState sid v -> putWord8 12 <> putWord64 sid <> BB.byteString v
    StateRelease sid -> putWord8 13 <> putWord64 sid
    Ping n pad -> putWord8 15 <> putWord64 n <> BB.byteString pad   -- (written by taggedStream above)
    StateReplay sid root path -> putWord8 14 <> putWord64 sid <> putSizedBytes root
      <> putWord32 (fromIntegral (length path))
      <> foldMap (\(ref, input, k) -> putRef ref <> putSizedBytes input <> putWord32 k) path

-- | Decode one message to a worker (a value inside is a slice of the input).
decodeToWorker :: B.ByteString -> Either String ToWorker
decodeToWorker bs
  | B.length bs >= 1 && BU.unsafeHead bs == 2 = Right (Arg (BU.unsafeTail bs))   -- the hot path
  | B.length bs >= 9 && BU.unsafeHead bs == 5 = Right (StreamIn (word64At bs 1) (BU.unsafeDrop 9 bs))
  | otherwise = decodeToWorkerSlow bs

decodeToWorkerSlow :: B.ByteString -> Either String ToWorker
decodeToWorkerSlow = runGet $ do
  tag <- getWord8
  case tag of
    1 -> RunBatch <$> getWord64 <*> getRef <*> getWord32
    2 -> Arg <$> getRest
    3 -> pure Shutdown
    4 -> StreamOpen <$> getWord64 <*> getRef
    5 -> StreamIn <$> getWord64 <*> getRest
    6 -> StreamEnd <$> getWord64
    7 -> StreamCredit <$> getWord64 <*> getWord32
    8 -> StreamClose <$> getWord64
    9 -> pure StatesReset
    10 -> StateAdd <$> getWord64 <*> getRest
    11 -> EvolveWith <$> getRef
    12 -> EvolveState <$> getWord64 <*> getRest
    13 -> StateRelease <$> getWord64
    14 -> do
      sid <- getWord64
      root <- getSizedBytes
      n <- getCount 60
      StateReplay sid root <$> replicateM n ((,,) <$> getRef <*> getSizedBytes <*> getWord32)
    15 -> Ping <$> getWord64 <*> getRest
    _ -> failGet ("unknown message tag " ++ show tag)

-- | The encoder of a message to the master.
encodeFromWorker :: FromWorker -> Encoder
encodeFromWorker msg = encodeBytes $ buildStrict $ case msg of
  Result v -> putWord8 1 <> BB.byteString v
  BatchDone bid busy -> putWord8 2 <> putWord64 bid <> putWord64 busy
  TaskThrew bid pos why -> putWord8 3 <> putWord64 bid <> putWord32 pos <> putText why
  BatchRejected bid why -> putWord8 4 <> putWord64 bid <> putText why
  StreamOut sid v -> putWord8 5 <> putWord64 sid <> BB.byteString v
  StreamDone sid -> putWord8 6 <> putWord64 sid
  StreamAborted sid why -> putWord8 7 <> putWord64 sid <> putText why
  StreamTaken sid n -> putWord8 8 <> putWord64 sid <> putWord32 n
  StateEvolved sid busy children -> putWord8 9 <> putWord64 sid <> putWord64 busy
    <> putWord32 (fromIntegral (length children))
    <> foldMap (\(c, o) -> putWord64 c <> putSizedBytes o) children
  EvolveThrew sid why -> putWord8 10 <> putWord64 sid <> putText why
  EvolveRejected why -> putWord8 11 <> putText why
  StateReleased sid v -> putWord8 12 <> putWord64 sid <> BB.byteString v
  StateKept sid -> putWord8 13 <> putWord64 sid
  StateMissing sid -> putWord8 14 <> putWord64 sid
  StatesCleared -> putWord8 15
  StateReplayed sid -> putWord8 16 <> putWord64 sid
  Pong n -> putWord8 17 <> putWord64 n

-- | Decode one message to the master (a value inside is a slice of the input).
decodeFromWorker :: B.ByteString -> Either String FromWorker
decodeFromWorker bs
  | B.length bs >= 1 && BU.unsafeHead bs == 1 = Right (Result (BU.unsafeTail bs))   -- the hot path
  | B.length bs >= 9 && BU.unsafeHead bs == 5 = Right (StreamOut (word64At bs 1) (BU.unsafeDrop 9 bs))
  | otherwise = decodeFromWorkerSlow bs

-- A big-endian 64-bit number at an offset the caller has checked.
word64At :: B.ByteString -> Int -> Word64
word64At bs off = go 0 0
  where
    go :: Int -> Word64 -> Word64
    go 8 !acc = acc
    go i !acc = go (i + 1) ((acc `shiftL` 8) .|. fromIntegral (BU.unsafeIndex bs (off + i)))

decodeFromWorkerSlow :: B.ByteString -> Either String FromWorker
decodeFromWorkerSlow = runGet $ do
  tag <- getWord8
  case tag of
    1 -> Result <$> getRest
    2 -> BatchDone <$> getWord64 <*> getWord64
    3 -> TaskThrew <$> getWord64 <*> getWord32 <*> getText
    4 -> BatchRejected <$> getWord64 <*> getText
    5 -> StreamOut <$> getWord64 <*> getRest
    6 -> StreamDone <$> getWord64
    7 -> StreamAborted <$> getWord64 <*> getText
    8 -> StreamTaken <$> getWord64 <*> getWord32
    9 -> do
      sid <- getWord64
      busy <- getWord64
      n <- getCount 12
      StateEvolved sid busy <$> replicateM n ((,) <$> getWord64 <*> getSizedBytes)
    10 -> EvolveThrew <$> getWord64 <*> getText
    11 -> EvolveRejected <$> getText
    12 -> StateReleased <$> getWord64 <*> getRest
    13 -> StateKept <$> getWord64
    14 -> StateMissing <$> getWord64
    15 -> pure StatesCleared
    16 -> StateReplayed <$> getWord64
    17 -> Pong <$> getWord64
    _ -> failGet ("unknown message tag " ++ show tag)

-- | The encoder of a 'Result' message whose value is written by the given
-- encoder (no intermediate copy: the hot path of every task).
resultEncoder :: Encoder -> Encoder
resultEncoder = tagged 1

-- | The encoder of an 'Arg' message (the hot path on the master).
argEncoder :: Encoder -> Encoder
argEncoder = tagged 2

-- | The encoder of a 'StreamIn' message.
streamInEncoder :: Word64 -> Encoder -> Encoder
streamInEncoder sid = taggedStream 5 sid

-- | The encoder of a 'StreamOut' message.
streamOutEncoder :: Word64 -> Encoder -> Encoder
streamOutEncoder sid = taggedStream 5 sid

tagged :: Word8 -> Encoder -> Encoder
tagged tag (Encoder n write) = Encoder (n + 1) $ \p -> do
  pokeByteOff p 0 tag
  write (p `plusPtr` 1)

taggedStream :: Word8 -> Word64 -> Encoder -> Encoder
taggedStream tag sid (Encoder n write) = Encoder (n + 9) $ \p -> do
  pokeByteOff p 0 tag
  mapM_ (\i -> pokeByteOff p (1 + i) (fromIntegral (sid `shiftR` (8 * (7 - i))) :: Word8)) [0 .. 7]
  write (p `plusPtr` 9)
