{-# LANGUAGE ScopedTypeVariables #-}
-- | The master: a cluster of workers, and the loop that drives the pure
-- scheduler from real events.
--
-- One thread (the loop) owns the scheduler state and all decisions. One
-- thread reads every worker connection ("Herd.Master.Poller") and turns
-- frames into events; each connection has a writer thread, which drains
-- that worker's outbox, so a slow worker never blocks the loop. A
-- connection that sends bytes that do not decode, an oversized or
-- truncated frame, or a reply that does not match its batch is logged and
-- closed; the scheduler sees the worker as lost and its
-- unfinished tasks run elsewhere.
--
-- New connections must prove the shared secret ("Herd.Auth") and then pass
-- the handshake (protocol version, build identity) within
-- 'configHandshakeTimeout', each in its own thread; at most
-- 'configMaxPendingHandshakes' may be in progress, further ones are closed
-- at once. Nothing a connection sends reaches the scheduler until it has
-- passed both, so an unauthenticated peer, a stalled one, or a flood of
-- them cannot disturb running workers. A link silent for
-- 'configLivenessTimeout' (judged by the kernel's keepalive probes, which a
-- busy worker's kernel still answers) counts as lost, and its tasks run
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
  , clusterPacketStats
    -- * Jobs (used by "Herd.Farm")
  , JobSpec (..)
  , runJob
    -- * Stream processes (used by "Herd.Stream")
  , StreamEnds (..)
  , StreamEvent (..)
  , openStream
  , closeStream
    -- * Lending the links to another loop (used by "Herd.Evolve")
  , LentLink (..)
  , withLentLinks
  , clusterRegistry
  ) where

import Control.Concurrent
import Control.Concurrent.Async
import Control.Concurrent.STM
import Control.Exception
import Control.Monad
import qualified Data.ByteString as B
import qualified Data.ByteString.Lazy as BL
import Data.IORef
import qualified Data.Map.Strict as M
import qualified Data.Text as T
import Data.Word (Word64)
import Data.List (intercalate, partition)
import Herd.Auth
import Herd.BuildId (buildIdentity)
import Herd.Config
import Herd.Error
import Herd.Launch.Local
import Herd.Launch.Process (Launch (..))
import Herd.Launch.Slurm
import Herd.Launch.Ssh
import Herd.Scheduler
import Herd.Evolve.Schedule (Registry, emptyRegistry)
import Herd.Packet
import Herd.Packet.Policy (Urgency (..))
import Herd.Task (TaskRef (..), tryUser)
import Herd.Transport
import Herd.Transport.Tcp
import Herd.Transport.Unix (listenUnix, acceptUnix)
import Herd.Transport.Shm (upgradeMaster)
import Herd.Master.Poller
import Herd.Wire
import Herd.Worker (serveIfWorker)
import Network.Socket (close)
import System.Environment (getEnvironment, getProgName, getExecutablePath)
import System.Posix.Unistd (getSystemID, nodeName)
import System.Process (getProcessExitCode)
import Herd.Clock (monotonicSeconds)
import System.Timeout (timeout)

-- | What the master knows about a connected worker.
data WorkerInfo = WorkerInfo
  { infoId   :: !WorkerId
  , infoPid  :: !Int
  , infoHost :: !String
  , infoPeer :: !String   -- ^ the connection's address
  , infoGroup :: !String  -- ^ the launch that started it (@local@, @ssh:HOST@, @slurm@; empty: joined by hand)
  , infoTransport :: !TransportKind  -- ^ how it is linked to the master
  } deriving (Eq, Show)

-- | What happened to connections since the cluster started.
data ConnectionCounters = ConnectionCounters
  { countAccepted       :: !Int  -- ^ connections accepted
  , countBusyRefused    :: !Int  -- ^ closed at once: too many handshakes in progress
  , countAuthFailures   :: !Int  -- ^ peers that could not prove the secret
  , countHandshakeFailures :: !Int  -- ^ other failed handshakes: timeouts, bad frames, wrong build
  , countJoined         :: !Int  -- ^ workers that passed the handshake
  , countWorkerMessages :: !Int  -- ^ messages from joined workers handed to the scheduler
  } deriving (Eq, Show)

noCounters :: ConnectionCounters
noCounters = ConnectionCounters 0 0 0 0 0 0

-- | A running set of workers and the master that drives them.
data Cluster = Cluster
  { clConfig   :: !Config
  , clInbox    :: !(TQueue Input)
  , clJobLock  :: !(MVar ())
  , clPort     :: !Int
  , clWorkers  :: !(TVar (M.Map WorkerId WorkerInfo))
  , clPeers    :: !(TVar (M.Map WorkerId (Sender, IORef PeerStats)))
  , clNextJob  :: !(IORef Word64)
  , clClosed   :: !(TVar Bool)
  , clAdvertise :: !String
  , clCounters :: !(IORef ConnectionCounters)
  , clRegistry :: !(MVar Registry)   -- ^ the evolve API's population ("Herd.Evolve")
  , clLosses   :: !(TVar Int)         -- ^ links dropped so far (see 'lentLosses')
  , clPoller   :: !Poller             -- ^ the thread that reads every link
  }

-- | A job as the loop runs it: how to encode tasks and where results go.
data JobSpec = JobSpec
  { specTasks    :: !Int
  , specRef      :: !TaskRef
  , specCheck    :: Int -> IO ()
    -- ^ evaluate task @i@'s argument (throws what it throws)
  , specArg      :: Int -> Encoder
    -- ^ the encoder of task @i@'s argument, once checked
  , specStage    :: Int -> B.ByteString -> IO ()
    -- ^ decode task @i@'s result and keep it (throws if it does not
    -- decode); a task may be staged twice when its worker was lost
  , specAccept   :: [Range] -> IO ()
    -- ^ these tasks' staged results are final; called once per task
  }

