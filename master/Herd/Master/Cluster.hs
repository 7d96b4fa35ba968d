-- | A cluster as its callers hold it: the record of a running master and
-- the questions one can ask it (its address, its workers, its counters,
-- its packet statistics). Starting one and running work on it is
-- "Herd.Master".
module Herd.Master.Cluster
  ( Cluster (..)
  , clusterAddress
  , clusterJoinCommand
  , clusterCounters
  , clusterWorkerCount
  , clusterWorkerInfo
  , waitForWorkers
  , clusterConfig
  , clusterMasterLoop
  , clusterRegistry
  , clusterRefRegistry
  , heldValues
  , clusterPacketStats
  , clusterStatus
  , clusterLinks
  , clusterDashboard
  , ensureOpen
  , freshId
  , freshHandle
  , clusterTag
  , handleTag
  , newClusterTag
  , describeTag
  , awaitSomeWorker
  , linkedWorkers
  ) where

import Control.Concurrent.MVar (MVar, tryReadMVar)
import Control.Concurrent.STM
import Control.Exception (throwIO)
import Control.Monad (forM, unless, when)
import Data.IORef
import qualified Data.Map.Strict as M
import qualified Data.Set as S
import Data.Word (Word64)
import Herd.Settings
import Herd.Sys.Epoll (epollAvailable)
import Herd.Core.Error (HerdError (..))
import Herd.Core.Evolve.Schedule (Registry (..))
import Herd.Core.Evolve.Registry (Placed (..))
import qualified Herd.Core.Evolve.StateMap as SM
import Herd.Sys.Clock (monotonicSeconds)
import Control.Concurrent (threadDelay)
import Herd.Master.Shell (Shell, shellAwaited, shellCore, shellCounters, shellDeparted, shellHostView, shellLinkCount, shellMemory, shellPeers, shellRelayCounts, shellWorkers)
import Data.Bits (bit, shiftL, shiftR, (.&.), (.|.))
import qualified Data.ByteString as B
import Crypto.Random (getRandomBytes)
import Numeric (showHex)
import Herd.Master.Monitor.Feed (Feed, feedStarted, recentLines)
import Herd.Core.Monitor.Status (HostRow (..), Inputs (..), Status, buildStatus)
import Herd.Master.Types
import Herd.Core.Adapt.Track (AdaptSummary)
import Herd.Core.Dataset.Book (Book)
import Herd.Packet (PeerStats (..), senderStats)
import Herd.Core.Farm (WorkerId)
import System.Environment (getExecutablePath, getProgName)
import System.Timeout (timeout)

-- | A running set of workers and the master that drives them.
data Cluster = Cluster
  { clConfig    :: !Config
  , clShell     :: !Shell
  , clPort      :: !Int
  , clTag       :: !Word64             -- ^ this cluster's mark on its handles ('clusterTag')
  , clNextId    :: !(IORef Word64)     -- ^ numbers of jobs and streams
  , clClosed    :: !(TVar Bool)
  , clAdvertise :: !String
  , clRegistry  :: !(MVar Registry)    -- ^ the evolve API's population ("Herd.Master.Job.Evolve")
  , clRefRegistry :: !(MVar Registry)  -- ^ the Refs' population ("Herd.Master.Job.Refs"), apart, so their calls run beside evolve calls
  , clFeed      :: !Feed               -- ^ recent log lines, and when the cluster started
  , clDashboard :: !(IORef (Maybe (String, Int)))  -- ^ where its dashboard listens, if it has one
  , clAdapt     :: !(IORef (Maybe AdaptSummary))   -- ^ the adaptive SLURM jobs, while the driver runs
  , clDatasets  :: !(MVar Book)        -- ^ the datasets ("Herd.Master.Job.Dataset"): their calls take turns
  , clDatasetDir :: !FilePath          -- ^ where the caller's partitions are kept on disk (made when first needed)
  }

-- | The address workers connect to: host and port.
clusterAddress :: Cluster -> (String, Int)
clusterAddress c = (clAdvertise c, clPort c)

