-- | When a send buffer becomes a packet: Eden's dynamic chunking rules as
-- pure functions.
--
-- A peer's outgoing messages are gathered in one buffer and leave together
-- as a packet. The driver ("Herd.Packet") asks these functions before and
-- after every message it adds, on timer ticks, and when its side has
-- nothing else ready to do, and does exactly what they answer; so the
-- properties proved about 'simulate' (which runs the same functions over a
-- list of events) hold for the real buffers:
--
-- * order per peer is kept, and no message is lost or duplicated;
-- * the buffered bytes never exceed 'policyCapacity' (a message larger than
--   the whole buffer leaves as a packet of its own, after what was buffered);
-- * after any event at time @t@ nothing buffered is older than
--   'policyTimeout', and an urgent message is never left buffered;
-- * with chunking off every packet holds exactly one message.
module Herd.Core.Packet.Policy
  ( -- * Settings
    PacketPolicy (..)
  , defaultPacketPolicy
  , policyEarlyCapacity
  , messageOverhead
  , runHeadBytes
    -- * Decisions
  , Urgency (..)
  , FlushReason (..)
  , allFlushReasons
  , flushReasonName
  , Fill (..)
  , emptyFill
  , AddPlan (..)
  , planAdd
  , joinsQuietly
  , fillAfterAdd
  , appendsToRun
  , fillAfterAppend
  , planTick
  , planIdle
  , deadlineOf
  , roomFor
    -- * A reference run
  , Event (..)
  , simulate
  ) where

import Data.Char (toLower)

-- | How a peer's send buffer is flushed.
data PacketPolicy = PacketPolicy
  { policyChunking :: !Bool    -- ^ gather messages at all; off sends one message per packet
  , policyCapacity :: !Int     -- ^ bytes of messages (with their headers) one packet may hold
  , policyTimeout  :: !Double  -- ^ seconds the oldest buffered message may wait
  } deriving (Eq, Show)

-- | Chunking on, 64 KiB packets, 2 ms timeout: chosen by a sweep of 16,
-- 64 and 256 KiB against 0.5, 2 and 8 ms (@herd bench packets@, warmed
-- up, medians of rounds in changing order). 64 KiB gave the farm its
-- highest rates; 256 KiB echoed large items a little faster; the
-- timeouts differed by less than the machine's noise.
defaultPacketPolicy :: PacketPolicy
defaultPacketPolicy = PacketPolicy True 65536 0.002

-- | The capacity a stream's early sends are measured against
-- ("Herd.Task.StreamFlow"): the packet's, or 0 with chunking off (every
-- message leaves at once then, so there is nothing to send early).
policyEarlyCapacity :: PacketPolicy -> Int
policyEarlyCapacity p = if policyChunking p then policyCapacity p else 0

-- | Bytes a message occupies in a packet besides its body: its length.
messageOverhead :: Int
messageOverhead = 4

-- | Bytes a run message ('Herd.Packet.appendValuesToRun') takes before its
-- values: a tag, an 8-byte key and a 4-byte count of the values,
-- big-endian.
runHeadBytes :: Int
runHeadBytes = 13

-- | How soon a message must leave.
data Urgency
  = Bulk    -- ^ may wait for company (stream elements, tasks, results)
  | Urgent  -- ^ leaves at once with whatever is buffered (control, a last value, credit)
  deriving (Eq, Show)

-- | Why a packet was sent.
data FlushReason
  = FlushUrgent       -- ^ it held an urgent message
  | FlushNextTooBig   -- ^ the next message did not fit
  | FlushFull         -- ^ no further message could fit
  | FlushTimeout      -- ^ the oldest message reached the timeout
  | FlushIdle         -- ^ the sending side had nothing else ready to do
  | FlushOversize     -- ^ one message larger than the buffer, sent alone
  | FlushUnbuffered   -- ^ chunking is off
  deriving (Eq, Ord, Show, Enum, Bounded)

