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
  , sendValues
  , flushIdle
  , senderRoom
    -- * Runs of values
  , appendToRun
  , runHeadBytes
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
import Control.Exception (mask, mask_, onException)
import Control.Monad (void, when)
import qualified Data.ByteString as B
import qualified Data.ByteString.Internal as BI
import Data.IORef
import Data.Primitive.PrimArray (MutablePrimArray, newPrimArray, readPrimArray, writePrimArray)
import GHC.Exts (RealWorld)
import Data.Word (Word32, Word64, Word8)
import Foreign.ForeignPtr (ForeignPtr, withForeignPtr, mallocForeignPtrBytes)
import Foreign.Marshal.Utils (copyBytes)
import Foreign.Ptr (Ptr, plusPtr)
import Foreign.Storable (pokeByteOff)
import Herd.Clock (monotonicSeconds)
import Herd.Packet.Policy
import Herd.Packet.Stats
import Herd.Base (Encoder (..), encodeBytes, encoderBytes)
import Herd.Bytes (bytesBE, peekPtrBE, pokeBE)
import Herd.Packet.Split (splitPacket)

-- | One packet holding these messages, whatever their size (for tests and
-- tools that speak the protocol by hand).
packetOf :: [Encoder] -> IO B.ByteString
packetOf encs = do
  bodies <- mapM encoderBytes encs
  let header = B.pack . word32Bytes
  pure (B.concat (header (length bodies) : concatMap (\b -> [header (B.length b), b]) bodies))
  where word32Bytes n = bytesBE 4 (fromIntegral n)