-- | The shell command that adds a worker to this cluster from another
-- machine (which needs the same secret: the same @~/.herd/cookie@, or
-- @HERD_SECRET@).
clusterJoinCommand :: Cluster -> IO String
clusterJoinCommand c = joinCommand (clAdvertise c ++ ":" ++ show (clPort c))

joinCommand :: String -> IO String
joinCommand addr = do
  prog <- getProgName
  exe <- getExecutablePath
  pure $ if prog == "herd" then "herd worker --connect " ++ addr
         else "HERD_WORKER=" ++ addr ++ " " ++ exe

-- | Connection counters, for monitoring and tests.
clusterCounters :: Cluster -> IO ConnectionCounters
clusterCounters c = readIORef (shellCounters (clShell c))

-- | How many workers are connected now.
clusterWorkerCount :: Cluster -> IO Int
clusterWorkerCount c = M.size <$> readTVarIO (shellWorkers (clShell c))

-- | The connected workers.
clusterWorkerInfo :: Cluster -> IO [WorkerInfo]
clusterWorkerInfo c = M.elems <$> readTVarIO (shellWorkers (clShell c))

-- | Wait until at least this many workers are connected, or the timeout
-- (seconds) passes; returns whether they did.
waitForWorkers :: Cluster -> Int -> Double -> IO Bool
waitForWorkers c n secs = do
  r <- timeout (round (secs * 1e6)) $ atomically $ do
    ws <- readTVar (shellWorkers (clShell c))
    unless (M.size ws >= n) retry
  pure (r == Just ())

-- | The cluster's configuration (after validation).
clusterConfig :: Cluster -> Config
clusterConfig = clConfig

-- | The loop that drives this cluster: its 'configMasterLoop', or the
-- threaded loop where epoll is not available.
clusterMasterLoop :: Cluster -> MasterLoop
clusterMasterLoop c = case configMasterLoop (clConfig c) of
  EpollLoop | epollAvailable -> EpollLoop
  _ -> ThreadedLoop

-- | The evolve API's population on this cluster.
clusterRegistry :: Cluster -> MVar Registry
clusterRegistry = clRegistry

-- | The population of the cluster's Refs ("Herd.Master.Job.Refs"): apart
-- from the evolve API's, so that a Ref call and an evolve call run at the
-- same time, and a 'Herd.Master.Job.Evolve.resetStates' keeps every Ref.
clusterRefRegistry :: Cluster -> MVar Registry
clusterRefRegistry = clRefRegistry

-- | How many values (evolve states and Refs) each worker holds, from the
-- registries not taken by a call right now (a call's own are left out
-- rather than waited for; states placed on hosts are not counted).
heldValues :: Cluster -> IO (M.Map WorkerId Int)
heldValues c = do
  regs <- mapM tryReadMVar [clRegistry c, clRefRegistry c]
  pure $ M.fromListWith (+)
    [ (placedOn p, 1) | Just r <- regs, not (regHosted r), p <- SM.elems (regStates r) ]

-- | Packet statistics of each connected worker's link, both directions,
-- since it joined.
clusterPacketStats :: Cluster -> IO [(WorkerId, PeerStats)]
clusterPacketStats c = do
  peers <- M.toList <$> readTVarIO (shellPeers (clShell c))
  forM peers $ \(wid, (sender, received)) -> do
    sent <- senderStats sender
    got <- readIORef received
    pure (wid, sent { packetsReceived = packetsReceived got, messagesReceived = messagesReceived got
                    , bytesReceived = bytesReceived got, maxReceivedPerPacket = maxReceivedPerPacket got
                    , valuesReceived = valuesReceived got
                    , maxValuesReceivedPerPacket = maxValuesReceivedPerPacket got })

