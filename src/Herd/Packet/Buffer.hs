{-# LANGUAGE BangPatterns #-}
-- | A peer's send buffer, the packet layer's inside ("Herd.Packet" is its
-- interface): the buffer and its lock, adding one message as
-- "Herd.Packet.Policy" plans it, sending the buffer as a packet, and the
-- timer thread that sends it when its oldest message is due.
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
  , withLockNoTimer
  , needsTimer
  , startTimer
  , addOne
  , sendUrgent
  , flush
  , bumpValues
  , tailKeptBytes
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
import Herd.Clock (monotonicSeconds)
import Herd.Packet.Policy
import Herd.Packet.Counters
import Herd.Packet.Stats
import Herd.Base (Encoder (..), encodeWithTail)
import Herd.Bytes (pokeBE)

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

-- The rest of 'withLock' once the lock is taken (inside its mask, whose
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

-- | Add one message carrying this many values, with the lock held: the
-- encoder's bytes, then the tail's (a value at the message's end, often
-- empty); where its length is in the buffer if it stays buffered
-- ('Nothing': it left in a packet at once). A message that leaves alone
-- with a tail of 'tailKeptBytes' or more is sent with the tail as a part
-- of its own, not copied.
addOne :: Sender -> Double -> Urgency -> Int -> Encoder -> B.ByteString -> IO (Maybe Int)
addOne s now urgency k enc0 tl = do
  let enc@(Encoder size write) = encodeWithTail enc0 tl
  fill <- readIORef (sFill s)
  if joinsQuietly (sPolicy s) now urgency size fill
    then do
      -- the common case, decided without building a plan
      buf <- readIORef (sBuffer s)
      let at = headerBytes + fillBytes fill
      withForeignPtr buf $ \p -> do
        write (p `plusPtr` (at + 4))
        pokeWord32 (p `plusPtr` at) (fromIntegral size)
      writeIORef (sFill s) $! fill { fillBytes = fillBytes fill + size + messageOverhead
                                   , fillCount = fillCount fill + 1 }
      bumpValues s k
      pure (Just at)
    else addPlanned s now urgency k enc0 tl enc fill

addPlanned :: Sender -> Double -> Urgency -> Int -> Encoder -> B.ByteString -> Encoder -> Fill -> IO (Maybe Int)
addPlanned s now urgency k headEnc tl enc@(Encoder size write) fill = do
  let plan = planAdd (sPolicy s) now urgency size fill
  mapM_ (flush s) (planBefore plan)
  case planAlone plan of
    Just why
      | B.length tl >= tailKeptBytes -> Nothing <$ sendAlone s why k headEnc tl
      | otherwise -> Nothing <$ sendAlone s why k enc B.empty
    Nothing -> do
      base <- readIORef (sFill s)
      buf <- readIORef (sBuffer s)
      let at = headerBytes + fillBytes base
      withForeignPtr buf $ \p -> do
        write (p `plusPtr` (at + 4))     -- may throw: the fill is not advanced then
        pokeWord32 (p `plusPtr` at) (fromIntegral size)
      writeIORef (sFill s) $! fillAfterAdd now size plan { planBefore = Nothing } base
      bumpValues s k
      case planAfter plan of
        Just why -> Nothing <$ flush s why
        Nothing -> pure (Just at)

-- | Send one 'Urgent' message now, with whatever is buffered before it.
-- With the buffer empty and room for the message (a ping, a credit, a
-- last value: the latency-bound case) the message is framed in the buffer
-- and sent under one hold of the lock, with no clock reading, no plan and
-- no timer, as it would leave at once whatever the policy. Otherwise it
-- takes the general path ('addOne'). The lock is given back if the
-- encoder or the transport throws.
sendUrgent :: Sender -> Encoder -> IO ()
sendUrgent s enc@(Encoder size write) = mask $ \restore -> do
  takeMVar (sLock s)
  fill <- readIORef (sFill s)
  if fillCount fill == 0 && size + messageOverhead <= policyCapacity (sPolicy s)
    then do
      restore (do
        buf <- readIORef (sBuffer s)
        withForeignPtr buf $ \p -> do
          write (p `plusPtr` (headerBytes + 4))   -- may throw: nothing is buffered then
          pokeWord32 (p `plusPtr` headerBytes) (fromIntegral size)
        writeIORef (sFill s) $! Fill (size + messageOverhead) 1 0
        bumpValues s 1
        writeIORef (sRun s) NoRun
        flush s (if policyChunking (sPolicy s) then FlushUrgent else FlushUnbuffered))
        `onException` putMVar (sLock s) ()
      putMVar (sLock s) ()
    else lockedWithTimer s restore (\now -> addOne s now Urgent 1 enc B.empty >> writeIORef (sRun s) NoRun)

-- Send one message as a packet of its own: the encoder's bytes framed in
-- the sender's buffer for large messages, and the tail after them as a
-- part of its own.
sendAlone :: Sender -> FlushReason -> Int -> Encoder -> B.ByteString -> IO ()
sendAlone s why k (Encoder headSize write) tl = do
  let size = headSize + B.length tl
      need = headerBytes + 4 + headSize
      frameAt p = do
        write (p `plusPtr` (headerBytes + 4))
        pokeWord32 p (fromIntegral (4 + 4 + size))
        pokeWord32 (p `plusPtr` 4) 1
        pokeWord32 (p `plusPtr` headerBytes) (fromIntegral size)
  frame <- if need > largeKept then BI.create need frameAt else do
    (buf0, cap) <- readIORef (sLarge s)
    buf <- if need <= cap then pure buf0 else do
      let cap' = min largeKept (max need (2 * cap))
      fresh <- mallocForeignPtrBytes cap'
      writeIORef (sLarge s) (fresh, cap')
      pure fresh
    withForeignPtr buf frameAt
    pure (BI.fromForeignPtr buf 0 need)
  record s why 1 k (need - 4 + B.length tl)
  sOut s (if B.null tl then [frame] else [frame, tl])

-- | The smallest tail sent as a part of its own rather than copied behind
-- its message's head: a packet's size, so a tail that could share a
-- packet is copied as before. (Chosen, not swept: only 1 MiB tails were
-- measured.)
tailKeptBytes :: Int
tailKeptBytes = 64 * 1024

-- The largest frame a sender keeps a buffer for (larger ones are
-- allocated each time, so one huge message pins no memory for good).
largeKept :: Int
largeKept = 16 * 1024 * 1024

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

record :: Sender -> FlushReason -> Int -> Int -> Int -> IO ()
record s = countPacket (sStats s)

-- | Count values added to the buffer (for statistics).
bumpValues :: Sender -> Int -> IO ()
bumpValues s k = readPrimArray (sValues s) 0 >>= writePrimArray (sValues s) 0 . (+ k)
{-# INLINE bumpValues #-}

pokeWord32 :: Ptr Word8 -> Word32 -> IO ()
pokeWord32 p w = pokeBE 4 p 0 (fromIntegral w)
