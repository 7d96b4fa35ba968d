{-# LANGUAGE ScopedTypeVariables #-}
-- | The master: a cluster of workers, and the calls that run work on it.
--
-- One pure core ("Herd.Core.Master") makes every decision for farm jobs,
-- stream processes and evolve sessions; a shell ("Herd.Master.Shell")
-- steps it under one lock and carries out its commands; a reader feeds it
-- the workers' frames, either one thread over epoll or a thread per worker
-- over GHC's IO manager ('configMasterLoop'), for every API alike. Jobs
-- from several threads run at once and share the workers in turn.
--
-- New connections must prove the shared secret and pass the handshake
-- ("Herd.Master.Accept") before anything they send reaches the core. A link
-- silent for 'configLivenessTimeout' (judged by the kernel's keepalive
-- probes, which a busy worker's kernel still answers), closed, or sending
-- bytes that do not decode counts as lost; its unfinished tasks run
-- elsewhere.
module Herd.Master
  ( -- * Clusters
    Cluster
  , withCluster
  , clusterAddress
  , clusterJoinCommand
  , clusterWorkerCount
  , waitForWorkers
  , WorkerInfo (..)
  , clusterWorkerInfo
  , ConnectionCounters (..)
  , clusterCounters
  , clusterConfig
  , clusterMasterLoop
  , clusterPacketStats
    -- * Watching a cluster
  , clusterStatus
  , clusterDashboard
  , Status
    -- * Farm jobs (used by "Herd.Master.Job.Farm")
  , JobSpec (..)
  , JobCallbacks (..)
  , runJob
    -- * Stream processes (used by "Herd.Master.Job.Stream")
  , StreamEnds (..)
  , StreamEvent (..)
  , StreamInput
  , streamId
  , openStream
  , feedStream
  , endStreamInput
  , consumedStream
  , flushStream
  , streamEarlyCapacity
  , closeStream
    -- * Evolve sessions (used by "Herd.Master.Job.Evolve")
  , runSession
  , clusterRegistry
  , clusterRefRegistry
    -- * Keyed reductions (used by "Herd.Master.Job.Reduce")
  , runExchange
    -- * Raw links (for the latency benchmark)
  , withRawWorker
  ) where

import Control.Concurrent
import Control.Concurrent.Async
import Control.Concurrent.STM
import Control.Exception
import Control.Monad
import Data.IORef
import qualified Data.Map.Strict as M
import Herd.Transport.Auth
import Herd.Sys.BuildId (buildIdentity)
import Herd.Settings
import Herd.Core.Error
import Herd.Core.Evolve.Schedule (Registry (..), emptyRegistry)
import Herd.Core.Evolve.Registry (refIdBase)
import Herd.Core.Dataset.Book (emptyBook)
import Herd.Node.Local (planCpus)
import Herd.Master.Launch.Process (Launch (..))
import Herd.Master.Launch.Slurm (slurmTaskCount)
import Herd.Master.Accept
import Herd.Core.Master.Events (Event (..), FarmJob (..))
import Herd.Master.Calls (runExchange, runSession)
import qualified Data.ByteString as B
import Herd.Sys.Epoll (epollAvailable)
import Herd.Reader.Epoll
import Herd.Sys.HeapReserve (heapReserveBytes, reserveHeap)
import Herd.Master.Launching
import Herd.Master.Launch.Adapt (AdaptContext (..), withAdaptive)
import Herd.Master.Restarts (withRestarts)
import Herd.Reader
import Herd.Master.Shell
import Herd.Master.HostLink (joinHost)
import Herd.Master.MemoryWatch (withMemoryWatch)
import Herd.Master.Streams
import Herd.Reader.Threaded
import Herd.Master.Cluster
import Herd.Master.Types
import Herd.Master.Monitor.Feed (Feed, newFeed, teeLog)
import Herd.Master.Monitor.Server (withDashboard)
import Herd.Core.Monitor.Status (Status)
import Herd.Core.Farm (JobStats, Range (..))
import Herd.Task (TaskRef (..), tryUser)
import Herd.Transport
import Herd.Transport.Tcp
import Herd.Transport.Tls (newTlsIdentity, tlsAccept)
import Herd.Transport.Unix (listenUnix, acceptUnix)
import Herd.Node (serveIfWorker)
import Network.Socket (Socket, close)
import GHC.IO.Exception (IOException (ioe_description))
import Data.Word (Word64)
import Numeric (showHex)
import System.Directory (doesDirectoryExist, getTemporaryDirectory, listDirectory, removeDirectoryRecursive)
import Data.Char (isDigit)
import Data.List (stripPrefix)
import Herd.Sys.Scratch (handOverBases)
import System.FilePath ((</>))
import System.Posix.Process (getProcessID)
import System.Environment (getEnvironment)
import System.Posix.Unistd (getSystemID, nodeName)
import System.Timeout (timeout)

-- | Start a cluster, run the body with it, and stop it, leaving no worker
-- process behind.
--
-- In a process started by herd as a worker this never runs the body: it
-- serves the master and exits. Otherwise it validates the configuration
-- and loads the secret (throwing 'ConfigError'), listens, starts the
-- workers the configuration asks for (local ones, one agent per ssh host,
-- one @srun@) and waits until each launch has connected all its workers or
-- failed, within 'configStartTimeout'. A failed launch throws
-- 'LaunchError' naming it, after stopping everything started, unless
-- 'configAllowPartialStart' is set and some worker did connect. Workers
-- may also join by hand at any time ('clusterJoinCommand').
--
-- The body runs in an unbound thread ('runInUnboundThread'), even when
-- called from @main@: the caller and herd's threads hand work to each
-- other (a stream's output, a job's answer) many times a second, and with
-- a bound caller every hand-off is a switch of OS threads, which made a
-- stream's echo markedly slower from a bound @main@. A body that needs its
-- OS thread (a GUI library, say) can
-- wrap that part in 'Control.Concurrent.runInBoundThread'.
withCluster :: Config -> (Cluster -> IO r) -> IO r
withCluster config body = runInUnboundThread $
  withMaster config Nothing $ \cluster -> body cluster `finally` shutdown cluster

-- The master's listening socket, or a 'ConfigError' naming the address
-- and why it cannot be had (in use, not this host's, not allowed).
listenFor :: Config -> IO Socket
listenFor cfg = do
  let host = listenHostFor cfg
      port = configListenPort cfg
  r <- try (listenTcp host port)
  case r of
    Right s -> pure s
    Left (e :: IOException) ->
      throwIO (ConfigError "configListenHost" ("cannot listen on " ++ host ++ ":" ++ show port
                                               ++ " (--listen): " ++ ioe_description e))

-- The master with its listeners, reader and launches. With a raw queue,
-- joined links go there instead of to the core.
withMaster :: Config -> Maybe (TQueue Connection) -> (Cluster -> IO r) -> IO r
withMaster config raw body = do
  serveIfWorker
  checked <- either throwIO pure (validateConfig config)
  feed <- newFeed
  -- every log line also goes to the dashboard's feed
  let cfg = checked { configLog = teeLog feed (configLog checked) }
  secret <- loadSecret (configSecret cfg) >>= either (throwIO . ConfigError "configSecret") pure
  plan <- planCpus cfg
  slurmTasks <- if not (configSlurm cfg) then pure Nothing else
    either (throwIO . LaunchError) (pure . Just) . slurmTaskCount =<< getEnvironment
  shell <- newShell cfg
  bracket (listenFor cfg) close $ \lsock ->
   bracket (makeReader cfg shell) snd $ \(reader, _) -> do
    setReader shell reader
    cluster <- newCluster cfg shell feed lsock
    acceptor <- newAcceptor cfg secret shell raw
    -- TLS on TCP links: a fresh key and certificate for this master
    tcpUpgrade <- if configTls cfg then tlsAccept <$> newTlsIdentity else pure plainLink
    let localSocket = not (null plan) && localTransport cfg /= TcpTransport
    withDashboardFor cluster $
     withLocalListener localSocket (clPort cluster) $ \local ->
     withAsync (readerRun reader) $ \reading ->
     -- stragglers are looked for ten times a second (a step with no farm
     -- job running does nothing)
     withAsync (forever (threadDelay 100000 >> shellStep shell True [Tick])) $ \_ ->
      withAsync (acceptLoop acceptor tcpUpgrade (acceptTcp lsock)) $ \_ ->
      withAsync (mapM_ (\(usock, _) -> acceptLoop acceptor plainLink (acceptUnix usock)) local) $ \_ -> do
        link reading
        launchAndRun cfg secret cluster plan slurmTasks (snd <$> local) body
  where
    -- the abstract socket local workers connect to, named after the TCP
    -- port so that two clusters of one process differ
    withLocalListener False _ act = act Nothing
    withLocalListener True port act =
      bracket (listenUnix port) (close . fst) (act . Just)

-- The reader the configuration asks for, and how to release it.
makeReader :: Config -> Shell -> IO (Reader, IO ())
makeReader cfg shell = case configMasterLoop cfg of
  EpollLoop | epollAvailable -> newEpollReaderWith (configFrameDeadline cfg) (configMaxFrameBytes cfg) (afterRound shell)
  _ -> (\r -> (r, pure ())) <$> newThreadedReader (configMaxFrameBytes cfg) (afterRound shell)

-- A cluster listening on this socket, with no worker yet.
newCluster :: Config -> Shell -> Feed -> Socket -> IO Cluster
newCluster cfg shell feed lsock = do
  let host = listenHostFor cfg
  port <- listenPort lsock
  advertise <- case configAdvertiseHost cfg of
    Just a -> pure a
    Nothing | isWildcard host -> nodeName <$> getSystemID
            | otherwise -> pure host
  tag <- newClusterTag
  sweepStaleDirs
  Cluster cfg shell port tag <$> newIORef 1 <*> newTVarIO False <*> pure advertise <*> newMVar emptyRegistry
                             <*> newMVar emptyRegistry { regNextId = refIdBase }
                             <*> pure feed <*> newIORef Nothing <*> newIORef Nothing <*> newMVar emptyBook
                             <*> datasetDir tag

-- How the master admits the workers and host agents that connect (with a
-- queue, the raw links are handed there instead of to the shell).
newAcceptor :: Config -> Secret -> Shell -> Maybe (TQueue Connection) -> IO Acceptor
newAcceptor cfg secret shell raw = do
  build <- buildIdentity
  nextId <- newIORef (1 :: Int)
  nonces <- newNonceSource
  pure Acceptor
    { accConfig = cfg, accSecret = secret, accNonces = nonces, accBuild = build, accNextId = nextId
    , accCounters = readIORef (shellCounters shell), accBump = bumpCounter shell
    , accJoined = case raw of
        Nothing -> joinLink shell
        Just q -> \wid conn info -> atomically $ do
          writeTQueue q conn
          modifyTVar' (shellWorkers shell) (M.insert wid info)
    , accHostJoined = joinHost shell (atomicModifyIORef' nextId (\n -> (n + 1, n))) }

-- Start the launches, wait for their workers, and run the body with
-- lost workers restarted and local workers' memory watched.
launchAndRun :: Config -> Secret -> Cluster -> [Maybe Int] -> Maybe Int -> Maybe String -> (Cluster -> IO r) -> IO r
launchAndRun cfg secret cluster plan slurmTasks localName body = do
  let shell = clShell cluster
      host = listenHostFor cfg
      port = clPort cluster
  when (not (isLoopback host) || (null plan && not (hasRemoteLaunch cfg) && configSimulatedWorkers cfg == 0)) $ do
    joinCmd <- clusterJoinCommand cluster
    configLog cfg ("herd: master listening on " ++ host ++ ":" ++ show port ++ "; to add a worker run: " ++ joinCmd)
  let localAddr = case (localName, localTransport cfg) of
        (Just name, ShmTransport) -> "shm:" ++ name
        (Just name, _) -> "unix:" ++ name
        _ -> tcpAddr
      -- with TLS on, every TCP address a worker is given says so
      tlsPrefix = if configTls cfg then "tls:" else ""
      remoteAddr = tlsPrefix ++ clAdvertise cluster ++ ":" ++ show port
      -- the listening socket as a process of this machine reaches it
      tcpAddr = tlsPrefix ++ (if isWildcard host then "127.0.0.1" else host) ++ ":" ++ show port
  bracket (startLaunches cfg secret plan slurmTasks localAddr tcpAddr remoteAddr) (mapM_ launchStop . fst) $
    \(launches, local) -> do
      awaitLaunches cfg (M.elems <$> readTVarIO (shellWorkers shell)) launches
      joined <- M.size <$> readTVarIO (shellWorkers shell)
      reserveHeap (heapReserveBytes (configMasterHeapReserve cfg) joined)
      withRestarts cfg shell (clClosed cluster) local $
        adaptive remoteAddr $
        withMemoryWatch cfg shell (length plan) (body cluster)
  where
    isLoopback h = h `elem` ["127.0.0.1", "::1", "localhost"]
    -- SLURM jobs added and cancelled with the work, when asked for
    adaptive addr act = case configSlurmAdapt cfg of
      Nothing -> act
      Just settings -> withAdaptive AdaptContext
        { acSettings = settings, acAddress = addr, acRtsOptions = configWorkerRtsOptions cfg
        , acHeapReserve = configWorkerHeapReserve cfg, acSecret = secret
        , acStartTimeout = configStartTimeout cfg, acLog = configLog cfg, acShell = clShell cluster
        , acStatus = clusterStatus cluster, acHeld = heldValues cluster
        , acPublish = writeIORef (clAdapt cluster) } act

-- Whether a listening address is every interface.
isWildcard :: String -> Bool
isWildcard h = h `elem` ["0.0.0.0", "::", "*"]

-- A link used as accepted: no upgrade, no channel binding.
plainLink :: Connection -> IO (Connection, B.ByteString)
plainLink conn = pure (conn, B.empty)

-- Serve the cluster's dashboard while the action runs, if the
-- configuration asks for one (its address was validated already).
withDashboardFor :: Cluster -> IO a -> IO a
withDashboardFor cluster act = case configDashboard cfg of
  Just text | Right addr <- parseDashboardAddress text ->
    withDashboard (configLog cfg) addr (clusterStatus cluster) $ \bound -> do
      writeIORef (clDashboard cluster) (Just bound)
      act
  _ -> act
  where cfg = clConfig cluster

-- Mark the cluster closed, answer every caller and ask every worker to stop.
shutdown :: Cluster -> IO ()
shutdown cluster = do
  atomically (writeTVar (clClosed cluster) True)
  void (timeout 2000000 (shutdownShell (clShell cluster)))
  shellRemovePartsDir (clShell cluster)
  exists <- doesDirectoryExist (clDatasetDir cluster)
  when exists $ void (try (removeDirectoryRecursive (clDatasetDir cluster)) :: IO (Either IOException ()))

-- Remove the parts and datasets directories of masters that are gone (a
-- master killed with SIGKILL leaves its own behind). Only where /proc
-- tells which processes live.
sweepStaleDirs :: IO ()
sweepStaleDirs = do
  procs <- doesDirectoryExist "/proc/self"
  when procs $ do
    bases <- handOverBases
    forM_ bases $ \base -> do
      names <- either (\(_ :: IOException) -> []) id <$> try (listDirectory base)
      forM_ [ (n, pid) | n <- names, Just pid <- [ownerOf n] ] $ \(n, pid) -> do
        alive <- doesDirectoryExist ("/proc/" ++ show pid)
        unless alive $ void (try (removeDirectoryRecursive (base </> n)) :: IO (Either IOException ()))
  where
    ownerOf n = do
      rest <- maybe (stripPrefix "herd-datasets-" n) Just (stripPrefix "herd-parts-" n)
      case span isDigit rest of
        (digits@(_ : _), '-' : _) -> Just (read digits :: Int)
        _ -> Nothing

-- Where this cluster keeps its callers' partitions on disk.
datasetDir :: Word64 -> IO FilePath
datasetDir tag = do
  tmp <- getTemporaryDirectory
  pid <- getProcessID
  pure (tmp </> ("herd-datasets-" ++ show pid ++ "-" ++ showHex tag ""))

-- | Run one farm job on the cluster and wait for it. Jobs from several
-- threads run at once, sharing the workers; a caller interrupted by an
-- exception cancels its job. The callbacks run here, on the caller's
-- thread, as the shell hands over the job's news: a slow decoder slows
-- its own job only. The first result that does not decode, or callback
-- that throws, ends the job with 'ResultDecodeError'.
runJob :: Cluster -> JobSpec -> JobCallbacks -> IO (Either HerdError JobStats)
runJob cluster spec callbacks = do
  jid <- freshId cluster
  news <- newTQueueIO
  let cfg = clConfig cluster
      job = FarmJob (specRef spec) (specTasks spec) (configBatching cfg) (configBatchTarget cfg) (configMaxTaskDeaths cfg)
                   (configMaxJobDeaths cfg) (specKeepGoing spec) (configStragglerCopies cfg)
      sh = clShell cluster
      broken i why = ResultDecodeError i (refName (specRef spec)) why
      -- news comes in lists, one per step of the shell; once broken, the
      -- rest of the news is drained unread until the end
      loop failure = atomically (readTQueue news) >>= go failure
      go failure [] = loop failure
      go failure (next : rest) = case (next, failure) of
        (NewsDone result, _) -> pure (maybe result Left failure)
        (_, Just _) -> go failure rest
        (NewsStaged ranges bytes, Nothing) ->
          onStaged callbacks ranges bytes >>= either (\(i, why) -> breakJob (broken i why) rest) (\() -> go Nothing rest)
        (NewsAccepted ranges, Nothing) ->
          tryUser (onAccepted callbacks ranges) >>= either (\why -> breakJob (broken (firstTask ranges) why) rest) (\() -> go Nothing rest)
        (NewsFailed i err, Nothing) ->
          tryUser (onFailed callbacks i err) >>= either (\why -> breakJob (broken i why) rest) (\() -> go Nothing rest)
      breakJob err rest = shellStep sh True [FarmBroken jid err] >> go (Just err) rest
      firstTask ranges = case ranges of { Range lo _ : _ -> lo; [] -> 0 }
  shellRegister sh True (RegisterFarm jid spec news) [FarmSubmit jid job]
  loop Nothing `onException` shellRegister sh True (Forget (Just jid) Nothing) [FarmCancel jid]

-- | Start a master with one local worker whose link is handed to the body
-- instead of to the master's core: for measuring the link itself (the
-- latency benchmark). Nothing else reads or writes that link.
withRawWorker :: Config -> (Connection -> IO a) -> IO a
withRawWorker cfg body = do
  q <- newTQueueIO
  withMaster cfg { configWorkers = Just 1 } (Just q) $ \_ -> do
    conn <- atomically (readTQueue q)
    body conn `finally` closeConnection conn
