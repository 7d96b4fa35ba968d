{-# LANGUAGE BangPatterns #-}
-- | A peer's send buffer, the packet layer's inside ("Herd.Packet" is its
-- interface): the buffer and its lock, writing a message into it, sending
-- the buffer as a packet, and the timer thread that sends it when its
-- oldest message is due. Adding a message as "Herd.Core.Packet.Policy" plans
-- it is "Herd.Packet.Add".
--
-- Promises: every change to a buffer happens under its lock; a buffer
-- never holds more than 'policyCapacity' bytes of messages; a packet
-- leaves framed, straight from the buffer, and the buffer is reused once
-- the transport has taken it.
module Herd.Packet.Buffer
  ( Sender (..)
  , OpenRun (..)
  , newSender
  , senderPolicy
  , senderStats
  , headerBytes
  , withLock
  , lockedWithTimer
  , withLockNoTimer
  , needsTimer
  , startTimer
  , writeMessageAt
  , flush
  , record
  , bumpValues
  , pokeWord32
  ) where

import Control.Concurrent (forkIO, threadDelay)
import Control.Concurrent.MVar
import Control.Exception (mask, onException)
import Control.Monad (void, when)
import qualified Data.ByteString as B
import qualified Data.ByteString.Internal as BI
import Data.IORef
import Data.Primitive.PrimArray (MutablePrimArray, readPrimArray, writePrimArray)
import GHC.Exts (RealWorld)
import Data.Word (Word32, Word64, Word8)
import Foreign.ForeignPtr (ForeignPtr, withForeignPtr, mallocForeignPtrBytes)
import Foreign.Ptr (Ptr, plusPtr)
import Herd.Sys.Clock (monotonicSeconds)
import Herd.Core.Packet.Policy
import Herd.Packet.Counters
import Herd.Core.Packet.Stats
import Herd.Wire.Writer (Encoder (..))
import Herd.Wire.Writer (pokeBE)

-- | One peer's send buffer. Safe to use from several threads.
data Sender = Sender
  { sLock     :: !(MVar ())
  , sBuffer   :: !(IORef (ForeignPtr Word8))
    -- ^ room for the frame's 4-byte length and the packet's 4-byte count,
    -- then the messages: a packet leaves framed, straight from here
  , sFill     :: !(IORef Fill)
  , sRun      :: !(IORef OpenRun)             -- ^ the run message the next value may join
  , sValues   :: !(MutablePrimArray RealWorld Int)  -- ^ values buffered (for statistics; unboxed: bumped per value)
  , sLarge    :: !(IORef (ForeignPtr Word8, Int))
    -- ^ where a message larger than a packet is framed, with its size:
    -- reused, so a stream of large messages allocates (and first-touches)
    -- no memory per message
  , sArmed    :: !(IORef Bool)                -- ^ a timer thread is watching the buffer
  , sStats    :: !Counters
    -- ^ what was sent ('senderStats' reads it): counting a packet
    -- allocates nothing
  , sPolicy   :: !PacketPolicy
  , sOut      :: [B.ByteString] -> IO ()
    -- ^ hands one framed packet to the transport, as parts to send in
    -- order: the first is the sender's own buffer, the others (a large
    -- message's tail) are immutable values
  }

-- | A sender that hands each packet to the given action, as a whole
-- transport frame (its 4-byte length first) in parts to send in order,
-- which may block: that is how a peer that stops reading holds its
-- senders back. The first part is the sender's own buffer, valid only
-- during the call: an action that keeps any of it must copy it. Any
-- other part is the tail of a message too large for a packet
-- ('addOne'), an immutable value the action may keep as it is: a large
-- value leaves without being copied.
newSender :: PacketPolicy -> ([B.ByteString] -> IO ()) -> IO Sender
newSender policy out = do
  buf <- newBuffer policy
  noLarge <- mallocForeignPtrBytes 0
  Sender <$> newMVar () <*> newIORef buf <*> newIORef emptyFill <*> newIORef NoRun <*> newCounter 1
         <*> newIORef (noLarge, 0) <*> newIORef False
         <*> newCounters <*> pure policy <*> pure out

newBuffer :: PacketPolicy -> IO (ForeignPtr Word8)
newBuffer policy = mallocForeignPtrBytes (headerBytes + policyCapacity policy)

-- | Bytes before the first message in a buffer: the frame's length and
-- the packet's message count.
headerBytes :: Int
headerBytes = 8

-- | The policy this sender follows.
senderPolicy :: Sender -> PacketPolicy
senderPolicy = sPolicy

-- | What was sent so far (the received fields stay zero here).
senderStats :: Sender -> IO PeerStats
senderStats = countersStats . sStats

-- | Where the buffer's last message is a run that values may join: its tag,
-- its key, and the offset of its length in the buffer.
data OpenRun = NoRun | OpenRun !Word8 !Word64 !Int

-- | Run an action on the buffer under its lock, given the time; start the
-- timer if the buffer became non-empty. The lock is given back if the
-- action throws.
withLock :: Sender -> (Double -> IO a) -> IO a
withLock s act = mask $ \restore -> takeMVar (sLock s) >> lockedWithTimer s restore act

-- | The rest of 'withLock' once the lock is taken (inside its mask, whose
-- restore is given): the action, then the timer if the buffer needs one.
lockedWithTimer :: Sender -> (IO a -> IO a) -> (Double -> IO a) -> IO a
lockedWithTimer s restore act = do
  r <- restore (monotonicSeconds >>= act) `onException` putMVar (sLock s) ()
  wasEmptyArm <- needsTimer s
  putMVar (sLock s) ()
  when wasEmptyArm $ void (forkIO (timerLoop s))
  pure r

-- | Called with the lock held: whether a timer thread must start (it is
-- then counted as started: call 'startTimer' once the lock is given back).
needsTimer :: Sender -> IO Bool
needsTimer s = do
  fill <- readIORef (sFill s)
  armed <- readIORef (sArmed s)
  if fillCount fill > 0 && not armed
    then writeIORef (sArmed s) True >> pure True
    else pure False

-- | Start the timer thread that 'needsTimer' asked for.
startTimer :: Sender -> IO ()
startTimer s = void (forkIO (timerLoop s))

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
      next <- withLockNoTimer s $ \t -> do
        fill <- readIORef (sFill s)
        mapM_ (flush s) (planTick (sPolicy s) t fill)
        fill' <- readIORef (sFill s)
        case deadlineOf (sPolicy s) fill' of
          Nothing -> writeIORef (sArmed s) False >> pure Nothing
          d -> pure d
      maybe (pure ()) (go . Just) next
    disarm = withLockNoTimer s $ \_ -> writeIORef (sArmed s) False

-- | Run an action on the buffer under its lock, given the time, and start
-- no timer: for the timer itself, and for callers that flush the sender
-- soon after. The lock is given back if the action throws.
withLockNoTimer :: Sender -> (Double -> IO a) -> IO a
withLockNoTimer s act = mask $ \restore -> do
  takeMVar (sLock s)
  r <- restore (monotonicSeconds >>= act) `onException` putMVar (sLock s) ()
  putMVar (sLock s) ()
  pure r

-- | Write one message into the buffer at this offset, with the lock held:
-- its length, then the encoder's bytes (the fill is the caller's to
-- advance, after this returns: the encoder may throw).
writeMessageAt :: Sender -> Int -> Encoder -> IO ()
writeMessageAt s at (Encoder size write) = do
  buf <- readIORef (sBuffer s)
  withForeignPtr buf $ \p -> do
    write (p `plusPtr` (at + 4))
    pokeWord32 (p `plusPtr` at) (fromIntegral size)
{-# INLINE writeMessageAt #-}

-- | Send the buffer as a packet, with the lock held.
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
    writeIORef (sRun s) NoRun
    values <- readPrimArray (sValues s) 0
    writePrimArray (sValues s) 0 0
    record s why (fillCount fill) values packetBytes
    sOut s [BI.fromForeignPtr buf 0 (4 + packetBytes)]

-- | Count one packet sent: why, its messages, its values and its bytes.
record :: Sender -> FlushReason -> Int -> Int -> Int -> IO ()
record s = countPacket (sStats s)

-- | Count values added to the buffer (for statistics).
bumpValues :: Sender -> Int -> IO ()
bumpValues s k = readPrimArray (sValues s) 0 >>= writePrimArray (sValues s) 0 . (+ k)
{-# INLINE bumpValues #-}

-- | Write a 32-bit big-endian number (a frame's or a message's length).
pokeWord32 :: Ptr Word8 -> Word32 -> IO ()
pokeWord32 p w = pokeBE 4 p 0 (fromIntegral w)