-- | A stream process's caller side, as the loop sees it.
data StreamEnds = StreamEnds
  { endsOutput  :: !(TQueue StreamEvent)  -- ^ to the caller's output list
  , endsCredit  :: !(TVar Int)            -- ^ input elements the caller may still send
  , endsAllowed :: !(IORef Int)           -- ^ output elements the worker may still send
  }

-- | What the caller of a stream process receives.
data StreamEvent
  = StreamElements [B.ByteString]  -- ^ encoded output elements, in order
  | StreamFinished                 -- ^ the output ended
  | StreamBroken String            -- ^ the process failed, or its worker was lost

data Input
  = Connected !WorkerId !Connection !WorkerInfo
  | Received !WorkerId ![B.ByteString]
  | Lost !WorkerId !String
  | Submit !JobId !JobSpec !(MVar (Either HerdError JobStats))
  | Cancel !JobId
  | OpenStream !Word64 !TaskRef !StreamEnds !(MVar (Either HerdError Sender))
  | CloseStream !Word64
  | Stop !(MVar ())
  | Lend !(MVar [LentLink])

data Link = Link
  { linkConn    :: !Connection
  , linkSender  :: !Sender
  , linkOutbox  :: !(TQueue (Maybe B.ByteString))
  , linkExpect  :: !(IORef [Expect])  -- ^ batches sent, oldest first, whose results are due
  , linkThreads :: ![Async ()]
  , linkLent    :: !LentLink
  }

-- | A worker's link while another loop reads it: the cluster's reading
-- thread is paused between frames, and sends still go through the link's
-- packet sender.
data LentLink = LentLink
  { lentWorker   :: !WorkerId
  , lentConn     :: !Connection
  , lentSender   :: !Sender
  , lentReceived :: !(IORef PeerStats)  -- ^ count packets read here too
  , lentGone     :: !(TVar (Maybe String))
    -- ^ set (with why) when the cluster dropped the link, e.g. because a
    -- send to the worker failed; its socket is closed then
  , lentLosses   :: !(TVar Int)
    -- ^ the cluster's count of dropped links, shared by all its links, so a
    -- loop can notice a drop by watching one variable
  }

-- A batch whose results are arriving, in order.
data Expect = Expect
  { expBatch  :: !BatchId
  , expNext   :: ![Int]                    -- ^ indices of the results still to come
  , expGot    :: !Int                      -- ^ results received so far
  , expStage  :: Int -> B.ByteString -> IO ()
  }

data Running = Running
  { runId    :: !JobId
  , runSpec  :: !JobSpec
  , runReply :: !(MVar (Either HerdError JobStats))
  }

data OpenedStream = OpenedStream
  { osWorker :: !WorkerId
  , osEnds   :: !StreamEnds
  }

data LoopState = LoopState
  { lsSched   :: !Sched
  , lsLinks   :: !(M.Map WorkerId Link)
  , lsRunning :: !(Maybe Running)
  , lsStopping :: !Bool   -- ^ shutting down: losing workers is expected
  , lsRequeued :: ![(WorkerId, Double, [Range])]
    -- ^ tasks of lost workers not yet sent elsewhere, for the log
  , lsReady   :: ![(WorkerId, [B.ByteString])]
    -- ^ received messages not yet handled, per worker, served round robin
  , lsStreams :: !(M.Map Word64 OpenedStream)
  , lsGathered :: !(M.Map Word64 [B.ByteString])
    -- ^ stream output received in this pass, newest first, not yet handed over
  }

-- | The address workers connect to: host and port.
clusterAddress :: Cluster -> (String, Int)
clusterAddress c = (clAdvertise c, clPort c)

-- | The shell command that adds a worker to this cluster from another
-- machine (which needs the same secret: the same @~/.herd/cookie@, or
-- @HERD_SECRET@).
clusterJoinCommand :: Cluster -> IO String
clusterJoinCommand c = do
  prog <- getProgName
  exe <- getExecutablePath
  let addr = clAdvertise c ++ ":" ++ show (clPort c)
  pure $ if prog == "herd" then "herd worker --connect " ++ addr
         else "HERD_WORKER=" ++ addr ++ " " ++ exe

-- | Connection counters, for monitoring and tests.
clusterCounters :: Cluster -> IO ConnectionCounters
clusterCounters c = readIORef (clCounters c)

bump :: Cluster -> (ConnectionCounters -> ConnectionCounters) -> IO ()
bump c f = atomicModifyIORef' (clCounters c) (\x -> (f x, ()))

-- | How many workers are connected now.
clusterWorkerCount :: Cluster -> IO Int
clusterWorkerCount c = M.size <$> readTVarIO (clWorkers c)

-- | The connected workers.
clusterWorkerInfo :: Cluster -> IO [WorkerInfo]
clusterWorkerInfo c = M.elems <$> readTVarIO (clWorkers c)

