-- | herd's handshake: the frames a worker and the master exchange before
-- any message, decoded by hand from frames of at most
-- 'handshakeFrameLimit' bytes, so nothing a peer sends is given to @store@
-- before its protocol version and build identity have been accepted.
-- Pure.
module Herd.Core.Wire.Handshake
  ( protocolVersion
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
  ) where

import Control.Monad (unless, when)
import qualified Data.ByteString as B
import qualified Data.ByteString.Builder as BB
import qualified Data.ByteString.Char8 as BC
import Data.Text (Text)
import Data.Word (Word16, Word32, Word8)
import Herd.Core.Base (shortBuildId)
import Herd.Core.Wire.Codec

-- | Version of this protocol; peers must match exactly.
protocolVersion :: Word16
protocolVersion = 14

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
  , helloLink    :: !HelloLink     -- ^ what the link will be after the welcome
  , helloCpu     :: !Word32        -- ^ the CPU it is pinned to ('noCpu': not pinned)
  } deriving (Eq, Show)

-- | What a link becomes after the welcome.
data HelloLink
  = DirectLink  -- ^ one worker's messages, on this connection
  | ShmLink     -- ^ one worker's, over shared memory set up on it ("Herd.Transport.Shm")
  | HostLink    -- ^ a host agent's: its workers' packets as entries ("Herd.Core.Wire.Host")
  deriving (Eq, Show)

-- | The 'helloCpu' of a worker that is not pinned.
noCpu :: Word32
noCpu = maxBound

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
  | Challenge { challengeNonce :: !B.ByteString }  -- ^ the master's nonce ("Herd.Transport.Auth")
  | AuthAccepted { acceptedProof :: !B.ByteString } -- ^ the master's proof of the secret
  deriving (Eq, Show)

-- | Encode a hello.
encodeWorkerHello :: WorkerHello -> B.ByteString
encodeWorkerHello h = buildStrict $
  BB.byteString magic <> putWord16 (helloVersion h) <> putSizedBytes (helloBuild h)
  <> putWord32 (helloPid h) <> putText (helloHost h) <> putText (helloGroup h)
  <> putWord8 (linkByte (helloLink h)) <> putWord32 (helloCpu h)

-- | Decode a hello, checking the magic bytes.
decodeWorkerHello :: B.ByteString -> Either String WorkerHello
decodeWorkerHello = runGet $ do
  m <- getBytes 4
  unless (m == magic) $ failGet "not a herd peer (bad magic bytes)"
  WorkerHello <$> getWord16 <*> getSizedBytes <*> getWord32 <*> getText <*> getText <*> getFlag <*> getWord32
  where
    getFlag = getWord8 >>= \b -> case b of
      0 -> pure DirectLink
      1 -> pure ShmLink
      2 -> pure HostLink
      _ -> failGet ("bad link kind " ++ show b)

linkByte :: HelloLink -> Word8
linkByte l = case l of
  DirectLink -> 0
  ShmLink -> 1
  HostLink -> 2

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
