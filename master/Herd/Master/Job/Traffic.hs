-- | What a piece of work cost the cluster in time and bytes: through the
-- master's links, relayed by the master from worker to worker, and
-- handed from worker to worker on the master's host without passing
-- through it ('Herd.Core.Wire.PartInFile'). Read from the cluster's
-- counters before and after, so it counts whatever else runs meanwhile
-- too, and a worker lost meanwhile takes its link's counts with it.
module Herd.Master.Job.Traffic
  ( Traffic (..)
  , withTraffic
  ) where

import Herd.Core.Monitor.Status (Status (..), WorkerRow (..))
import Herd.Core.Packet.Stats (PeerStats (..))
import Herd.Master.Cluster (Cluster, clusterStatus)
import Herd.Sys.Clock (monotonicSeconds)

-- | The cost of one action.
data Traffic = Traffic
  { trafficSeconds       :: !Double   -- ^ its wall-clock time
  , trafficMasterBytes   :: !Int      -- ^ bytes on the master's links, both ways (relayed parts included)
  , trafficRelayedParts  :: !Int      -- ^ parts the master relayed from worker to worker
  , trafficRelayedBytes  :: !Int      -- ^ their bytes
  , trafficHandedParts   :: !Int      -- ^ parts workers on the master's host handed each other in files
  , trafficHandedBytes   :: !Int      -- ^ their bytes (never through the master)
  } deriving (Eq, Show)

-- | Run the action and say what it cost.
withTraffic :: Cluster -> IO a -> IO (a, Traffic)
withTraffic cluster act = do
  before <- clusterStatus cluster
  t0 <- monotonicSeconds
  x <- act
  t1 <- monotonicSeconds
  after <- clusterStatus cluster
  let diff f = f after - f before
  pure (x, Traffic (t1 - t0) (diff linkBytes) (diff statusRelayedParts) (diff statusRelayedBytes)
                   (diff statusHandedParts) (diff statusHandedBytes))
  where linkBytes s = sum [ bytesSent p + bytesReceived p | r <- statusWorkers s, Just p <- [rowLink r] ]
