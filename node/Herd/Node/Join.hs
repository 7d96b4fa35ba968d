{-# LANGUAGE ScopedTypeVariables #-}
-- | A worker's handshake with its master, shared by real workers
-- ("Herd.Node") and simulated ones ("Herd.Simulate.Host"): prove the
-- secret, say hello, and check the welcome's settings before anything is
-- sized from them.
--
-- Promise: 'joinMaster' returns only settings a worker can use (a frame
-- cap of at least 4 KiB, a packet that fits in a frame, a packet timeout
-- up to 10 s, a stream window from 2 to a million) from a master of the
-- same build; otherwise it says why, in a sentence naming the master, and
-- within 60 s whatever the master does.
module Herd.Node.Join
  ( Joined (..)
  , joinMaster
  , JoinRefused (..)
  ) where

import Control.Exception (Exception (..), IOException, try)
import qualified Data.ByteString as B
import qualified Data.ByteString.Lazy as BL
import qualified Data.Text as T
import Data.Word (Word64)
import Herd.Transport.Auth
import Herd.Core.Packet.Policy (PacketPolicy (..))
import Herd.Transport
import Herd.Core.Wire
import System.Timeout (timeout)

-- | A join that failed, thrown by those that cannot go on without it (a
-- simulated host, the fuzzer): 'joinMaster''s sentence, naming the master.
newtype JoinRefused = JoinRefused String
  deriving (Eq, Show)

instance Exception JoinRefused where
  displayException (JoinRefused why) = why

-- | What the master's welcome settled.
data Joined = Joined
  { joinedId       :: !Word64        -- ^ the worker's number
  , joinedMaxFrame :: !Int           -- ^ the frame cap of the link
  , joinedLiveness :: !Double        -- ^ seconds of silence after which the link is dead
  , joinedPolicy   :: !PacketPolicy  -- ^ how to gather messages into packets
  , joinedWindow   :: !Int           -- ^ stream elements in flight per direction
  }

-- | Authenticate on a fresh connection to the master at the named
-- address (bound to the channel: the hash of the master's TLS
-- certificate, or empty), send this hello, and read the welcome.
joinMaster :: Secret -> B.ByteString -> B.ByteString -> String -> WorkerHello -> Connection -> IO (Either String Joined)
joinMaster secret binding build where_ hello conn = do
  answer <- timeout (60 * 1000000) $ try $ do
    auth <- authenticateToMaster secret binding conn
    case auth of
      Left (WrongSecret why) -> pure (Left ("authentication with master at " ++ where_ ++ " failed: " ++ why))
      Left (AuthProtocol why) -> pure (Left ("handshake with master at " ++ where_ ++ " failed: " ++ why))
      Right () -> do
        sendFrame conn (BL.fromStrict (encodeWorkerHello hello))
        Right <$> recvFrame handshakeFrameLimit conn
  pure $ case answer of
    Nothing -> Left ("master at " ++ where_ ++ " did not complete the handshake within 60 s")
    Just (Left (e :: IOException)) -> Left ("handshake with " ++ where_ ++ " failed: " ++ displayException e)
    Just (Right (Left why)) -> Left why
    Just (Right (Right reply)) -> case fmap decodeMasterReply reply of
      Nothing -> Left ("master at " ++ where_ ++ " closed the connection during the handshake")
      Just (Left why) -> Left ("bad handshake from " ++ where_ ++ ": " ++ why)
      Just (Right (Refused why)) -> Left ("refused by master at " ++ where_ ++ ": " ++ T.unpack why)
      Just (Right (Welcome theirBuild wid maxFrame livenessMs chunking packetBytes timeoutUs window))
        | theirBuild /= build -> Left ("master at " ++ where_ ++ " is a different build; refusing to serve it")
        | maxFrame < 4096 -> bad ("frame cap of " ++ show maxFrame ++ " bytes")
        | packetBytes < 64 || packetBytes > maxFrame - 8 -> bad ("packet size of " ++ show packetBytes ++ " bytes")
        | timeoutUs < 1 || timeoutUs > 10000000 -> bad ("packet timeout of " ++ show timeoutUs ++ " us")
        | window < 2 || window > 1000000 -> bad ("stream window of " ++ show window ++ " elements")
        | otherwise -> Right Joined
            { joinedId = fromIntegral wid
            , joinedMaxFrame = fromIntegral maxFrame
            , joinedLiveness = max 1 (fromIntegral livenessMs / 1000)
            , joinedPolicy = PacketPolicy chunking (fromIntegral packetBytes) (fromIntegral timeoutUs / 1e6)
            , joinedWindow = fromIntegral window }
      Just (Right _) -> Left ("master at " ++ where_ ++ " sent an unexpected handshake frame")
  where
    bad what = Left ("master at " ++ where_ ++ " sent an unusable " ++ what)