-- | Wait until at least this many workers are connected, or the timeout
-- (seconds) passes; returns whether they did.
waitForWorkers :: Cluster -> Int -> Double -> IO Bool
waitForWorkers c n secs = do
  r <- timeout (round (secs * 1e6)) $ atomically $ do
    ws <- readTVar (clWorkers c)
    unless (M.size ws >= n) retry
  pure (r == Just ())

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
withCluster :: Config -> (Cluster -> IO r) -> IO r
withCluster config body = do
  serveIfWorker
  cfg <- either throwIO pure (validateConfig config)
  secret <- loadSecret (configSecret cfg) >>= either (throwIO . ConfigError "configSecret") pure
  plan <- planCpus cfg
  slurmTasks <- if not (configSlurm cfg) then pure Nothing else
    either (throwIO . LaunchError) (pure . Just) . slurmTaskCount =<< getEnvironment
  let host = listenHostFor cfg
  bracket (listenTcp host (configListenPort cfg)) close $ \lsock ->
   bracket (newPoller (configMaxFrameBytes cfg)) closePoller $ \poller -> do
    port <- listenPort lsock
    advertise <- case configAdvertiseHost cfg of
      Just a -> pure a
      Nothing | isWildcard host -> nodeName <$> getSystemID
              | otherwise -> pure host
    cluster <- Cluster cfg <$> newTQueueIO <*> newMVar () <*> pure port <*> newTVarIO M.empty
                       <*> newTVarIO M.empty <*> newIORef 1 <*> newTVarIO False <*> pure advertise <*> newIORef noCounters
                       <*> newMVar emptyRegistry <*> newTVarIO 0 <*> pure poller
    build <- buildIdentity
    -- one numbering for workers from every listener
    nextId <- newIORef (1 :: Int)
    let transport = localTransport cfg
        localSocket = not (null plan) && transport /= TcpTransport
    withLocalListener localSocket port $ \local ->
     withAsync (runPoller poller) $ \reading ->
     withAsync (masterLoop cluster) $ \loop ->
      withAsync (acceptLoop cluster secret build nextId (acceptTcp lsock)) $ \_ ->
      withAsync (mapM_ (\(usock, _) -> acceptLoop cluster secret build nextId (acceptUnix usock)) local) $ \_ -> do
        link loop
        link reading
        when (not (isLoopback host) || (null plan && not (hasRemoteLaunch cfg))) $ do
          joinCmd <- clusterJoinCommand cluster
          configLog cfg ("herd: master listening on " ++ host ++ ":" ++ show port
                         ++ "; to add a worker run: " ++ joinCmd)
        let localAddr = case (local, transport) of
              (Just (_, name), ShmTransport) -> "shm:" ++ name
              (Just (_, name), _) -> "unix:" ++ name
              _ -> (if isWildcard host then "127.0.0.1" else host) ++ ":" ++ show port
            remoteAddr = advertise ++ ":" ++ show port
        bracket (startLaunches cfg secret plan slurmTasks localAddr remoteAddr) (mapM_ launchStop) $
          \launches -> do
            awaitLaunches cluster launches
            body cluster `finally` shutdown cluster
  where
    isWildcard h = h `elem` ["0.0.0.0", "::", "*"]
    -- the abstract socket local workers connect to, named after the TCP
    -- port so that two clusters of one process differ
    withLocalListener False _ act = act Nothing
    withLocalListener True port act =
      bracket (listenUnix port) (close . fst) (act . Just)
    isLoopback h = h `elem` ["127.0.0.1", "::1", "localhost"]

-- Start every launch the configuration asks for; none waits for another.
startLaunches :: Config -> Secret -> [Maybe Int] -> Maybe Int -> String -> String -> IO [Launch]
startLaunches cfg secret plan slurmTasks localAddr remoteAddr = do
  locals <- if null plan then pure [] else do
    ws <- spawnLocalWorkers (LocalLaunch localAddr (configWorkerRtsOptions cfg) "local" secret
                                       (configWorkerNice cfg)) plan
    pure [localLaunch ws]
  hosts <- forM (configHosts cfg) $ startSshLaunch SshLaunch
    { sshCommand = configSshCommand cfg, sshAddress = remoteAddr
    , sshRtsOptions = configWorkerRtsOptions cfg, sshSecret = secret
    , sshShip = configShip cfg, sshLog = configLog cfg }
  slurm <- forM (maybe [] pure slurmTasks) $ startSlurmLaunch SlurmLaunch
    { slurmAddress = remoteAddr, slurmRtsOptions = configWorkerRtsOptions cfg
    , slurmSecret = secret, slurmLog = configLog cfg }
  pure (locals ++ hosts ++ slurm)

localLaunch :: [LocalWorker] -> Launch
localLaunch ws = Launch
  { launchName = "local"
  , launchExpected = pure (Just (length ws))
  , launchFailure = do
      exited <- length . filter (/= Nothing) <$> mapM (getProcessExitCode . localHandle) ws
      pure $ if exited == 0 then Nothing
             else Just (show exited ++ " of " ++ show (length ws)
                        ++ " local workers exited early; their errors are on standard error above")
  , launchStop = stopLocalWorkers ws
  }

-- Wait until every launch has all its workers connected or has failed, or
-- the start timeout passes; then go on or throw as 'withCluster' says.
awaitLaunches :: Cluster -> [Launch] -> IO ()
awaitLaunches cluster launches = do
  let cfg = clConfig cluster
  deadline <- (+ configStartTimeout cfg) <$> monotonicSeconds
  let connectedOf l infos = length (filter ((== launchName l) . infoGroup) infos)
      -- Right: complete; Left (Just why): failed; Left Nothing: still starting
      poll = do
        infos <- M.elems <$> readTVarIO (clWorkers cluster)
        t <- monotonicSeconds
        states <- forM launches $ \l -> do
          want <- launchExpected l
          failed <- launchFailure l
          let have = connectedOf l infos
          pure $ case (want, failed) of
            (Just n, _) | have >= n -> Right ()
            (_, Just why) -> Left (Just (launchName l ++ ": " ++ why))
            _ | t >= deadline -> Left (Just (launchName l ++ ": " ++ show have ++ " of "
                                            ++ maybe "its" show want ++ " workers connected within "
                                            ++ show (configStartTimeout cfg) ++ " s"))
              | otherwise -> Left Nothing
        if Left Nothing `elem` states then threadDelay 20000 >> poll else pure states
  states <- poll
  let failures = [ why | Left (Just why) <- states ]
  have <- clusterWorkerCount cluster
  unless (null failures) $
    if configAllowPartialStart cfg && have > 0
      then forM_ failures $ \why -> configLog cfg ("herd: going on without a launch that failed: " ++ why)
      else throwIO (LaunchError (intercalate "; " failures))