-- | A snapshot of the cluster for watching it (the dashboard, @/metrics@):
-- workers, jobs, links, the evolve call and recent log lines.
clusterStatus :: Cluster -> IO Status
clusterStatus c = do
  let sh = clShell c
  core <- shellCore sh
  now <- monotonicSeconds
  (connected, departed) <- atomically ((,) <$> readTVar (shellWorkers sh) <*> readTVar (shellDeparted sh))
  links <- M.fromList <$> clusterPacketStats c
  counters <- readIORef (shellCounters sh)
  logLines <- recentLines (clFeed c)
  (limit, memory) <- shellMemory sh
  open <- clusterLinks c
  (shareSends, relayed, handed) <- shellRelayCounts sh
  hosts <- shellHostView sh
  adapt <- readIORef (clAdapt c)
  pure $ buildStatus Inputs
    { inNow = now, inStarted = feedStarted (clFeed c), inLoop = masterLoopName (clusterMasterLoop c)
    , inCore = core, inConnected = connected, inDeparted = departed, inLinks = links
    , inCounters = counters, inLog = logLines, inMemory = memory, inMemoryLimit = limit
    , inLinksOpen = open, inShareSends = shareSends, inRelayed = relayed, inHanded = handed
    , inHosts = [ HostRow name n lim | (name, n, lim) <- hosts ], inAdapt = adapt }

-- | How many links the master keeps open: one per host agent, and one
-- per worker linked directly.
clusterLinks :: Cluster -> IO Int
clusterLinks = shellLinkCount . clShell

-- | Where the cluster's dashboard listens (host and the port bound, which
-- 'configDashboard' may leave to the system with port 0), if it has one.
clusterDashboard :: Cluster -> IO (Maybe (String, Int))
clusterDashboard = readIORef . clDashboard

-- | When no worker is connected but some are being restarted, wait (at
-- most 'configStartTimeout') until one joins or none is awaited any more:
-- a stream or an evolve call then starts on the replacement instead of
-- failing with 'NoWorkers'.
awaitSomeWorker :: Cluster -> IO ()
awaitSomeWorker c = do
  deadline <- (+ configStartTimeout (clConfig c)) <$> monotonicSeconds
  let loop = do
        have <- clusterWorkerCount c
        awaited <- shellAwaited (clShell c)
        t <- monotonicSeconds
        when (have == 0 && awaited > 0 && t < deadline) (threadDelay 10000 >> loop)
  loop

-- | The workers linked now, once one is (lost workers being restarted
-- are waited for), or 'NoWorkers' if none is or is coming.
linkedWorkers :: Cluster -> IO (S.Set WorkerId)
linkedWorkers c = do
  awaitSomeWorker c
  live <- M.keysSet <$> readTVarIO (shellWorkers (clShell c))
  if S.null live then throwIO NoWorkers else pure live

-- | Throw 'ClusterClosed' once the cluster has stopped.
ensureOpen :: Cluster -> IO ()
ensureOpen cluster = do
  closed <- readTVarIO (clClosed cluster)
  when closed $ throwIO ClusterClosed

-- | A number for a handle the caller keeps (a shared value's): a fresh
-- number with the cluster's tag in its high 24 bits, so that no two
-- clusters' handles share a number, and a handle of another cluster is
-- told apart ('handleTag').
freshHandle :: Cluster -> IO Word64
freshHandle cluster = (\n -> clTag cluster `shiftL` tagShift .|. (n .&. (bit tagShift - 1))) <$> freshId cluster

-- | The cluster whose 'freshHandle' made this number.
handleTag :: Word64 -> Word64
handleTag n = n `shiftR` tagShift

-- Bits of a handle below its cluster's tag.
tagShift :: Int
tagShift = 40

-- | The mark this cluster puts on its handles ('Herd.Master.Job.Refs',
-- 'Herd.Master.Job.Shared', evolve's state ids), drawn at random when it
-- starts: a handle with another mark is refused ('ForeignHandle').
clusterTag :: Cluster -> Word64
clusterTag = clTag

-- | A fresh cluster tag: random, not 0, below 2^24.
newClusterTag :: IO Word64
newClusterTag = do
  bytes <- getRandomBytes 3 :: IO B.ByteString
  pure (1 + B.foldl' (\a b -> a * 256 + fromIntegral b) 0 bytes `mod` 0xffffff)

-- | A cluster's tag as the errors print it.
describeTag :: Word64 -> String
describeTag t = "cluster " ++ showHex t ""

-- | A fresh number for a job or a stream, once the cluster is known open.
freshId :: Cluster -> IO Word64
freshId cluster = do
  ensureOpen cluster
  atomicModifyIORef' (clNextId cluster) (\n -> (n + 1, n))
