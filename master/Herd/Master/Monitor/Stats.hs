-- | Statistics of a farm run, as values and as a table.
--
-- Per worker: tasks done, batches, busy time (measured by the worker around
-- its computation) and waiting time (the rest of the time it was present
-- during the job: waiting for work or for the network). Waiting time is
-- the figure that showed FP Complete where their master stalled.
module Herd.Master.Monitor.Stats
  ( JobStats (..)
  , WorkerStats (..)
  , renderStats
  , renderPacketStats
  , totalBusy
  ) where

import qualified Data.Map.Strict as M
import Herd.Packet (PeerStats (..))
import Herd.Core.Packet.Policy (allFlushReasons)
import Herd.Core.Report (fixed, renderTable)
import Herd.Core.Farm (JobStats (..), WorkerStats (..))

-- | Busy seconds summed over workers.
totalBusy :: JobStats -> Double
totalBusy = sum . map statBusy . jobWorkerStats

-- | A table of per-worker statistics, with a header line.
renderStats :: JobStats -> String
renderStats s =
  "tasks " ++ show (jobTaskCount s) ++ " in " ++ fixed 3 (jobElapsed s) ++ " s\n" ++
  renderTable ["worker", "tasks", "batches", "busy s", "waiting s", "busy %", "note"]
    [ [ show (statWorker w), show (statTasks w), show (statBatches w), fixed 3 (statBusy w)
      , fixed 3 (statWaiting w)
      , fixed 1 (100 * statBusy w / max 1e-9 (statBusy w + statWaiting w))
      , if statLost w then "lost" else "" ]
    | w <- jobWorkerStats s ]

-- | A table of per-link packet statistics (from
-- 'Herd.Master.clusterPacketStats'): packets, messages and values each
-- way, values per packet (mean and largest), bytes, and how many packets
-- each flush rule sent from the master.
renderPacketStats :: [(Int, PeerStats)] -> String
renderPacketStats links =
  renderTable ["worker", "pkts out", "msgs out", "values out", "values/pkt", "max", "bytes out"
              , "pkts in", "msgs in", "values in", "values/pkt", "max", "bytes in"]
    [ [ show w, show (packetsSent p), show (messagesSent p), show (valuesSent p)
      , fixed 1 (per (valuesSent p) (packetsSent p)), show (maxValuesSentPerPacket p), show (bytesSent p)
      , show (packetsReceived p), show (messagesReceived p), show (valuesReceived p)
      , fixed 1 (per (valuesReceived p) (packetsReceived p)), show (maxValuesReceivedPerPacket p)
      , show (bytesReceived p) ]
    | (w, p) <- links ]
  ++ "packets sent by rule: "
  ++ unwords [ drop 5 (show r) ++ "=" ++ show n
             | r <- allFlushReasons, let n = sum [ M.findWithDefault 0 r (flushesBy p) | (_, p) <- links ], n > 0 ]
  ++ "\n"
  where per a b = if b == 0 then 0 else fromIntegral a / fromIntegral b :: Double