-- Mark the cluster closed and ask every worker to stop.
shutdown :: Cluster -> IO ()
shutdown cluster = do
  atomically (writeTVar (clClosed cluster) True)
  done <- newEmptyMVar
  atomically $ writeTQueue (clInbox cluster) (Stop done)
  void (timeout 2000000 (takeMVar done))

-- Accept connections forever; each handshake runs in its own thread, and at
-- most 'configMaxPendingHandshakes' run at once.
acceptLoop :: Cluster -> Secret -> B.ByteString -> IORef Int -> IO Connection -> IO ()
acceptLoop cluster secret build nextId acceptOne = do
  pending <- newIORef (0 :: Int)
  let cfg = clConfig cluster
      cap = configMaxPendingHandshakes cfg
  forever $ do
    accepted <- try acceptOne
    case accepted of
      Left (e :: IOException) -> do
        -- e.g. out of file descriptors under a flood: wait, do not die
        configLog cfg ("herd: accepting a connection failed: " ++ displayException e)
        threadDelay 50000
      Right conn -> do
        bump cluster (\c -> c { countAccepted = countAccepted c + 1 })
        admitted <- atomicModifyIORef' pending (\k -> if k >= cap then (k, False) else (k + 1, True))
        if admitted
          then void $ forkIO $ handshake cluster secret build nextId conn
                                 `finally` atomicModifyIORef' pending (\k -> (k - 1, ()))
          else do
            n <- countBusyRefused <$> clusterCounters cluster
            bump cluster (\c -> c { countBusyRefused = countBusyRefused c + 1 })
            when (n == 0 || n `mod` 1000 == 0) $
              configLog cfg ("herd: closing connection from " ++ connPeer conn ++ ": "
                             ++ show cap ++ " handshakes already in progress")
            closeConnection conn

