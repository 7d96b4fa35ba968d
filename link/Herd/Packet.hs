{-# LANGUAGE BangPatterns #-}
{-# LANGUAGE ScopedTypeVariables #-}
-- | The packet layer, between the protocol and the transport: one send
-- buffer per peer whose messages leave together as packets (Eden's dynamic
-- chunking), and the checked splitting of a received packet back into
-- messages.
--
-- A packet is one transport frame: a 32-bit message count, then each
-- message as a 32-bit length and its body. Every decision about when a
-- buffer leaves is taken by "Herd.Core.Packet.Policy"; this module only carries
-- it out, keeps statistics, and runs the timer that sends a buffer whose
-- oldest message is due ("Herd.Packet.Buffer" holds the buffer itself).
-- Messages are written straight into the buffer, so adding one costs no
-- allocation beyond its encoder; a value of a run (a stream's element) is
-- appended to the run message that ends the buffer ('appendValuesToRun'),
-- so a run costs one message header.
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
  , sendMessageTail
  , sendMessageHeld
  , sendMessagesHeld
  , sendValues
  , flushIdle
  , senderRoom
    -- * Runs of values
  , appendValuesToRun
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

import Control.Concurrent.MVar
import Control.Exception (mask_, onException)
import Control.Monad (when)
import qualified Data.ByteString as B
import Data.IORef
import Data.Word (Word64, Word8)
import Foreign.ForeignPtr (withForeignPtr)
import Foreign.Marshal.Utils (copyBytes)
import Foreign.Ptr (Ptr, plusPtr)
import Foreign.Storable (pokeByteOff)
import Herd.Sys.Clock (monotonicSeconds)
import Herd.Packet.Add
import Herd.Packet.Buffer
import Herd.Core.Packet.Policy
import Herd.Core.Packet.Stats
import Herd.Wire.Writer (Encoder (..), encodeBytes, encoderBytes)
import Herd.Core.Bytes (bytesBE, peekPtrBE)
import Herd.Wire.Writer (pokeBE)
import Herd.Core.Packet.Split (splitPacket)

-- | One packet holding these messages, whatever their size (for tests and
-- tools that speak the protocol by hand).
packetOf :: [Encoder] -> IO B.ByteString
packetOf encs = do
  bodies <- mapM encoderBytes encs
  let header = B.pack . word32Bytes
  pure (B.concat (header (length bodies) : concatMap (\b -> [header (B.length b), b]) bodies))
  where word32Bytes n = bytesBE 4 (fromIntegral n)

-- | Add one message.
sendMessage :: Sender -> Urgency -> Encoder -> IO ()
sendMessage s Urgent enc = sendUrgent s enc
sendMessage s urgency enc = withLock s $ \now -> addMessage s now urgency 1 enc B.empty

-- | Add one message made of the encoder's bytes, then the tail's (a value
-- that ends the message). A message too large for a packet leaves with
-- its tail sent as it is, not copied into a frame: a large value costs
-- the sender no copy of its own.
sendMessageTail :: Sender -> Urgency -> Encoder -> B.ByteString -> IO ()
sendMessageTail s urgency enc tl = withLock s $ \now -> addMessage s now urgency 1 enc tl

-- | Add one message for a caller that flushes this sender itself soon
-- after ('flushIdle'), as the master's shell does at the end of every
-- step: no timer thread is started for it. Sending the first asks of an
-- evolve call to 2048 workers forked 2048 timer threads that all woke to
-- find nothing to send. The message is the encoder's bytes, then the
-- tail's, as in 'sendMessageTail'.
sendMessageHeld :: Sender -> Urgency -> Encoder -> B.ByteString -> IO ()
sendMessageHeld s urgency enc tl = withLockNoTimer s $ \now -> addMessage s now urgency 1 enc tl

-- | Add these messages, in order, the last one 'Urgent' and the others
-- 'Bulk', under one hold of the lock and one reading of the clock; for a
-- caller that flushes this sender itself soon after, as with
-- 'sendMessageHeld'. Each message is an encoder's bytes, then a tail's.
-- (An evolve call's first asks to 2048 workers are 8192 messages: taking
-- the lock and the clock once per worker, not once per message.)
sendMessagesHeld :: Sender -> [(Encoder, B.ByteString)] -> IO ()
sendMessagesHeld _ [] = pure ()
sendMessagesHeld s msgs = withLockNoTimer s $ \now ->
  let go [] = pure ()
      go [(enc, tl)] = addMessage s now Urgent 1 enc tl
      go ((enc, tl) : rest) = addMessage s now Bulk 1 enc tl >> go rest
  in go msgs

-- | Add one message that carries this many values (a run of a batch's
-- arguments or results), counted as such in the statistics.
sendValues :: Sender -> Urgency -> Int -> Encoder -> IO ()
sendValues s urgency k enc = withLock s $ \now -> addMessage s now urgency k enc B.empty


-- | Add values, already encoded back to back (these bytes, this many
-- values), to the run message of this tag and key (a stream's elements,
-- say): appended to that message when it is the last one buffered and the
-- rules allow ('appendsToRun'), so a run of values costs one message
-- header, not one each; otherwise as the first values of a new run
-- message, added like any other. The message reads: the tag, the key, the
-- count of values, then their encodings back to back ('runHeadBytes'). The
-- common case is one copy under the lock for them all: no clock, no
-- allocation beyond the fill, no handler (nothing in it can throw); the
-- timer sends the buffer when its oldest message is due, whatever its last
-- one is. With chunking off the values given together still leave as one
-- message: a caller that wants one message per value (with chunking off,
-- every value a packet of its own) gives one value at a time.
appendValuesToRun :: Sender -> Word8 -> Word64 -> Ptr Word8 -> Int -> Int -> IO ()
appendValuesToRun s tag key src size k = mask_ $ do
  takeMVar (sLock s)
  fill <- readIORef (sFill s)
  open <- readIORef (sRun s)
  case open of
    OpenRun t key' at | t == tag, key' == key, appendsToRun (sPolicy s) size fill -> do
      buf <- readIORef (sBuffer s)
      withForeignPtr buf $ \p -> do
        copyBytes (p `plusPtr` (headerBytes + fillBytes fill)) src size
        len <- peekPtrBE 4 p at
        pokeBE 4 p at (len + fromIntegral size)
        count <- peekPtrBE 4 p (at + 4 + 9)
        pokeBE 4 p (at + 4 + 9) (count + fromIntegral k)
      writeIORef (sFill s) $! fillAfterAppend size fill
      bumpValues s k
      putMVar (sLock s) ()
    _ -> do
      -- a new run message: the general path (it may flush, so it may
      -- block or throw in the transport; the lock is given back then)
      flip onException (putMVar (sLock s) ()) $ do
        now <- monotonicSeconds
        let first = Encoder (runHeadBytes + size) $ \p -> do
              pokeByteOff p 0 tag
              pokeBE 8 p 1 key
              pokeBE 4 p 9 (fromIntegral k)
              copyBytes (p `plusPtr` runHeadBytes) src size
        placed <- addOne s now Bulk k first B.empty
        writeIORef (sRun s) $! maybe NoRun (OpenRun tag key) placed
      arm <- needsTimer s
      putMVar (sLock s) ()
      when arm (startTimer s)

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

