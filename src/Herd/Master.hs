{-# LANGUAGE ScopedTypeVariables #-}
-- | The master: a cluster of workers, and the loop that drives the pure
-- scheduler from real events.
--
-- One thread (the loop) owns the scheduler state and all decisions. Every
-- worker connection has a reader thread, which turns frames into events,
-- and a writer thread, which drains that worker's outbox, so a slow worker
-- never blocks the loop. A connection that sends bytes that do not decode,
-- an oversized or truncated frame, or a reply that does not match its batch
-- is logged and closed; the scheduler sees the worker as lost and its
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
    -- * Jobs (used by "Herd.Farm")
  , JobSpec (..)
  , runJob
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
import Herd.Task (TaskRef (..))
import Herd.Transport.Tcp
import Herd.Wire
import Herd.Worker (serveIfWorker)
import Network.Socket (Socket, close)
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
  , clNextJob  :: !(IORef Word64)
  , clClosed   :: !(TVar Bool)
  , clAdvertise :: !String
  , clCounters :: !(IORef ConnectionCounters)
  }

-- | A job as the loop runs it: how to encode tasks and where results go.
data JobSpec = JobSpec
  { specTasks    :: !Int
  , specRef      :: !TaskRef
  , specEncode   :: [Range] -> B.ByteString
    -- ^ the encoded arguments of these tasks, in order, as one list
  , specDeliver  :: [Range] -> B.ByteString -> IO (Maybe HerdError)
    -- ^ take the encoded results of these tasks; 'Just' aborts the job
  }

data Input
  = Connected !WorkerId !Connection !WorkerInfo
  | Message !WorkerId !FromWorker
  | Lost !WorkerId !String
  | Submit !JobId !JobSpec !(MVar (Either HerdError JobStats))
  | Cancel !JobId
  | Stop !(MVar ())

data Link = Link
  { linkConn    :: !Connection
  , linkOutbox  :: !(TQueue (Maybe BL.ByteString))
  , linkThreads :: ![Async ()]
  }

data Running = Running
  { runId    :: !JobId
  , runSpec  :: !JobSpec
  , runReply :: !(MVar (Either HerdError JobStats))
  }