-- | One peer's send buffer. Safe to use from several threads.
data Sender = Sender
  { sLock     :: !(MVar ())
  , sBuffer   :: !(IORef (ForeignPtr Word8))
    -- ^ room for the frame's 4-byte length and the packet's 4-byte count,
    -- then the messages: a packet leaves framed, straight from here
  , sFill     :: !(IORef Fill)
  , sRun      :: !(IORef OpenRun)             -- ^ the run message the next value may join
  , sValues   :: !(MutablePrimArray RealWorld Int)  -- ^ values buffered (for statistics; unboxed: bumped per value)
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
  Sender <$> newMVar () <*> newIORef buf <*> newIORef emptyFill <*> newIORef NoRun <*> newCounter <*> newIORef False
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
sendMessage s urgency enc = withLock s $ \now -> addMessage s now urgency 1 enc

-- | Add one message that carries this many values (a run of a batch's
-- arguments or results), counted as such in the statistics.
sendValues :: Sender -> Urgency -> Int -> Encoder -> IO ()
sendValues s urgency k enc = withLock s $ \now -> addMessage s now urgency k enc

-- | Add several messages in order, under one hold of the buffer (cheaper
-- than one 'sendMessage' each). The encoders are consumed lazily; an
-- encoder that throws stops there, after the messages before it.
sendMessages :: Sender -> Urgency -> [Encoder] -> IO ()
sendMessages s urgency encs = withLock s $ \now -> mapM_ (addMessage s now urgency 1) encs

-- A message that values cannot join: the next value starts a run of its own.
addMessage :: Sender -> Double -> Urgency -> Int -> Encoder -> IO ()
addMessage s now urgency k enc = addOne s now urgency k enc >> writeIORef (sRun s) NoRun

-- Where the buffer's last message is a run that values may join: its tag,
-- its key, and the offset of its length in the buffer.
data OpenRun = NoRun | OpenRun !Word8 !Word64 !Int

-- | Add one value, already encoded (these bytes), to the run message of
-- this tag and key (a stream's elements, say): appended to that message
-- when it is the last one buffered and the rules allow ('appendsToRun'),
-- so a run of values costs one message header, not one each; otherwise
-- as the first value of a new run message, added like any other (so with
-- chunking off every value is a message of its own, sent at once). The
-- message reads: the tag, the key, the count of values, then their
-- encodings back to back ('runHeadBytes'). The common case is a copy
-- under the lock: no clock, no allocation beyond the fill, no handler
-- (nothing in it can throw); the timer sends the buffer when its oldest
-- message is due, whatever its last one is.
appendToRun :: Sender -> Word8 -> Word64 -> Ptr Word8 -> Int -> IO ()
appendToRun s tag key src size = mask_ $ do
  takeMVar (sLock s)
  fill <- readIORef (sFill s)
  open <- readIORef (sRun s)
  case open of
    OpenRun t k at | t == tag, k == key, appendsToRun (sPolicy s) size fill -> do
      buf <- readIORef (sBuffer s)
      withForeignPtr buf $ \p -> do
        copyBytes (p `plusPtr` (headerBytes + fillBytes fill)) src size
        len <- peekPtrBE 4 p at
        pokeBE 4 p at (len + fromIntegral size)
        count <- peekPtrBE 4 p (at + 4 + 9)
        pokeBE 4 p (at + 4 + 9) (count + 1)
      writeIORef (sFill s) $! fillAfterAppend size fill
      bumpValues s 1
      putMVar (sLock s) ()
    _ -> do
      -- a new run message: the general path (it may flush, so it may
      -- block or throw in the transport; the lock is given back then)
      flip onException (putMVar (sLock s) ()) $ do
        now <- monotonicSeconds
        placed <- addOne s now Bulk 1 $ Encoder (runHeadBytes + size) $ \p -> do
          pokeByteOff p 0 tag
          pokeBE 8 p 1 key
          pokeBE 4 p 9 1
          copyBytes (p `plusPtr` runHeadBytes) src size
        writeIORef (sRun s) $! maybe NoRun (OpenRun tag key) placed
      arm <- needsTimer s
      putMVar (sLock s) ()
      when arm $ void (forkIO (timerLoop s))

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

-- Add one message, with the lock held; where its length is in the buffer
-- if it stays buffered.
addOne :: Sender -> Double -> Urgency -> Int -> Encoder -> IO (Maybe Int)
addOne s now urgency k enc@(Encoder size write) = do
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
    else addPlanned s now urgency k enc fill

addPlanned :: Sender -> Double -> Urgency -> Int -> Encoder -> Fill -> IO (Maybe Int)
addPlanned s now urgency k enc@(Encoder size write) fill = do
  let plan = planAdd (sPolicy s) now urgency size fill
  mapM_ (flush s) (planBefore plan)
  case planAlone plan of
    Just why -> Nothing <$ sendAlone s why k enc
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

sendAlone :: Sender -> FlushReason -> Int -> Encoder -> IO ()
sendAlone s why k (Encoder size write) = do
  frame <- BI.create (headerBytes + 4 + size) $ \p -> do
    write (p `plusPtr` (headerBytes + 4))
    pokeWord32 p (fromIntegral (4 + 4 + size))
    pokeWord32 (p `plusPtr` 4) 1
    pokeWord32 (p `plusPtr` headerBytes) (fromIntegral size)
  record s why 1 k (B.length frame - 4)
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
    writeIORef (sRun s) NoRun
    values <- readPrimArray (sValues s) 0
    writePrimArray (sValues s) 0 0
    record s why (fillCount fill) values packetBytes
    sOut s (BI.fromForeignPtr buf 0 (4 + packetBytes))

record :: Sender -> FlushReason -> Int -> Int -> Int -> IO ()
record s why msgs values bytes = modifyIORef' (sStats s) (countSent why msgs values bytes)

newCounter :: IO (MutablePrimArray RealWorld Int)
newCounter = do
  c <- newPrimArray 1
  writePrimArray c 0 0
  pure c

bumpValues :: Sender -> Int -> IO ()
bumpValues s k = readPrimArray (sValues s) 0 >>= writePrimArray (sValues s) 0 . (+ k)
{-# INLINE bumpValues #-}

pokeWord32 :: Ptr Word8 -> Word32 -> IO ()
pokeWord32 p w = pokeBE 4 p 0 (fromIntegral w)
