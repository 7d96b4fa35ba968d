{-# LANGUAGE BangPatterns #-}
{-# LANGUAGE ScopedTypeVariables #-}
-- | The packet layer, between the protocol and the transport: one send
-- buffer per peer whose messages leave together as packets (Eden's dynamic
-- chunking), and the checked splitting of a received packet back into
-- messages.
--
-- A packet is one transport frame: a 32-bit message count, then each
-- message as a 32-bit length and its body. Every decision about when a
-- buffer leaves is taken by "Herd.Packet.Policy"; this module only carries
-- it out, keeps statistics, and runs the timer that sends a buffer whose
-- oldest message is due. Messages are written straight into the buffer, so
-- adding one costs no allocation beyond its encoder.
--
-- Promises: a received packet whose count or lengths claim more than it
-- holds is rejected with a message saying so, before any of it is used;
-- a sender's buffer never holds more than 'policyCapacity' bytes.
module Herd.Packet
  ( -- * Senders
    Sender
  , newSender
  , senderPolicy
  , Encoder (..)
  , encodeBytes
  , encoderBytes
  , packetOf
  , sendMessage
  , sendMessages
  , flushIdle
  , senderRoom
    -- * Receiving
  , splitPacket
    -- * Statistics
  , PeerStats (..)
  , noPeerStats
  , senderStats
  , countReceived
  , meanPerPacket
  , addPeerStats
  ) where

import Control.Concurrent (forkIO, threadDelay)
import Control.Concurrent.MVar
import Control.Exception (mask, onException)
import Control.Monad (void, when)
import qualified Data.ByteString as B
import qualified Data.ByteString.Internal as BI
import Data.IORef
import qualified Data.Map.Strict as M
import Data.Word (Word32, Word8)
import Foreign.ForeignPtr (ForeignPtr, withForeignPtr, mallocForeignPtrBytes)
import Foreign.Ptr (Ptr, plusPtr)
import Herd.Clock (monotonicSeconds)
import Herd.Packet.Policy
import Herd.Base (Encoder (..), encodeBytes, encoderBytes)
import Herd.Bytes (bytesBE, pokeBE)
import Herd.Packet.Split (splitPacket)

-- | One packet holding these messages, whatever their size (for tests and
-- tools that speak the protocol by hand).
packetOf :: [Encoder] -> IO B.ByteString
packetOf encs = do
  bodies <- mapM encoderBytes encs
  let header = B.pack . word32Bytes
  pure (B.concat (header (length bodies) : concatMap (\b -> [header (B.length b), b]) bodies))
  where word32Bytes n = bytesBE 4 (fromIntegral n)

-- | Per-peer packet statistics.
data PeerStats = PeerStats
  { packetsSent      :: !Int
  , messagesSent     :: !Int
  , bytesSent        :: !Int
  , maxSentPerPacket :: !Int
  , flushesBy        :: !(M.Map FlushReason Int)  -- ^ packets sent, by the rule that sent them
  , packetsReceived  :: !Int
  , messagesReceived :: !Int
  , bytesReceived    :: !Int
  , maxReceivedPerPacket :: !Int
  } deriving (Eq, Show)

-- | No traffic yet.
noPeerStats :: PeerStats
noPeerStats = PeerStats 0 0 0 0 M.empty 0 0 0 0

-- | Messages per packet sent and received (0 when none).
meanPerPacket :: PeerStats -> (Double, Double)
meanPerPacket s = (ratio (messagesSent s) (packetsSent s), ratio (messagesReceived s) (packetsReceived s))
  where ratio a b = if b == 0 then 0 else fromIntegral a / fromIntegral b

-- | Sum two peers' statistics (maxima are maxima).
addPeerStats :: PeerStats -> PeerStats -> PeerStats
addPeerStats a b = PeerStats
  { packetsSent = packetsSent a + packetsSent b
  , messagesSent = messagesSent a + messagesSent b
  , bytesSent = bytesSent a + bytesSent b
  , maxSentPerPacket = max (maxSentPerPacket a) (maxSentPerPacket b)
  , flushesBy = M.unionWith (+) (flushesBy a) (flushesBy b)
  , packetsReceived = packetsReceived a + packetsReceived b
  , messagesReceived = messagesReceived a + messagesReceived b
  , bytesReceived = bytesReceived a + bytesReceived b
  , maxReceivedPerPacket = max (maxReceivedPerPacket a) (maxReceivedPerPacket b)
  }

-- | Count a received packet of this many messages and bytes.
countReceived :: Int -> Int -> PeerStats -> PeerStats
countReceived msgs bytes s = s
  { packetsReceived = packetsReceived s + 1
  , messagesReceived = messagesReceived s + msgs
  , bytesReceived = bytesReceived s + bytes
  , maxReceivedPerPacket = max (maxReceivedPerPacket s) msgs
  }

-- | One peer's send buffer. Safe to use from several threads.
data Sender = Sender
  { sLock     :: !(MVar ())
  , sBuffer   :: !(IORef (ForeignPtr Word8))
    -- ^ room for the frame's 4-byte length and the packet's 4-byte count,
    -- then the messages: a packet leaves framed, straight from here
  , sFill     :: !(IORef Fill)
  , sArmed    :: !(IORef Bool)                -- ^ a timer thread is watching the buffer
  , sStats    :: !(IORef PeerStats)
  , sPolicy   :: !PacketPolicy
  , sOut      :: B.ByteString -> IO ()        -- ^ hands one framed packet to the transport
  }

-- | A sender that hands each packet to the given action, as a whole
-- transport frame (its 4-byte length first), which may block: that is how
-- a peer that stops reading holds its senders back. The bytes are the
-- sender's own buffer, valid only during the call: an action that keeps
-- any of them must copy them.
newSender :: PacketPolicy -> (B.ByteString -> IO ()) -> IO Sender
newSender policy out = do
  buf <- newBuffer policy
  Sender <$> newMVar () <*> newIORef buf <*> newIORef emptyFill <*> newIORef False
         <*> newIORef noPeerStats <*> pure policy <*> pure out

newBuffer :: PacketPolicy -> IO (ForeignPtr Word8)
newBuffer policy = mallocForeignPtrBytes (headerBytes + policyCapacity policy)

-- The frame's length and the packet's message count.
headerBytes :: Int
headerBytes = 8

-- | The policy this sender follows.
senderPolicy :: Sender -> PacketPolicy
senderPolicy = sPolicy

-- | What was sent so far (the received fields stay zero here).
senderStats :: Sender -> IO PeerStats
senderStats s = readIORef (sStats s)

-- | Add one message.
sendMessage :: Sender -> Urgency -> Encoder -> IO ()
sendMessage s urgency enc = withLock s $ \now -> addOne s now urgency enc

-- | Add several messages in order, under one hold of the buffer (cheaper
-- than one 'sendMessage' each). The encoders are consumed lazily; an
-- encoder that throws stops there, after the messages before it.
sendMessages :: Sender -> Urgency -> [Encoder] -> IO ()
sendMessages s urgency encs = withLock s $ \now -> mapM_ (addOne s now urgency) encs

-- | How many bytes of body the next message may have to join what is
-- buffered ('roomFor'): a sender of runs of values fills its message to
-- this. Read without the lock: a stale answer only makes a run shorter
-- or longer, never wrong.
senderRoom :: Sender -> IO Int
senderRoom s = roomFor (sPolicy s) <$> readIORef (sFill s)

-- | The sending side has nothing else ready to do: send what is buffered.
flushIdle :: Sender -> IO ()
flushIdle s = do
  fill <- readIORef (sFill s)   -- racy peek: skip the lock when clearly empty
  when (fillCount fill > 0) $ withLock s $ \_ -> do
    f <- readIORef (sFill s)
    mapM_ (flush s) (planIdle f)

withLock :: Sender -> (Double -> IO a) -> IO a
withLock s act = mask $ \restore -> do
  takeMVar (sLock s)
  r <- restore (monotonicSeconds >>= act) `onException` putMVar (sLock s) ()
  wasEmptyArm <- needsTimer s
  putMVar (sLock s) ()
  when wasEmptyArm $ void (forkIO (timerLoop s))
  pure r

-- Called with the lock held: whether a timer thread must start.
needsTimer :: Sender -> IO Bool
needsTimer s = do
  fill <- readIORef (sFill s)
  armed <- readIORef (sArmed s)
  if fillCount fill > 0 && not armed
    then writeIORef (sArmed s) True >> pure True
    else pure False

-- Sleep until the buffer's deadline, send it if due, and stop once the
-- buffer is empty.
timerLoop :: Sender -> IO ()
timerLoop s = do
  first <- deadlineOf (sPolicy s) <$> readIORef (sFill s)
  go first
  where
    go Nothing = disarm
    go (Just deadline) = do
      now <- monotonicSeconds
      when (deadline > now) $ threadDelay (max 50 (ceiling ((deadline - now) * 1e6)))
      next <- withLockNoTimer $ \t -> do
        fill <- readIORef (sFill s)
        mapM_ (flush s) (planTick (sPolicy s) t fill)
        fill' <- readIORef (sFill s)
        case deadlineOf (sPolicy s) fill' of
          Nothing -> writeIORef (sArmed s) False >> pure Nothing
          d -> pure d
      maybe (pure ()) (go . Just) next
    disarm = withLockNoTimer $ \_ -> writeIORef (sArmed s) False
    withLockNoTimer act = mask $ \restore -> do
      takeMVar (sLock s)
      r <- restore (monotonicSeconds >>= act) `onException` putMVar (sLock s) ()
      putMVar (sLock s) ()
      pure r

-- Add one message, with the lock held.
addOne :: Sender -> Double -> Urgency -> Encoder -> IO ()
addOne s now urgency enc@(Encoder size write) = do
  fill <- readIORef (sFill s)
  if joinsQuietly (sPolicy s) now urgency size fill
    then do
      -- the common case, decided without building a plan
      buf <- readIORef (sBuffer s)
      withForeignPtr buf $ \p -> do
        let at = p `plusPtr` (headerBytes + fillBytes fill)
        write (at `plusPtr` 4)
        pokeWord32 at (fromIntegral size)
      writeIORef (sFill s) $! fill { fillBytes = fillBytes fill + size + messageOverhead
                                   , fillCount = fillCount fill + 1 }
    else addPlanned s now urgency enc fill

addPlanned :: Sender -> Double -> Urgency -> Encoder -> Fill -> IO ()
addPlanned s now urgency enc@(Encoder size write) fill = do
  let plan = planAdd (sPolicy s) now urgency size fill
  mapM_ (flush s) (planBefore plan)
  case planAlone plan of
    Just why -> sendAlone s why enc
    Nothing -> do
      base <- readIORef (sFill s)
      buf <- readIORef (sBuffer s)
      withForeignPtr buf $ \p -> do
        let at = p `plusPtr` (headerBytes + fillBytes base)
        write (at `plusPtr` 4)     -- may throw: the fill is not advanced then
        pokeWord32 at (fromIntegral size)
      writeIORef (sFill s) $! fillAfterAdd now size plan { planBefore = Nothing } base
      mapM_ (flush s) (planAfter plan)

sendAlone :: Sender -> FlushReason -> Encoder -> IO ()
sendAlone s why (Encoder size write) = do
  frame <- BI.create (headerBytes + 4 + size) $ \p -> do
    write (p `plusPtr` (headerBytes + 4))
    pokeWord32 p (fromIntegral (4 + 4 + size))
    pokeWord32 (p `plusPtr` 4) 1
    pokeWord32 (p `plusPtr` headerBytes) (fromIntegral size)
  record s why 1 (B.length frame - 4)
  sOut s frame

-- Send the buffer as a packet, with the lock held.
flush :: Sender -> FlushReason -> IO ()
flush s why = do
  fill <- readIORef (sFill s)
  when (fillCount fill > 0) $ do
    buf <- readIORef (sBuffer s)
    -- the frame is the buffer itself (no copy); it is reused once the
    -- transport has taken it
    let packetBytes = 4 + fillBytes fill
    withForeignPtr buf $ \p -> do
      pokeWord32 p (fromIntegral packetBytes)
      pokeWord32 (p `plusPtr` 4) (fromIntegral (fillCount fill))
    writeIORef (sFill s) emptyFill
    record s why (fillCount fill) packetBytes
    sOut s (BI.fromForeignPtr buf 0 (4 + packetBytes))

record :: Sender -> FlushReason -> Int -> Int -> IO ()
record s why msgs bytes = modifyIORef' (sStats s) $ \st -> st
  { packetsSent = packetsSent st + 1
  , messagesSent = messagesSent st + msgs
  , bytesSent = bytesSent st + bytes
  , maxSentPerPacket = max (maxSentPerPacket st) msgs
  , flushesBy = M.insertWith (+) why 1 (flushesBy st)
  }

pokeWord32 :: Ptr Word8 -> Word32 -> IO ()
pokeWord32 p w = pokeBE 4 p 0 (fromIntegral w)
