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
-- unfinished tasks run elsewhere. New connections must complete the
-- handshake within 'configHandshakeTimeout', each in its own thread, so a
-- stalled or hostile peer cannot hold up the others.
module Herd.Master
  ( -- * Clusters
    Cluster
  , withCluster
  , clusterAddress
  , clusterWorkerCount
  , waitForWorkers
  , WorkerInfo (..)
  , clusterWorkerInfo
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
import Herd.BuildId (buildIdentity)
import Herd.Config
import Herd.Error
import Herd.Launch.Local
import Herd.Scheduler
import Herd.Task (TaskRef (..))
import Herd.Transport.Tcp
import Herd.Wire
import Herd.Worker (serveIfWorker)
import Network.Socket (Socket, close)
import System.Process (getProcessExitCode)
import Herd.Clock (monotonicSeconds)
import System.Timeout (timeout)

-- | What the master knows about a connected worker.
data WorkerInfo = WorkerInfo
  { infoId   :: !WorkerId
  , infoPid  :: !Int
  , infoHost :: !String
  , infoPeer :: !String   -- ^ the connection's address
  } deriving (Eq, Show)

-- | A running set of workers and the master that drives them.
data Cluster = Cluster
  { clConfig   :: !Config
  , clInbox    :: !(TQueue Input)
  , clJobLock  :: !(MVar ())
  , clPort     :: !Int
  , clWorkers  :: !(TVar (M.Map WorkerId WorkerInfo))
  , clNextJob  :: !(IORef Word64)
  , clClosed   :: !(TVar Bool)
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
  }

-- | The address workers connect to: host and port.
clusterAddress :: Cluster -> (String, Int)
clusterAddress c = (configListenHost (clConfig c), clPort c)

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
-- (throwing 'ConfigError'), listens, starts the local workers the
-- configuration asks for and waits for them to connect (throwing
-- 'LaunchError' if they do not within 'configStartTimeout').
withCluster :: Config -> (Cluster -> IO r) -> IO r
withCluster config body = do
  serveIfWorker
  cfg <- either throwIO pure (validateConfig config)
  plan <- planCpus cfg
  bracket (listenTcp (configListenHost cfg) (configListenPort cfg)) close $ \lsock -> do
    port <- listenPort lsock
    cluster <- Cluster cfg <$> newTQueueIO <*> newMVar () <*> pure port <*> newTVarIO M.empty
                       <*> newIORef 1 <*> newTVarIO False
    build <- buildIdentity
    withAsync (masterLoop cluster) $ \loop ->
      withAsync (acceptLoop cluster build lsock) $ \_ ->
        bracket (spawnLocalWorkers cfg port plan) stopLocalWorkers $ \locals -> do
          link loop
          ok <- waitForWorkers cluster (length plan) (configStartTimeout cfg)
          unless ok $ do
            have <- clusterWorkerCount cluster
            exited <- length . filter (/= Nothing) <$> mapM (getProcessExitCode . localHandle) locals
            throwIO (LaunchError (show have ++ " of " ++ show (length plan) ++ " local workers connected within "
                                  ++ show (configStartTimeout cfg) ++ " s (" ++ show exited
                                  ++ " exited early; their errors are on standard error above)"))
          body cluster `finally` shutdown cluster

-- Mark the cluster closed and ask every worker to stop.
shutdown :: Cluster -> IO ()
shutdown cluster = do
  atomically (writeTVar (clClosed cluster) True)
  done <- newEmptyMVar
  atomically $ writeTQueue (clInbox cluster) (Stop done)
  void (timeout 2000000 (takeMVar done))

-- Accept connections forever; each handshake runs in its own thread.
acceptLoop :: Cluster -> B.ByteString -> Socket -> IO ()
acceptLoop cluster build lsock = do
  nextId <- newIORef (1 :: Int)
  forever $ do
    conn <- acceptConnection lsock
    void $ forkIO $ handshake cluster build nextId conn

handshake :: Cluster -> B.ByteString -> IORef Int -> Connection -> IO ()
handshake cluster build nextId conn = do
  let cfg = clConfig cluster
      logLine = configLog cfg
      refuse why = do
        logLine ("herd: refused connection from " ++ connPeer conn ++ ": " ++ why)
        _ <- try (sendFrame conn (BL.fromStrict (encodeMasterReply (Refused (T.pack why)))))
               :: IO (Either SomeException ())
        closeConnection conn
  r <- try (timeout (round (configHandshakeTimeout cfg * 1e6)) (recvFrame handshakeFrameLimit conn))
  case r of
    Left (e :: SomeException) -> refuse ("bad handshake frame: " ++ displayException e)
    Right Nothing -> refuse ("no handshake within " ++ show (configHandshakeTimeout cfg) ++ " s")
    Right (Just Nothing) -> logLine ("herd: connection from " ++ connPeer conn ++ " closed before its handshake")
                            >> closeConnection conn
    Right (Just (Just bytes)) -> case decodeWorkerHello bytes >>= \h -> fmap (const h) (checkHello build h) of
      Left why -> refuse why
      Right hello -> do
        wid <- atomicModifyIORef' nextId (\n -> (n + 1, n))
        sent <- try (sendFrame conn (BL.fromStrict (encodeMasterReply
                       (Welcome build (fromIntegral wid) (fromIntegral (configMaxFrameBytes cfg))))))
        case sent of
          Left (e :: SomeException) -> logLine ("herd: lost " ++ connPeer conn ++ " during handshake: "
                                                 ++ displayException e) >> closeConnection conn
          Right () -> atomically $ writeTQueue (clInbox cluster) $
            Connected wid conn (WorkerInfo wid (fromIntegral (helloPid hello)) (T.unpack (helloHost hello))
                                           (connPeer conn))

-- The loop: the only owner of the scheduler state.
masterLoop :: Cluster -> IO ()
masterLoop cluster = go (LoopState emptySched M.empty Nothing False) `finally` pure ()
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
            unless (lsStopping st) $
              configLog (clConfig cluster) ("herd: worker " ++ show wid ++ " lost: " ++ why)
            dropLink l
            atomically $ modifyTVar' (clWorkers cluster) (M.delete wid)
            drive t (WorkerLost wid) st { lsLinks = M.delete wid (lsLinks st) } Nothing
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
        Message wid msg -> case msg of
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
          pure st
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