-- | The rule's name in lower case, as the dashboard, its metrics and the
-- eventlog give it: 'FlushTimeout' is @timeout@.
flushReasonName :: FlushReason -> String
flushReasonName r = case drop 5 (show r) of
  c : cs -> toLower c : cs
  [] -> []

-- | Every reason, in a fixed order (for statistics tables).
allFlushReasons :: [FlushReason]
allFlushReasons = [minBound .. maxBound]

-- | What a buffer holds, as far as the rules care.
data Fill = Fill
  { fillBytes :: !Int     -- ^ bytes buffered, headers included
  , fillCount :: !Int     -- ^ messages buffered
  , fillSince :: !Double  -- ^ when the oldest buffered message was added
  } deriving (Eq, Show)

-- | An empty buffer.
emptyFill :: Fill
emptyFill = Fill 0 0 0

-- | What to do when adding one message.
data AddPlan = AddPlan
  { planBefore :: !(Maybe FlushReason)  -- ^ send the buffer first, for this reason
  , planAlone  :: !(Maybe FlushReason)  -- ^ send the message as a packet of its own, not buffered
  , planAfter  :: !(Maybe FlushReason)  -- ^ send the buffer, now holding the message, right after
  } deriving (Eq, Show)

-- | The plan for adding a message whose body has this many bytes, at time
-- @now@.
planAdd :: PacketPolicy -> Double -> Urgency -> Int -> Fill -> AddPlan
planAdd policy now urgency bodyBytes fill = AddPlan before alone after
  where
    size = bodyBytes + messageOverhead
    cap = policyCapacity policy
    nonEmpty = fillCount fill > 0
    before
      | not nonEmpty = Nothing
      | now - fillSince fill >= policyTimeout policy = Just FlushTimeout
      | fillBytes fill + size > cap = Just FlushNextTooBig
      | otherwise = Nothing
    alone
      | size <= cap = Nothing
      | urgency == Urgent = Just FlushUrgent
      | not (policyChunking policy) = Just FlushUnbuffered
      | otherwise = Just FlushOversize
    bytesAfter = maybe (fillBytes fill) (const 0) before + size
    after
      | alone /= Nothing = Nothing
      | not (policyChunking policy) = Just FlushUnbuffered
      | urgency == Urgent = Just FlushUrgent
      | cap - bytesAfter < messageOverhead + 1 = Just FlushFull
      | otherwise = Nothing

