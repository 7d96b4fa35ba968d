-- | A host agent's part in keyed reductions ("Herd.Core.Exchange"): a
-- part one of its workers sends to another worker of the same host goes
-- straight to that worker, never up the host link. Parts for workers on
-- other hosts, and every other message, go on to the master unchanged
-- (INV-RELAY).
--
-- Promise: a worker's packet without a part for this host is relayed as
-- it came, untouched; one with such parts loses exactly those messages,
-- the rest keeping their order.
module Herd.Node.Agent.Exchange
  ( splitLocalParts
  , anyTagged
  ) where

import qualified Data.ByteString as B
import qualified Data.ByteString.Unsafe as BU
import Data.Word (Word64, Word8)
import Herd.Core.Bytes (word32At)
import Herd.Core.Packet.Split (splitPacket)
import Herd.Core.Wire (FromWorker (..), ToWorker (..), decodeFromWorker)
import Herd.Core.Wire.Tags (tagForward)
import Herd.Wire.HostEntry (workerPacket)

-- | A worker's packet (at most this many messages), with the workers of
-- this host: 'Nothing' when none of its messages is a part for one of
-- them; else each such part as the message for its worker, and the
-- packet of the other messages, if any are left.
splitLocalParts :: Int -> (Word64 -> Bool) -> B.ByteString -> Maybe ([(Word64, ToWorker)], Maybe B.ByteString)
splitLocalParts maxMessages local packet
  | not (anyTagged (== tagForward) packet) = Nothing   -- the relay's usual case: nothing split, nothing allocated
  | otherwise = case splitPacket maxMessages packet of
      Left _ -> Nothing   -- the master judges a bad packet, as it would without the agent
      Right msgs
        | null parts -> Nothing
        | otherwise -> Just (parts, if null rest then Nothing else Just (workerPacket rest))
        where
          classified = map classify msgs
          parts = [ p | Left p <- classified ]
          rest = [ m | Right m <- classified ]
  where
    classify m
      | not (B.null m), BU.unsafeHead m == tagForward
      , Right (Forward dest xid g j part) <- decodeFromWorker m, local dest = Left (dest, PartIn xid g j part)
      | otherwise = Right m

-- | Whether any message of a packet (a count, then each message's length
-- and bytes) starts with a tag that passes: a walk of the lengths,
-- stopping at the first such message or at anything short.
anyTagged :: (Word8 -> Bool) -> B.ByteString -> Bool
anyTagged wanted packet = B.length packet >= 4 && go (word32At packet 0) 4
  where
    total = B.length packet
    go :: Int -> Int -> Bool
    go 0 _ = False
    go n at
      | at + 4 > total = False
      | otherwise =
          let len = fromIntegral (word32At packet at)
              body = at + 4
          in if len < 0 || body + len > total then False
             else (len > 0 && wanted (BU.unsafeIndex packet body)) || go (n - 1) (body + len)