data LoopState = LoopState
  { lsSched   :: !Sched
  , lsLinks   :: !(M.Map WorkerId Link)
  , lsRunning :: !(Maybe Running)
  , lsStopping :: !Bool   -- ^ shutting down: losing workers is expected
  , lsRequeued :: ![(WorkerId, Double, [Range])]
    -- ^ tasks of lost workers not yet sent elsewhere, for the log
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
  bracket (listenTcp host (configListenPort cfg)) close $ \lsock -> do
    port <- listenPort lsock
    advertise <- case configAdvertiseHost cfg of
      Just a -> pure a
      Nothing | isWildcard host -> nodeName <$> getSystemID
              | otherwise -> pure host
    cluster <- Cluster cfg <$> newTQueueIO <*> newMVar () <*> pure port <*> newTVarIO M.empty
                       <*> newIORef 1 <*> newTVarIO False <*> pure advertise <*> newIORef noCounters
    build <- buildIdentity
    withAsync (masterLoop cluster) $ \loop ->
      withAsync (acceptLoop cluster secret build lsock) $ \_ -> do
        link loop
        when (not (isLoopback host) || (null plan && not (hasRemoteLaunch cfg))) $ do
          joinCmd <- clusterJoinCommand cluster
          configLog cfg ("herd: master listening on " ++ host ++ ":" ++ show port
                         ++ "; to add a worker run: " ++ joinCmd)
        let localAddr = (if isWildcard host then "127.0.0.1" else host) ++ ":" ++ show port
            remoteAddr = advertise ++ ":" ++ show port
        bracket (startLaunches cfg secret plan slurmTasks localAddr remoteAddr) (mapM_ launchStop) $
          \launches -> do
            awaitLaunches cluster launches
            body cluster `finally` shutdown cluster
  where
    isWildcard h = h `elem` ["0.0.0.0", "::", "*"]
    isLoopback h = h `elem` ["127.0.0.1", "::1", "localhost"]

-- Start every launch the configuration asks for; none waits for another.
startLaunches :: Config -> Secret -> [Maybe Int] -> Maybe Int -> String -> String -> IO [Launch]
startLaunches cfg secret plan slurmTasks localAddr remoteAddr = do
  locals <- if null plan then pure [] else do
    ws <- spawnLocalWorkers (LocalLaunch localAddr (configWorkerRtsOptions cfg) "local" secret) plan
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
acceptLoop :: Cluster -> Secret -> B.ByteString -> Socket -> IO ()
acceptLoop cluster secret build lsock = do
  nextId <- newIORef (1 :: Int)
  pending <- newIORef (0 :: Int)
  let cfg = clConfig cluster
      cap = configMaxPendingHandshakes cfg
  forever $ do
    accepted <- try (acceptConnection lsock)
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
      Right hello -> do
        wid <- atomicModifyIORef' nextId (\n -> (n + 1, n))
        sent <- try (sendFrame conn (BL.fromStrict (encodeMasterReply
                       (Welcome build (fromIntegral wid) (fromIntegral (configMaxFrameBytes cfg))
                                (round (configLivenessTimeout cfg * 1000))))))
        case sent of
          Left (e :: SomeException) -> failed ("lost during handshake: " ++ displayException e)
                                       >> closeConnection conn
          Right () -> do
            bump cluster (\c -> c { countJoined = countJoined c + 1 })
            atomically $ writeTQueue (clInbox cluster) $
              Connected wid conn (WorkerInfo wid (fromIntegral (helloPid hello)) (T.unpack (helloHost hello))
                                             (connPeer conn) (T.unpack (helloGroup hello)))

-- The loop: the only owner of the scheduler state.
masterLoop :: Cluster -> IO ()
masterLoop cluster = go (LoopState emptySched M.empty Nothing False [])
  where
    go st = do
      input <- atomically (readTQueue (clInbox cluster))
      st' <- handle st input
      go st'

    handle st input = do
      t <- monotonicSeconds
      case input of
        Connected wid conn info -> do
          outbox <- newTQueueIO
          reader <- async (readerThread cluster wid conn)
          writer <- async (writerThread cluster wid conn outbox)
          atomically $ modifyTVar' (clWorkers cluster) (M.insert wid info)
          let st1 = st { lsLinks = M.insert wid (Link conn outbox [reader, writer]) (lsLinks st) }
          drive t (WorkerJoined wid) st1 Nothing
        Lost wid why -> case M.lookup wid (lsLinks st) of
          Nothing -> pure st
          Just l -> do
            let unfinished = concatMap snd (outstandingFor wid (lsSched st))
            unless (lsStopping st) $
              configLog (clConfig cluster) ("herd: worker " ++ show wid ++ " lost: " ++ why
                ++ (if null unfinished then "" else "; its " ++ show (sum (map rangeSize unfinished))
                                                     ++ " unfinished tasks will run elsewhere"))
            dropLink l
            atomically $ modifyTVar' (clWorkers cluster) (M.delete wid)
            let requeued = [ (wid, t, unfinished) | not (null unfinished), not (lsStopping st) ]
            drive t (WorkerLost wid) st { lsLinks = M.delete wid (lsLinks st)
                                        , lsRequeued = requeued ++ lsRequeued st } Nothing
        Submit jid spec reply ->
          drive t (JobSubmitted jid (specTasks spec) (configBatching (clConfig cluster))
                                (configBatchTarget (clConfig cluster)))
                st { lsRunning = Just (Running jid spec reply) } Nothing
        Cancel jid -> case lsRunning st of
          Just r | runId r == jid -> do
            let (s', _) = step t (JobCancelled jid) (lsSched st)
            pure st { lsSched = s', lsRunning = Nothing }
          _ -> pure st
        Stop done -> do
          forM_ (M.elems (lsLinks st)) $ \l -> atomically $ do
            writeTQueue (linkOutbox l) (Just (encodeToWorker Shutdown))
            writeTQueue (linkOutbox l) Nothing
          putMVar done ()
          pure st { lsStopping = True }
        Message wid msg -> bump cluster (\c -> c { countWorkerMessages = countWorkerMessages c + 1 }) >> case msg of
          BatchRejected bid why -> drive t (BatchRefused wid bid (T.unpack why)) st Nothing
          BatchResult bid busyNs outcome -> case lookup bid (outstandingFor wid (lsSched st)) of
            Nothing -> drive t (BatchCompleted wid bid 0 Nothing) st Nothing  -- stale: dropped
            Just ranges
              | Left (pos, _) <- outcome, fromIntegral pos >= batchSize ranges -> do
                  atomically $ writeTQueue (clInbox cluster)
                    (Lost wid ("bad batch result: failure at position " ++ show pos
                               ++ " of a batch of " ++ show (batchSize ranges)))
                  pure st
              | otherwise ->
                  let failure = either (\(pos, msg) -> Just (fromIntegral pos, T.unpack msg)) (const Nothing) outcome
                  in drive t (BatchCompleted wid bid (fromIntegral busyNs / 1e9) failure) st
                           (either (const Nothing) Just outcome)

    -- Step the scheduler and carry out its commands.
    drive t ev st outcomes = do
      let (s', cmds) = step t ev (lsSched st)
      foldM (execute t outcomes) st { lsSched = s' } cmds

    execute t outcomes st cmd = case cmd of
      SendBatch wid bid ranges -> case (M.lookup wid (lsLinks st), lsRunning st) of
        (Just l, Just r) -> do
          let msg = RunBatch bid (specRef (runSpec r)) (fromIntegral (batchSize ranges))
                             (specEncode (runSpec r) ranges)
          atomically $ writeTQueue (linkOutbox l) (Just (encodeToWorker msg))
          if null (lsRequeued st) then pure st else noteRerun t wid ranges st
        _ -> pure st
      AcceptResults _ ranges -> case (lsRunning st, outcomes) of
        (Just r, Just blob) -> do
          problem <- specDeliver (runSpec r) ranges blob
                       `catch` \(e :: SomeException) ->
                         pure (Just (ResultDecodeError (firstTask ranges) (refName (specRef (runSpec r)))
                                                       (displayException e)))
          case problem of
            Nothing -> pure st
            Just err -> do
              let (s', _) = step t (JobCancelled (runId r)) (lsSched st)
              putMVar (runReply r) (Left err)
              pure st { lsSched = s', lsRunning = Nothing }
        _ -> pure st
      DropResults _ -> pure st
      FinishJob jid stats -> finish jid (const (Right stats)) st
      AbortJob jid failure _ -> finish jid (Left . toError failure) st

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
        configLog (clConfig cluster) ("herd: tasks of lost worker " ++ show lostWid ++ " re-sent to worker "
                                      ++ show wid ++ " " ++ showMs (t - lostAt) ++ " after the loss was noticed")
      pure st { lsRequeued = rest }
    showMs secs = show (round (secs * 1000) :: Int) ++ " ms"

    batchSize = sum . map rangeSize
    firstTask ranges = case ranges of { (Range lo _ : _) -> lo; [] -> 0 }

    dropLink l = do
      atomically $ writeTQueue (linkOutbox l) Nothing
      closeConnection (linkConn l)
      mapM_ cancel (linkThreads l)

readerThread :: Cluster -> WorkerId -> Connection -> IO ()
readerThread cluster wid conn = loop `catch` \(e :: SomeException) ->
    case fromException e of
      Just (_ :: AsyncException) -> throwIO e
      Nothing -> case fromException e of
        Just (_ :: SomeAsyncException) -> throwIO e
        Nothing -> lost (displayException e)
  where
    cap = configMaxFrameBytes (clConfig cluster)
    lost why = atomically $ writeTQueue (clInbox cluster) (Lost wid why)
    loop = do
      frame <- recvFrame cap conn
      case frame of
        Nothing -> lost "connection closed"
        Just bytes -> case decodeFromWorker bytes of
          Left why -> lost ("undecodable message from " ++ connPeer conn ++ ": " ++ why)
          Right msg -> atomically (writeTQueue (clInbox cluster) (Message wid msg)) >> loop

writerThread :: Cluster -> WorkerId -> Connection -> TQueue (Maybe BL.ByteString) -> IO ()
writerThread cluster wid conn outbox = loop `catch` \(e :: IOException) ->
    atomically $ writeTQueue (clInbox cluster) (Lost wid ("send failed: " ++ displayException e))
  where
    loop = do
      next <- atomically (readTQueue outbox)
      case next of
        Just bytes -> sendFrame conn bytes >> loop
        Nothing -> pure ()

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