{-# INLINE planAdd #-}

-- | Whether a message simply joins a non-empty buffer, nothing sent: the
-- same answer as @planAdd@ giving no flush at all, computed without
-- building a plan (the packet layer's hot path; a property checks the two
-- agree).
joinsQuietly :: PacketPolicy -> Double -> Urgency -> Int -> Fill -> Bool
joinsQuietly policy now urgency bodyBytes fill =
  urgency == Bulk && policyChunking policy && fillCount fill > 0
  && now - fillSince fill < policyTimeout policy
  && fillBytes fill + bodyBytes + messageOverhead <= policyCapacity policy - messageOverhead - 1
{-# INLINE joinsQuietly #-}

-- | The buffer after a message was added by a plan (before 'planAfter' is
-- carried out).
fillAfterAdd :: Double -> Int -> AddPlan -> Fill -> Fill
fillAfterAdd now bodyBytes plan fill
  | planAlone plan /= Nothing = base
  | fillCount base == 0 = Fill (bodyBytes + messageOverhead) 1 now
  | otherwise = base { fillBytes = fillBytes base + bodyBytes + messageOverhead
                     , fillCount = fillCount base + 1 }
  where base = maybe fill (const emptyFill) (planBefore plan)
{-# INLINE fillAfterAdd #-}

-- | Whether a value of this many bytes may be appended to the run message
-- that ends the buffer (a message whose values a receiver counts, like a
-- stream's elements), nothing sent: chunking is on, the buffer is not
-- empty, and it keeps room for one more message after the value, as
-- 'joinsQuietly' asks. The time is not consulted: appending leaves the
-- oldest message as old as it was, and the sender's timer sends a due
-- buffer whatever its last message is. Otherwise the value starts a new
-- run message, added by 'planAdd' like any other.
appendsToRun :: PacketPolicy -> Int -> Fill -> Bool
appendsToRun policy valueBytes fill =
  policyChunking policy && fillCount fill > 0
  && fillBytes fill + valueBytes <= policyCapacity policy - messageOverhead - 1
{-# INLINE appendsToRun #-}

-- | The buffer after a value was appended to its last message: more bytes,
-- no more messages.
fillAfterAppend :: Int -> Fill -> Fill
fillAfterAppend valueBytes fill = fill { fillBytes = fillBytes fill + valueBytes }
{-# INLINE fillAfterAppend #-}

-- | On a timer tick: send the buffer if its oldest message is due.
planTick :: PacketPolicy -> Double -> Fill -> Maybe FlushReason
planTick policy now fill
  | fillCount fill > 0 && now - fillSince fill >= policyTimeout policy = Just FlushTimeout
  | otherwise = Nothing

-- | When the sending side has nothing else ready to do: send what is
-- buffered (this is also what keeps two peers from holding back each
-- other's messages).
planIdle :: Fill -> Maybe FlushReason
planIdle fill
  | fillCount fill > 0 = Just FlushIdle
  | otherwise = Nothing

-- | When the buffer's oldest message becomes due, if anything is buffered.
deadlineOf :: PacketPolicy -> Fill -> Maybe Double
deadlineOf policy fill
  | fillCount fill > 0 = Just (fillSince fill + policyTimeout policy)
  | otherwise = Nothing

-- | How many bytes of body a new message may have and still join the
-- buffer: what a sender of runs of values packs into one message. The
-- space left, when at least an eighth of a packet is; else a whole
-- packet's (the buffer leaves first, full enough). None with chunking
-- off, where every message is a packet of its own (so a run is one value).
roomFor :: PacketPolicy -> Fill -> Int
roomFor policy fill
  | not (policyChunking policy) = 0
  | free >= cap `div` 8 = free
  | otherwise = cap - messageOverhead
  where
    cap = policyCapacity policy
    free = cap - fillBytes fill - messageOverhead

-- | What happens to a send buffer, for 'simulate'.
data Event m
  = Offer !Double !Urgency !Int m  -- ^ at a time, a message with its body size
  | Tick !Double                   -- ^ a timer tick
  | Idle                           -- ^ the sender has nothing else ready
  deriving (Eq, Show)

-- | Run the rules over events, as the driver would: the packets sent (with
-- their reasons), then what is still buffered, each message with the time
-- it was added; and after each event, the buffer's fill.
simulate :: PacketPolicy -> [Event m] -> ([(FlushReason, [m])], [(Double, m)], [Fill])
simulate policy = go emptyFill [] [] []
  where
    go _ buf sent fills [] = (reverse sent, reverse buf, reverse fills)
    go fill buf sent fills (ev : evs) = case ev of
      Offer now urgency size m ->
        let plan = planAdd policy now urgency size fill
            (buf1, sent1) = case planBefore plan of
              Just why -> ([], packet why buf : sent)
              Nothing -> (buf, sent)
            fill1 = fillAfterAdd now size plan fill
            (buf2, sent2) = case planAlone plan of
              Just why -> (buf1, (why, [m]) : sent1)
              Nothing -> ((now, m) : buf1, sent1)
        in case planAfter plan of
             Just why -> go emptyFill [] (packet why buf2 : sent2) (emptyFill : fills) evs
             Nothing -> go fill1 buf2 sent2 (fill1 : fills) evs
      Tick now -> flushIf (planTick policy now fill)
      Idle -> flushIf (planIdle fill)
      where
        flushIf (Just why) = go emptyFill [] (packet why buf : sent) (emptyFill : fills) evs
        flushIf Nothing = go fill buf sent (fill : fills) evs
    packet why buf = (why, map snd (reverse buf))
