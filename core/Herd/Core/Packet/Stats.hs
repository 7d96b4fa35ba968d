-- | What a peer's packets did: counts of packets, messages, values and
-- bytes each way, and the rule that sent each packet. A value is an
-- element of a run message (a task's argument or result, a stream's
-- element); any other message counts as one value, so values per packet
-- is what chunking gathers. Plain data and pure updates;
-- the packet layer ("Herd.Packet") keeps one per sender.
module Herd.Core.Packet.Stats
  ( PeerStats (..)
  , noPeerStats
  , countReceived
  , meanPerPacket
  , addPeerStats
  ) where

import qualified Data.Map.Strict as M
import Herd.Core.Packet.Policy (FlushReason)

-- | Per-peer packet statistics.
data PeerStats = PeerStats
  { packetsSent      :: !Int
  , messagesSent     :: !Int
  , bytesSent        :: !Int
  , maxSentPerPacket :: !Int
  , valuesSent       :: !Int
  , maxValuesSentPerPacket :: !Int
  , flushesBy        :: !(M.Map FlushReason Int)  -- ^ packets sent, by the rule that sent them
  , packetsReceived  :: !Int
  , messagesReceived :: !Int
  , bytesReceived    :: !Int
  , maxReceivedPerPacket :: !Int
  , valuesReceived   :: !Int
  , maxValuesReceivedPerPacket :: !Int
  } deriving (Eq, Show)

-- | No traffic yet.
noPeerStats :: PeerStats
noPeerStats = PeerStats 0 0 0 0 0 0 M.empty 0 0 0 0 0 0

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
  , valuesSent = valuesSent a + valuesSent b
  , maxValuesSentPerPacket = max (maxValuesSentPerPacket a) (maxValuesSentPerPacket b)
  , flushesBy = M.unionWith (+) (flushesBy a) (flushesBy b)
  , packetsReceived = packetsReceived a + packetsReceived b
  , messagesReceived = messagesReceived a + messagesReceived b
  , bytesReceived = bytesReceived a + bytesReceived b
  , maxReceivedPerPacket = max (maxReceivedPerPacket a) (maxReceivedPerPacket b)
  , valuesReceived = valuesReceived a + valuesReceived b
  , maxValuesReceivedPerPacket = max (maxValuesReceivedPerPacket a) (maxValuesReceivedPerPacket b)
  }

-- | Count a received packet of this many messages, values and bytes.
countReceived :: Int -> Int -> Int -> PeerStats -> PeerStats
countReceived msgs values bytes s = s
  { packetsReceived = packetsReceived s + 1
  , messagesReceived = messagesReceived s + msgs
  , bytesReceived = bytesReceived s + bytes
  , maxReceivedPerPacket = max (maxReceivedPerPacket s) msgs
  , valuesReceived = valuesReceived s + values
  , maxValuesReceivedPerPacket = max (maxValuesReceivedPerPacket s) values
  }