handshake :: Cluster -> Secret -> B.ByteString -> IORef Int -> Connection -> IO ()
handshake cluster secret build nextId conn = do
  let cfg = clConfig cluster
      logLine = configLog cfg
      failed why = do
        bump cluster (\c -> c { countHandshakeFailures = countHandshakeFailures c + 1 })
        logLine ("herd: refused connection from " ++ connPeer conn ++ ": " ++ why)
      refuse why = do
        failed why
        _ <- try (sendFrame conn (BL.fromStrict (encodeMasterReply (Refused (T.pack why)))))
               :: IO (Either SomeException ())
        closeConnection conn
  rc <- setLiveness (configLivenessTimeout cfg) conn
  when (rc /= 0) $ logLine ("herd: cannot set keepalive on " ++ connPeer conn ++ " (errno " ++ show rc ++ ")")
  r <- try $ timeout (round (configHandshakeTimeout cfg * 1e6)) $ do
    auth <- authenticateWorker secret conn
    case auth of
      Left failure -> pure (Left failure)
      Right () -> Right <$> recvFrame handshakeFrameLimit conn
  case r of
    Left (e :: SomeException) -> refuse ("bad handshake frame: " ++ displayException e)
    Right Nothing -> refuse ("no handshake within " ++ show (configHandshakeTimeout cfg) ++ " s")
    Right (Just (Left (WrongSecret why))) -> do
      bump cluster (\c -> c { countAuthFailures = countAuthFailures c + 1 })
      logLine ("herd: refused connection from " ++ connPeer conn ++ ": authentication failed: " ++ why)
      closeConnection conn
    Right (Just (Left (AuthProtocol why))) -> failed why >> closeConnection conn
    Right (Just (Right Nothing)) -> failed "closed the connection before its hello" >> closeConnection conn
    Right (Just (Right (Just bytes))) -> case decodeWorkerHello bytes >>= \h -> fmap (const h) (checkHello build h) of
      Left why -> refuse why
      Right hello | helloWantsShm hello && connKind conn /= UnixTransport ->
        refuse "shared memory is set up over the master's local socket (shm:NAME), not over TCP"
      Right hello -> do
        wid <- atomicModifyIORef' nextId (\n -> (n + 1, n))
        sent <- try (sendFrame conn (BL.fromStrict (encodeMasterReply
                       (Welcome build (fromIntegral wid) (fromIntegral (configMaxFrameBytes cfg))
                                (round (configLivenessTimeout cfg * 1000)) (configChunking cfg)
                                (fromIntegral (configPacketBytes cfg))
                                (round (configPacketTimeout cfg * 1e6))
                                (fromIntegral (configStreamWindow cfg))))))
        case sent of
          Left (e :: SomeException) -> failed ("lost during handshake: " ++ displayException e)
                                       >> closeConnection conn
          Right () -> do
            linked <- if not (helloWantsShm hello) then pure (Right conn)
                        else try (upgradeMaster (configHandshakeTimeout cfg) conn)
            case linked of
              Left (e :: SomeException) -> do
                failed ("cannot set up shared memory: " ++ displayException e)
                closeConnection conn
              Right link' -> do
                bump cluster (\c -> c { countJoined = countJoined c + 1 })
                atomically $ writeTQueue (clInbox cluster) $
                  Connected wid link' (WorkerInfo wid (fromIntegral (helloPid hello)) (T.unpack (helloHost hello))
                                                  (connPeer link') (T.unpack (helloGroup hello))
                                                  (connKind link'))

-- The loop: the only owner of the scheduler state. Received packets are
-- split into messages and served round robin, one message per worker per
-- round, so a chatty worker cannot starve the others; when nothing is left
-- to do, every send buffer is flushed (the packet layer's idle rule).
masterLoop :: Cluster -> IO ()
masterLoop cluster = go (LoopState emptySched M.empty Nothing False [] [] M.empty M.empty)
  where
    cfg = clConfig cluster
    inbox = clInbox cluster

    go st = do
      inputs <- if null (lsReady st) then waitInput st else drainInbox (64 :: Int)
      st1 <- foldM handle st inputs
      st2 <- serveRounds (256 :: Int) st1
      st3 <- handOver st2
      go st3

    waitInput st = do
      ready <- atomically (tryReadTQueue inbox)
      case ready of
        Just i -> pure [i]
        Nothing -> do
          mapM_ (flushIdle . linkSender) (M.elems (lsLinks st))
          (: []) <$> atomically (readTQueue inbox)

    drainInbox 0 = pure []
    drainInbox k = do
      next <- atomically (tryReadTQueue inbox)
      case next of
        Nothing -> pure []
        Just i -> (i :) <$> drainInbox (k - 1)

    -- one message from each worker that has some, for up to n rounds
    serveRounds 0 st = pure st
    serveRounds n st = case lsReady st of
      [] -> pure st
      ready -> do
        (st', rest) <- foldM serveOne (st { lsReady = [] }, []) ready
        -- messages that arrived for a worker during the round go after its leftovers
        let merged = foldr (\(w, ms) acc -> addReady w ms acc) (lsReady st') (reverse rest)
        serveRounds (n - 1) st' { lsReady = merged }

    serveOne (st, rest) (wid, msgs) = case msgs of
      [] -> pure (st, rest)
      (m : ms) -> case M.lookup wid (lsLinks st) of
        Nothing -> pure (st, rest)   -- lost meanwhile: its messages go with it
        Just l -> do
          st' <- fromWorker wid l m st
          pure (st', if null ms then rest else (wid, ms) : rest)

    addReady wid msgs ready = case break ((== wid) . fst) ready of
      (before, (_, old) : after) -> before ++ (wid, old ++ msgs) : after
      _ -> ready ++ [(wid, msgs)]

    -- give the callers of stream processes what this pass received
    handOver st
      | M.null (lsGathered st) = pure st
      | otherwise = do
          forM_ (M.toList (lsGathered st)) $ \(sid, elems) ->
            forM_ (M.lookup sid (lsStreams st)) $ \os ->
              atomically $ writeTQueue (endsOutput (osEnds os)) (StreamElements (reverse elems))
          pure st { lsGathered = M.empty }

    handle st input = do
      t <- monotonicSeconds
      case input of
        Connected wid conn info -> joined t wid conn info st
        Received wid msgs
          | M.member wid (lsLinks st) -> do
              bump cluster (\c -> c { countWorkerMessages = countWorkerMessages c + length msgs })
              pure st { lsReady = addReady wid msgs (lsReady st) }
          | otherwise -> pure st
        Lost wid why -> loseWorker t wid why st
        Submit jid spec reply ->
          drive t (JobSubmitted jid (specTasks spec) (configBatching cfg) (configBatchTarget cfg))
                st { lsRunning = Just (Running jid spec reply) }
        Cancel jid -> case lsRunning st of
          Just r | runId r == jid -> do
            let (s', _) = step t (JobCancelled jid) (lsSched st)
            pure st { lsSched = s', lsRunning = Nothing }
          _ -> pure st
        OpenStream sid ref ends reply -> case placeStream st of
          Nothing -> putMVar reply (Left NoWorkers) >> pure st
          Just (wid, l) -> do
            sendMessage (linkSender l) Bulk (encodeToWorker (StreamOpen sid ref))
            putMVar reply (Right (linkSender l))
            pure st { lsStreams = M.insert sid (OpenedStream wid ends) (lsStreams st) }
        CloseStream sid -> case M.lookup sid (lsStreams st) of
          Nothing -> pure st
          Just os -> do
            forM_ (M.lookup (osWorker os) (lsLinks st)) $ \l ->
              sendMessage (linkSender l) Urgent (encodeToWorker (StreamClose sid))
            pure st { lsStreams = M.delete sid (lsStreams st), lsGathered = M.delete sid (lsGathered st) }
        Lend reply -> do
          putMVar reply (map linkLent (M.elems (lsLinks st)))
          pure st
        Stop done -> do
          forM_ (M.elems (lsLinks st)) $ \l -> do
            sendMessage (linkSender l) Urgent (encodeToWorker Shutdown)
            atomically $ writeTQueue (linkOutbox l) Nothing
          putMVar done ()
          pure st { lsStopping = True }

    -- a worker passed the handshake: start its threads and tell the scheduler
    joined t wid conn info st = do
      outbox <- newTQueueIO
      queued <- newIORef (0 :: Int)
      received <- newIORef noPeerStats
      let cap = max (64 * 1024 * 1024) (2 * configMaxFrameBytes cfg)
          enqueue bytes = do
            q <- atomicModifyIORef' queued (\k -> (k + B.length bytes, k + B.length bytes))
            if q > cap
              then atomically $ writeTQueue inbox (Lost wid ("stopped reading: " ++ show q
                                                             ++ " bytes waiting to be sent to it"))
              else atomically $ writeTQueue outbox (Just bytes)
          -- With nothing waiting for the writer thread, send from this
          -- thread what the kernel takes at once (no hand-off between
          -- threads per packet); the writer sends the rest.
          out packet = do
            let parts = frameParts packet
            waiting <- readIORef queued
            if waiting > 0 then mapM_ enqueue parts else do
              rest <- trySync (sendAvailableParts conn parts)
              case rest of
                Left e ->
                  atomically $ writeTQueue inbox (Lost wid ("send failed: " ++ displayException e))
                Right r -> mapM_ enqueue r
      sender <- newSender (packetPolicyOf cfg) out
      expect <- newIORef []
      lent <- LentLink wid conn sender received <$> newTVarIO Nothing <*> pure (clLosses cluster)
      addLink (clPoller cluster) wid conn (deliver cluster wid conn received)
              (\why -> atomically $ writeTQueue (clInbox cluster) (Lost wid why))
      writer <- async (writerThread cluster wid conn outbox queued)
      atomically $ do
        modifyTVar' (clWorkers cluster) (M.insert wid info)
        modifyTVar' (clPeers cluster) (M.insert wid (sender, received))
      let st1 = st { lsLinks = M.insert wid (Link conn sender outbox expect [writer] lent) (lsLinks st) }
      drive t (WorkerJoined wid) st1

    -- the worker with the fewest open streams (lowest number on a tie)
    placeStream st = case M.toList (lsLinks st) of
      [] -> Nothing
      links ->
        let load wid = length (filter ((== wid) . osWorker) (M.elems (lsStreams st)))
            (wid, l) = foldr1 (\a b -> if load (fst a) <= load (fst b) then a else b) links
        in Just (wid, l)

    loseWorker t wid why st = case M.lookup wid (lsLinks st) of
      Nothing -> pure st
      Just l -> do
        let unfinished = concatMap snd (outstandingFor wid (lsSched st))
            (broken, kept) = M.partition ((== wid) . osWorker) (lsStreams st)
        unless (lsStopping st) $
          configLog cfg ("herd: worker " ++ show wid ++ " lost: " ++ why
            ++ (if null unfinished then "" else "; its " ++ show (sum (map rangeSize unfinished))
                                                 ++ " unfinished tasks will run elsewhere"))
        forM_ (M.toList broken) $ \(sid, os) -> do
          forM_ (M.lookup sid (lsGathered st)) $ \elems ->
            atomically $ writeTQueue (endsOutput (osEnds os)) (StreamElements (reverse elems))
          atomically $ writeTQueue (endsOutput (osEnds os))
            (StreamBroken ("its worker " ++ show wid ++ " was lost: " ++ why))
        -- a loop that has the link lent must hear of it: its socket closes now
        atomically $ do
          writeTVar (lentGone (linkLent l)) (Just why)
          modifyTVar' (clLosses cluster) (+ 1)
        dropLink l
        atomically $ do
          modifyTVar' (clWorkers cluster) (M.delete wid)
          modifyTVar' (clPeers cluster) (M.delete wid)
        let requeued = [ (wid, t, unfinished) | not (null unfinished), not (lsStopping st) ]
        drive t (WorkerLost wid) st { lsLinks = M.delete wid (lsLinks st)
                                    , lsReady = filter ((/= wid) . fst) (lsReady st)
                                    , lsStreams = kept
                                    , lsGathered = M.difference (lsGathered st) broken
                                    , lsRequeued = requeued ++ lsRequeued st }

    -- a worker broke the protocol: treat it as lost (its work runs elsewhere)
    badPeer wid l why st = do
      t <- monotonicSeconds
      loseWorker t wid ("bad message from " ++ connPeer (linkConn l) ++ ": " ++ why) st

    fromWorker wid l bytes st = case decodeFromWorker bytes of
      Left why -> badPeer wid l why st
      Right msg -> case msg of
        Result value -> do
          expect <- readIORef (linkExpect l)
          case expect of
            (e : later) | (i : next) <- expNext e -> do
              writeIORef (linkExpect l) (e { expNext = next, expGot = expGot e + 1 } : later)
              staged <- try (expStage e i value)
              case staged of
                Right () -> pure st
                Left (ex :: SomeException) -> abortRunning st $ \name ->
                  ResultDecodeError i name (displayException ex)
            _ -> badPeer wid l "a result that no batch was waiting for" st
        BatchDone bid busyNs -> popExpect wid l bid st $ \e ->
          if not (null (expNext e))
            then badPeer wid l ("batch " ++ show bid ++ " ended after " ++ show (expGot e) ++ " of "
                                ++ show (expGot e + length (expNext e)) ++ " results") st
            else completed wid bid (fromIntegral busyNs / 1e9) Nothing st
        TaskThrew bid pos why -> popExpect wid l bid st $ \e ->
          if fromIntegral pos /= expGot e
            then badPeer wid l ("batch " ++ show bid ++ " failed at position " ++ show pos ++ " after "
                                ++ show (expGot e) ++ " results") st
            else completed wid bid 0 (Just (fromIntegral pos, T.unpack why)) st
        BatchRejected bid why -> popExpect wid l bid st $ \_ -> do
          t <- monotonicSeconds
          drive t (BatchRefused wid bid (T.unpack why)) st
        StreamOut sid value -> withStream wid l sid st $ \os -> do
          left <- atomicModifyIORef' (endsAllowed (osEnds os)) (\k -> (k - 1, k - 1))
          if left < 0
            then badPeer wid l ("stream " ++ show sid ++ " sent more elements than its credit") st
            else pure st { lsGathered = M.insertWith (++) sid [value] (lsGathered st) }
        StreamDone sid -> withStream wid l sid st $ \os -> finishStream sid os StreamFinished st
        StreamAborted sid why -> withStream wid l sid st $ \os ->
          finishStream sid os (StreamBroken (T.unpack why)) st
        StreamTaken sid n -> withStream wid l sid st $ \os -> do
          atomically $ modifyTVar' (endsCredit (osEnds os)) (+ fromIntegral n)
          pure st
        -- evolve answers are read by "Herd.Evolve"'s loops; one arriving
        -- here is late, from a call that already ended
        _ -> pure st

    withStream wid l sid st act = case M.lookup sid (lsStreams st) of
      Just os | osWorker os == wid -> act os
              | otherwise -> badPeer wid l ("message for stream " ++ show sid ++ " of another worker") st
      Nothing -> pure st   -- closed by its caller: late messages are dropped

    finishStream sid os event st = do
      forM_ (M.lookup sid (lsGathered st)) $ \elems ->
        atomically $ writeTQueue (endsOutput (osEnds os)) (StreamElements (reverse elems))
      atomically $ writeTQueue (endsOutput (osEnds os)) event
      pure st { lsStreams = M.delete sid (lsStreams st), lsGathered = M.delete sid (lsGathered st) }

    popExpect wid l bid st act = do
      expect <- readIORef (linkExpect l)
      case expect of
        (e : later) | expBatch e == bid -> writeIORef (linkExpect l) later >> act e
        _ -> badPeer wid l ("an end of batch " ++ show bid ++ ", which is not the batch in progress") st

    completed wid bid busy failure st = do
      t <- monotonicSeconds
      drive t (BatchCompleted wid bid busy failure) st

    -- Step the scheduler and carry out its commands.
    drive t ev st = do
      let (s', cmds) = step t ev (lsSched st)
      foldM (execute t) st { lsSched = s' } cmds

    execute t st cmd = case cmd of
      SendBatch wid bid ranges -> case (M.lookup wid (lsLinks st), lsRunning st) of
        (Just l, Just r) -> do
          let spec = runSpec r
              indices = rangeIndices ranges
          checked <- checkArgs spec indices
          case checked of
            Left (i, why) -> abortRunning st (\name -> ArgumentError i name why)
            Right () -> do
              modifyIORef' (linkExpect l) (++ [Expect bid indices 0 (specStage spec)])
              sent <- try $ sendMessages (linkSender l) Bulk
                (encodeToWorker (RunBatch bid (specRef spec) (fromIntegral (length indices)))
                 : map (argEncoder . specArg spec) indices)
              case sent of
                Right () -> if null (lsRequeued st) then pure st else noteRerun t wid ranges st
                Left (e :: SomeException) -> do
                  -- part of the batch went out: the worker's stream is spoilt
                  st' <- loseWorker t wid "an argument threw while it was being sent" st
                  abortRunning st' (\name -> ArgumentError (firstTask ranges) name (displayException e))
        _ -> pure st
      AcceptResults _ ranges -> case lsRunning st of
        Just r -> do
          accepted <- tryUser (specAccept (runSpec r) ranges)
          case accepted of
            Right () -> pure st
            Left why -> abortRunning st (\name -> ResultDecodeError (firstTask ranges) name why)
        _ -> pure st
      DropResults _ -> pure st
      FinishJob jid stats -> finish jid (const (Right stats)) st
      AbortJob jid failure _ -> finish jid (Left . toError failure) st

    -- evaluate every argument first, so one that throws ends the job
    -- before any of its batch is sent
    checkArgs spec = goArgs
      where
        goArgs [] = pure (Right ())
        goArgs (i : is) = do
          ok <- tryUser (specCheck spec i)
          case ok of
            Left why -> pure (Left (i, why))
            Right () -> goArgs is

    -- end the running job with an error
    abortRunning st mkError = case lsRunning st of
      Just r -> do
        t <- monotonicSeconds
        let (s', _) = step t (JobCancelled (runId r)) (lsSched st)
        putMVar (runReply r) (Left (mkError (refName (specRef (runSpec r)))))
        pure st { lsSched = s', lsRunning = Nothing }
      Nothing -> pure st

    finish jid result st = case lsRunning st of
      Just r | runId r == jid -> do
        putMVar (runReply r) (result (refName (specRef (runSpec r))))
        pure st { lsRunning = Nothing }
      _ -> pure st

    toError failure name = case failure of
      TaskError i msg -> TaskFailed i name msg
      FunctionRefused why -> RemoteFunctionError name why
      NoWorkersLeft -> AllWorkersLost "the cluster has no live worker"

    -- Log when tasks of a lost worker are sent to another one.
    noteRerun t wid ranges st = do
      let overlaps rs = or [ lo < hi' && lo' < hi | Range lo hi <- ranges, Range lo' hi' <- rs ]
          (hit, rest) = partition (\(_, _, rs) -> overlaps rs) (lsRequeued st)
      forM_ hit $ \(lostWid, lostAt, _) ->
        configLog cfg ("herd: tasks of lost worker " ++ show lostWid ++ " re-sent to worker "
                       ++ show wid ++ " " ++ showMs (t - lostAt) ++ " after the loss was noticed")
      pure st { lsRequeued = rest }
    showMs secs = show (round (secs * 1000) :: Int) ++ " ms"

    firstTask ranges = case ranges of { (Range lo _ : _) -> lo; [] -> 0 }

    dropLink l = do
      atomically $ writeTQueue (linkOutbox l) Nothing
      removeLink (clPoller cluster) (lentWorker (linkLent l)) (linkConn l)
      closeConnection (linkConn l)
      mapM_ cancel (linkThreads l)

-- Run an action, catching what it throws except asynchronous exceptions
-- (a send fails with an 'IOException' on a socket, a 'TransportError' on a
-- shared ring).
trySync :: IO a -> IO (Either SomeException a)
trySync act = do
  r <- try act
  case r of
    Left e | Just (_ :: SomeAsyncException) <- fromException e -> throwIO e
    _ -> pure r

-- One frame read from a worker by the cluster's reading thread: check the
-- packet's structure, count it, and hand its messages to the loop.
deliver :: Cluster -> WorkerId -> Connection -> IORef PeerStats -> B.ByteString -> IO (Either String ())
deliver cluster wid conn received packet =
  case splitPacket (configMaxFrameBytes (clConfig cluster) `div` 5) packet of
    Left why -> pure (Left ("bad packet from " ++ connPeer conn ++ ": " ++ why))
    Right msgs -> do
      modifyIORef' received (countReceived (length msgs) (B.length packet))
      atomically (writeTQueue (clInbox cluster) (Received wid msgs))
      pure (Right ())

writerThread :: Cluster -> WorkerId -> Connection -> TQueue (Maybe B.ByteString) -> IORef Int -> IO ()
writerThread cluster wid conn outbox queued = do
  outcome <- trySync loop
  case outcome of
    Left e -> atomically $ writeTQueue (clInbox cluster) (Lost wid ("send failed: " ++ displayException e))
    Right () -> pure ()
  where
    loop = do
      next <- atomically (readTQueue outbox)
      case next of
        Just bytes -> do
          sendRaw conn bytes
          atomicModifyIORef' queued (\k -> (k - B.length bytes, ()))
          loop
        Nothing -> pure ()

-- | Open a stream process of this reference on the least loaded worker.
-- Returns its number and the sender to its worker.
openStream :: Cluster -> TaskRef -> StreamEnds -> IO (Word64, Sender)
openStream cluster ref ends = do
  closed <- readTVarIO (clClosed cluster)
  when closed $ throwIO ClusterClosed
  sid <- atomicModifyIORef' (clNextJob cluster) (\n -> (n + 1, n))
  reply <- newEmptyMVar
  atomically $ writeTQueue (clInbox cluster) (OpenStream sid ref ends reply)
  either throwIO (\s -> pure (sid, s)) =<< takeMVar reply

-- | Stop a stream process early: its worker stops it, and late output is
-- dropped.
closeStream :: Cluster -> Word64 -> IO ()
closeStream cluster sid = atomically $ writeTQueue (clInbox cluster) (CloseStream sid)

-- | The cluster's configuration (after validation).
clusterConfig :: Cluster -> Config
clusterConfig = clConfig

-- | Packet statistics of each connected worker's link, both directions,
-- since it joined.
clusterPacketStats :: Cluster -> IO [(WorkerId, PeerStats)]
clusterPacketStats c = do
  peers <- M.toList <$> readTVarIO (clPeers c)
  forM peers $ \(wid, (sender, received)) -> do
    sent <- senderStats sender
    got <- readIORef received
    pure (wid, sent { packetsReceived = packetsReceived got, messagesReceived = messagesReceived got
                    , bytesReceived = bytesReceived got, maxReceivedPerPacket = maxReceivedPerPacket got })

-- | Run one job on the cluster and wait for it. Jobs on one cluster run one
-- at a time; a caller interrupted by an exception cancels its job.
runJob :: Cluster -> JobSpec -> IO (Either HerdError JobStats)
runJob cluster spec = withMVar (clJobLock cluster) $ \_ -> do
  closed <- readTVarIO (clClosed cluster)
  when closed $ throwIO ClusterClosed
  jid <- atomicModifyIORef' (clNextJob cluster) (\n -> (n + 1, n))
  reply <- newEmptyMVar
  atomically $ writeTQueue (clInbox cluster) (Submit jid spec reply)
  takeMVar reply `onException` atomically (writeTQueue (clInbox cluster) (Cancel jid))

-- | The evolve API's population on this cluster.
clusterRegistry :: Cluster -> MVar Registry
clusterRegistry = clRegistry

-- | Run an action that reads the workers' links itself (one of the evolve
-- API's master loops), while no job runs. The cluster's reading thread
-- stops between frames first. The action returns the workers it found
-- lost, with why; they are reported to the master loop, and the reading
-- thread resumes. Messages the action does not handle go to the master loop
-- through the function it is given with the links.
withLentLinks :: Cluster -> (([LentLink], WorkerId -> [B.ByteString] -> IO ()) -> IO (r, [(WorkerId, String)]))
              -> IO r
withLentLinks cluster body = withMVar (clJobLock cluster) $ \_ -> do
  closed <- readTVarIO (clClosed cluster)
  when closed $ throwIO ClusterClosed
  reply <- newEmptyMVar
  atomically $ writeTQueue (clInbox cluster) (Lend reply)
  links <- takeMVar reply
  let forward wid msgs = atomically $ writeTQueue (clInbox cluster) (Received wid msgs)
      report lost = forM_ lost $ \(wid, why) -> atomically $ writeTQueue (clInbox cluster) (Lost wid why)
  paused <- pausePoller (clPoller cluster)
  unless paused $ do
    resumePoller (clPoller cluster)
    throwIO (AllWorkersLost "the master's reading thread did not pause within 5 s")
  outcome <- try (body (links, forward)) `finally` resumePoller (clPoller cluster)
  case outcome of
    Left (e :: SomeException) -> throwIO e
    Right (r, lost) -> report lost >> pure r
