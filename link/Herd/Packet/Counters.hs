-- | What a sender sent, as unboxed counters: packets, messages, bytes and
-- values, the largest packets, and the rule that sent each packet. The
-- packet layer ("Herd.Packet.Buffer") counts every packet here; counting
-- one allocates nothing, and 'countersStats' reads them as 'PeerStats'.
module Herd.Packet.Counters
  ( Counters
  , newCounters
  , countPacket
  , countersStats
  , newCounter
  ) where

import qualified Data.Map.Strict as M
import Data.Primitive.PrimArray (MutablePrimArray, newPrimArray, readPrimArray, writePrimArray)
import GHC.Exts (RealWorld)
import Herd.Core.Packet.Policy (FlushReason, allFlushReasons, flushReasonName)
import Herd.Core.Packet.Stats
import Herd.Sys.Trace (traceHerd)

-- | A sender's counters: six totals, then one count per flush reason.
newtype Counters = Counters (MutablePrimArray RealWorld Int)

-- | Counters at zero.
newCounters :: IO Counters
newCounters = Counters <$> newCounter (6 + length allFlushReasons)

-- | Count one packet: the rule that sent it, its messages, values and
-- bytes.
countPacket :: Counters -> FlushReason -> Int -> Int -> Int -> IO ()
countPacket (Counters st) why msgs values bytes = do
  let add, top :: Int -> Int -> IO ()
      add i k = readPrimArray st i >>= writePrimArray st i . (+ k)
      top i k = readPrimArray st i >>= writePrimArray st i . max k
  add 0 1 >> add 1 msgs >> add 2 bytes >> top 3 msgs >> add 4 values >> top 5 values
  add (reasonSlot why) 1
  traceHerd ("herd packet out: " ++ flushReasonName why ++ ", " ++ show msgs ++ " messages, "
             ++ show values ++ " values, " ++ show bytes ++ " bytes")

-- | What was counted so far (the received fields stay zero).
countersStats :: Counters -> IO PeerStats
countersStats (Counters st) = do
  let at = readPrimArray st
  [packets, msgs, bytes, maxMsgs, values, maxValues] <- mapM at [0 .. 5]
  byReason <- mapM (\r -> (,) r <$> at (reasonSlot r)) allFlushReasons
  pure noPeerStats
    { packetsSent = packets, messagesSent = msgs, bytesSent = bytes, maxSentPerPacket = maxMsgs
    , valuesSent = values, maxValuesSentPerPacket = maxValues
    , flushesBy = M.fromList [ (r, n) | (r, n) <- byReason, n > 0 ] }

-- Where a flush reason's count is, after the six totals.
reasonSlot :: FlushReason -> Int
reasonSlot r = 6 + fromEnum r

-- | This many unboxed counters at zero.
newCounter :: Int -> IO (MutablePrimArray RealWorld Int)
newCounter n = do
  c <- newPrimArray n
  mapM_ (\i -> writePrimArray c i 0) [0 .. n - 1]
  pure c
