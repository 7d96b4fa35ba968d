-- | Adding a message to a peer's send buffer ("Herd.Packet.Buffer") as
-- "Herd.Core.Packet.Policy" plans it: into the buffer, flushing before or
-- after as the plan says; alone, in a frame of its own, when it is larger
-- than a packet; and an urgent one sent at once on a path of its own when
-- the buffer is empty. Every function here runs with the buffer's lock
-- held, except 'sendUrgent', which takes it.
--
-- Promises: a message is written whole before the fill counts it, so an
-- encoder that throws leaves the buffer as it was; a buffer never holds
-- more than 'policyCapacity' bytes of messages.
module Herd.Packet.Add
  ( addOne
  , addMessage
  , sendUrgent
  , tailKeptBytes
  ) where

import Control.Concurrent.MVar
import Control.Exception (mask, onException)
import qualified Data.ByteString as B
import qualified Data.ByteString.Internal as BI
import Data.IORef
import Foreign.ForeignPtr (mallocForeignPtrBytes, withForeignPtr)
import Foreign.Ptr (plusPtr)
import Herd.Wire.Writer (Encoder (..), encodeWithTail)
import Herd.Packet.Buffer
import Herd.Core.Packet.Policy

-- | Add one message carrying this many values, with the lock held: the
-- encoder's bytes, then the tail's (a value at the message's end, often
-- empty); where its length is in the buffer if it stays buffered
-- ('Nothing': it left in a packet at once). A message that leaves alone
-- with a tail of 'tailKeptBytes' or more is sent with the tail as a part
-- of its own, not copied.
addOne :: Sender -> Double -> Urgency -> Int -> Encoder -> B.ByteString -> IO (Maybe Int)
addOne s now urgency k enc0 tl = do
  let enc@(Encoder size _) = encodeWithTail enc0 tl
  fill <- readIORef (sFill s)
  if joinsQuietly (sPolicy s) now urgency size fill
    then do
      -- the common case, decided without building a plan
      let at = headerBytes + fillBytes fill
      writeMessageAt s at enc
      writeIORef (sFill s) $! fill { fillBytes = fillBytes fill + size + messageOverhead
                                   , fillCount = fillCount fill + 1 }
      bumpValues s k
      pure (Just at)
    else addPlanned s now urgency k enc0 tl enc fill

-- | 'addOne' for a message that values cannot join: the next value starts
-- a run of its own.
addMessage :: Sender -> Double -> Urgency -> Int -> Encoder -> B.ByteString -> IO ()
addMessage s now urgency k enc tl = addOne s now urgency k enc tl >> writeIORef (sRun s) NoRun

addPlanned :: Sender -> Double -> Urgency -> Int -> Encoder -> B.ByteString -> Encoder -> Fill -> IO (Maybe Int)
addPlanned s now urgency k headEnc tl enc@(Encoder size _) fill = do
  let plan = planAdd (sPolicy s) now urgency size fill
  mapM_ (flush s) (planBefore plan)
  case planAlone plan of
    Just why
      | B.length tl >= tailKeptBytes -> Nothing <$ sendAlone s why k headEnc tl
      | otherwise -> Nothing <$ sendAlone s why k enc B.empty
    Nothing -> do
      base <- readIORef (sFill s)
      let at = headerBytes + fillBytes base
      writeMessageAt s at enc   -- may throw: the fill is not advanced then
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
sendUrgent s enc@(Encoder size _) = mask $ \restore -> do
  takeMVar (sLock s)
  fill <- readIORef (sFill s)
  if fillCount fill == 0 && size + messageOverhead <= policyCapacity (sPolicy s)
    then do
      restore (do
        writeMessageAt s headerBytes enc   -- may throw: nothing is buffered then
        writeIORef (sFill s) $! Fill (size + messageOverhead) 1 0
        bumpValues s 1
        flush s (if policyChunking (sPolicy s) then FlushUrgent else FlushUnbuffered))
        `onException` putMVar (sLock s) ()
      putMVar (sLock s) ()
    else lockedWithTimer s restore (\now -> addMessage s now Urgent 1 enc B.empty)

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
-- packet is copied as before. (Chosen, not swept.)
tailKeptBytes :: Int
tailKeptBytes = 64 * 1024

-- The largest frame a sender keeps a buffer for (larger ones are
-- allocated each time, so one huge message pins no memory for good).
largeKept :: Int
largeKept = 16 * 1024 * 1024
