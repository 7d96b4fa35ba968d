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
  , TaskOutcome
  , encodeToWorker
  , decodeToWorker
  , encodeFromWorker
  , decodeFromWorker
  ) where

import Control.Monad (unless, when)
import qualified Data.ByteString as B
import qualified Data.ByteString.Builder as BB
import qualified Data.ByteString.Char8 as BC
import qualified Data.ByteString.Lazy as BL
import Data.Text (Text)
import qualified Data.Text as T
import Data.Word (Word16, Word32, Word64)
import GHC.Fingerprint (Fingerprint (..))
import Herd.BuildId (shortBuildId)
import Herd.Task (TaskRef (..))
import Herd.Wire.Codec

-- | Version of this protocol; peers must match exactly.
protocolVersion :: Word16
protocolVersion = 2

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
  } deriving (Eq, Show)

-- | The master's handshake frames: the authentication challenge, the proof
-- that accepts the worker's answer, and the answer to a hello.
data MasterReply
  = Welcome
      { welcomeBuild    :: !B.ByteString  -- ^ the master's build identity
      , welcomeWorkerId :: !Word32
      , welcomeMaxFrame :: !Word32        -- ^ the frame cap the worker should apply too
      , welcomeLiveness :: !Word32        -- ^ milliseconds of silence after which a link is dead
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

-- | Decode a hello, checking the magic bytes.
decodeWorkerHello :: B.ByteString -> Either String WorkerHello
decodeWorkerHello = runGet $ do
  m <- getBytes 4
  unless (m == magic) $ failGet "not a herd peer (bad magic bytes)"
  WorkerHello <$> getWord16 <*> getSizedBytes <*> getWord32 <*> getText <*> getText

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
  Welcome b w f l -> putWord8 0 <> putSizedBytes b <> putWord32 w <> putWord32 f <> putWord32 l
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
    1 -> Refused <$> getText
    2 -> Challenge <$> getSizedBytes
    3 -> AuthAccepted <$> getSizedBytes
    _ -> failGet ("unknown reply tag " ++ show tag)

-- | Outcome of a batch: the results, in task order, as one @store@-encoded
-- list; or the position in the batch of the first task that threw, with the
-- exception's text.
type TaskOutcome = Either (Word32, Text) B.ByteString

-- | Messages from master to worker.
data ToWorker
  = RunBatch
      { runBatchId :: !Word64
      , runRef     :: !TaskRef
      , runCount   :: !Word32         -- ^ number of tasks in the batch
      , runArgs    :: !B.ByteString   -- ^ the arguments, in task order, as one @store@-encoded list
      }
  | Shutdown
  deriving (Eq, Show)

-- | Messages from worker to master.
data FromWorker
  = BatchResult
      { resultBatchId :: !Word64
      , resultBusyNs  :: !Word64          -- ^ time spent computing the batch
      , resultOutcome :: !TaskOutcome     -- ^ all results, or the first failure
      }
  | BatchRejected
      { rejectedBatchId :: !Word64
      , rejectedReason  :: !Text          -- ^ why the function cannot run here
      }
  deriving (Eq, Show)

putFingerprint :: Fingerprint -> BB.Builder
putFingerprint (Fingerprint a b) = putWord64 a <> putWord64 b

getFingerprint :: Get Fingerprint
getFingerprint = Fingerprint <$> getWord64 <*> getWord64

-- | Encode a message to a worker (lazily, so big batches are not copied).
encodeToWorker :: ToWorker -> BL.ByteString
encodeToWorker msg = BB.toLazyByteString $ case msg of
  RunBatch bid ref count args ->
    putWord8 1 <> putWord64 bid
    <> putFingerprint (refKey ref) <> putText (T.pack (refName ref))
    <> putFingerprint (refArgType ref) <> putFingerprint (refResultType ref)
    <> putWord32 count <> putSizedBytes args
  Shutdown -> putWord8 2

-- | Decode a message to a worker.
decodeToWorker :: B.ByteString -> Either String ToWorker
decodeToWorker = runGet $ do
  tag <- getWord8
  case tag of
    1 -> do
      bid <- getWord64
      key <- getFingerprint
      name <- getText
      argT <- getFingerprint
      resT <- getFingerprint
      count <- getWord32
      args <- getSizedBytes
      pure (RunBatch bid (TaskRef key (T.unpack name) argT resT) count args)
    2 -> pure Shutdown
    _ -> failGet ("unknown message tag " ++ show tag)

-- | Encode a message from a worker.
encodeFromWorker :: FromWorker -> BL.ByteString
encodeFromWorker msg = BB.toLazyByteString $ case msg of
  BatchResult bid busy outcome ->
    putWord8 1 <> putWord64 bid <> putWord64 busy <> case outcome of
      Right bytes -> putWord8 0 <> putSizedBytes bytes
      Left (pos, err) -> putWord8 1 <> putWord32 pos <> putText err
  BatchRejected bid why -> putWord8 2 <> putWord64 bid <> putText why

-- | Decode a message from a worker.
decodeFromWorker :: B.ByteString -> Either String FromWorker
decodeFromWorker = runGet $ do
  tag <- getWord8
  case tag of
    1 -> do
      bid <- getWord64
      busy <- getWord64
      status <- getWord8
      outcome <- case status of
        0 -> Right <$> getSizedBytes
        1 -> (\p t -> Left (p, t)) <$> getWord32 <*> getText
        _ -> failGet ("unknown batch status " ++ show status)
      pure (BatchResult bid busy outcome)
    2 -> BatchRejected <$> getWord64 <*> getText
    _ -> failGet ("unknown message tag " ++ show tag)
