{-# LANGUAGE ScopedTypeVariables #-}
{-# LANGUAGE BlockArguments #-}
-- | The worker side: connect to a master, prove the build, run batches.
--
-- A worker is the user's own executable started in worker mode (by
-- 'Herd.withCluster' through environment variables, or by hand with
-- @herd worker --connect HOST:PORT@). It never runs the program's body. It
-- answers every batch, either with one outcome per task (stopping at the
-- first task that throws) or with a refusal naming the function when its
-- static key or types do not match. It exits when the master closes the
-- connection, asks it to stop, when the link has been silent for the
-- master's liveness timeout (the kernel's keepalive probes go unanswered),
-- or (for workers started by herd) when the process that started it dies,
-- even mid-task: a C thread watches a pipe from it, so this holds while a
-- non-allocating computation keeps the Haskell scheduler from running.
-- Before anything else it proves the shared secret and checks the
-- master's proof ("Herd.Transport.Auth").
module Herd.Node
  ( serveIfWorker
  , serveIfWorkerWith
  , SimulatedHost (..)
  , runWorker
  , WorkerOptions (..)
  , MasterAddress (..)
  , parseMasterAddress
  , showMasterAddress
  , parseHostPort
  ) where

import Herd.Sys.Log (logToStderr)
import Herd.Core.Config.Parse (parseSimulatedCount, parseTasksPerNode)
import Herd.Node.Address
import Herd.Sys.Trace (tracing)
import Control.Exception
import Control.Concurrent (forkIO, myThreadId)
import Control.Monad (forM_, unless, void, when)
import qualified Data.Text as T
import Herd.Transport.Auth
import Herd.Sys.BuildId (buildIdentity)
import Herd.Node.Agent (parseAgentCount, runAgent, runAgentByHand)
import Herd.Sys.Env
import Herd.Node.Topology (physicalCores)
import Herd.Sys.Calls (exitWhenStdinCloses, niceProcessThreads, pinProcessThreads)
import Herd.Transport
import Herd.Transport.Tcp (connectTcp)
import Herd.Transport.Unix (connectUnix)
import Herd.Transport.Shm (upgradeWorker)
import Herd.Transport.Tls (tlsConnect)
import Herd.Core.Wire
import Herd.Node.Join (Joined (..), joinMaster)
import Herd.Sys.HeapReserve (defaultWorkerHeapReserve, parseWorkerHeapReserve, reserveHeap, warmNursery)
import Herd.Node.Worker (serve)
import System.Posix.Unistd (getSystemID, nodeName)
import System.Environment (lookupEnv)
import System.Exit
import System.IO
import System.Posix.Process (getProcessID)
import Text.Read (readMaybe)

-- | How a worker runs.
data WorkerOptions = WorkerOptions
  { workerAddress    :: MasterAddress -- ^ where the master listens
  , workerCpu        :: Maybe Int     -- ^ CPU to pin to
  , workerWatchStdin :: Bool          -- ^ exit when standard input closes
  , workerSecret     :: SecretSource  -- ^ the secret to prove to the master
  , workerGroup      :: String        -- ^ the launch it belongs to (empty: by hand)
  } deriving (Eq, Show)


-- | If this process was started as a herd worker (or as the per-host agent
-- of an ssh launch), serve the master and exit without returning;
-- otherwise return at once. 'Herd.withCluster' calls it first; call it at
-- the top of @main@ if @main@ does work before that.
serveIfWorker :: IO ()
serveIfWorker = serveIfWorkerWith Nothing

-- | What a simulated host needs.
data SimulatedHost = SimulatedHost
  { simHost    :: String  -- ^ the master's host
  , simPort    :: Int     -- ^ and TCP port
  , simWorkers :: Int     -- ^ workers to play
  , simGroup   :: String  -- ^ the launch they belong to, reported in each hello
  , simSecret  :: Secret
  , simHostPid :: Int     -- ^ reported as each worker's process
  , simHostName :: String -- ^ reported as each worker's host
  }

-- | 'serveIfWorker', given what plays simulated hosts: the benchmark and
-- test harness ("Herd.Simulate.Host", in @herd-testkit@) that programs
-- which start simulated workers ('Herd.Settings.configSimulatedWorkers')
-- pass here. A process asked to play simulated workers without it exits
-- with an error that says so.
serveIfWorkerWith :: Maybe (SimulatedHost -> IO ()) -> IO ()
serveIfWorkerWith player = do
  connectTo <- lookupEnv envConnect
  case connectTo of
    Nothing -> pure ()
    Just addr -> do
      address <- either (die' . ((envConnect ++ ": ") ++)) pure (parseMasterAddress addr)
      cpuText <- lookupEnv envCpu
      cpu <- case cpuText of
        Nothing -> pure Nothing
        Just t | Just n <- readMaybe t, n >= 0 -> pure (Just n)
               | otherwise -> die' (envCpu ++ ": not a CPU number: " ++ show t)
      watch <- (== Just "1") <$> lookupEnv envWatchStdin
      fromStdin <- (== Just "1") <$> lookupEnv envSecretStdin
      secretFile <- lookupEnv envSecretFile
      source <- if not fromStdin then pure (maybe SecretAuto SecretFile secretFile) else do
        -- unbuffered, so nothing past the line is taken from the pipe
        hSetBuffering stdin NoBuffering
        line <- try (hGetLine stdin)
        case line of
          Left (e :: IOException) -> die' ("no secret on standard input: " ++ displayException e)
          Right l -> either (die' . ("the secret on standard input: " ++)) (pure . SecretGiven)
                            (secretFromLine l)
      group <- maybe "" id <$> lookupEnv envGroup
      cpu' <- if cpu /= Nothing || group /= "slurm" then pure cpu else slurmCpu
      agent <- lookupEnv envAgent
      simulated <- lookupEnv envSimulated
      case (agent, simulated) of
        (Just countText, _) -> do
          count <- if countText /= "slurm" then either (die' . ((envAgent ++ ": ") ++)) pure (parseAgentCount countText)
                   else slurmNodeTasks >>= either (die' . ((envAgent ++ "=slurm: ") ++)) (pure . Just)
          secret <- loadSecret source >>= either (die' . ("no usable secret: " ++)) pure
          -- an ssh launch hands the secret over the session, which is the
          -- agent's lifeline; an agent started by hand lives while its
          -- workers do
          if fromStdin then runAgent addr count group secret else do
            host <- nodeName <$> getSystemID
            runAgentByHand addr count (if null group then "agent:" ++ host else group) secret
        (Nothing, Just countText) -> do
          count <- either (die' . ((envSimulated ++ ": ") ++)) pure (parseSimulatedCount countText)
          (host, port) <- case address of
            TcpAddress h p -> pure (h, p)
            _ -> die' (envSimulated ++ ": a simulated host connects over TCP, not to " ++ addr)
          secret <- loadSecret source >>= either (die' . ("no usable secret: " ++)) pure
          when watch $ do
            rc <- exitWhenStdinCloses
            when (rc /= 0) $ logToStderr ("herd simulated host: cannot watch the master's pipe (error " ++ show rc ++ ")")
          pid <- getProcessID
          name <- nodeName <$> getSystemID
          play <- maybe (die' (envSimulated ++ ": this program cannot play simulated workers; they are a harness "
                               ++ "of the herd executable (herd bench pfilter --simulate)")) pure player
          play (SimulatedHost host port count group secret (fromIntegral pid) name)
            `catch` \(e :: SomeException) -> case fromException e of
              Just (ec :: ExitCode) -> throwIO ec
              Nothing -> do
                logToStderr ("herd simulated host: " ++ displayException e)
                exitWith (ExitFailure 3)
        (Nothing, Nothing) -> runWorker (WorkerOptions address cpu' watch source group)
      exitSuccess
  where die' msg = logToStderr ("herd worker: " ++ msg) >> exitWith (ExitFailure 2)

-- Under srun, as a node's agent: the allocation's tasks on this node.
slurmNodeTasks :: IO (Either String Int)
slurmNodeTasks = do
  counts <- maybe (Left (envSlurmTasks ++ " is not set")) parseTasksPerNode <$> lookupEnv envSlurmTasks
  node <- (>>= readMaybe) <$> lookupEnv "SLURM_NODEID"
  pure $ case (counts, node) of
    (Left why, _) -> Left why
    (_, Nothing) -> Left "SLURM_NODEID is not set"
    (Right cs, Just i) | i >= 0, i < length cs -> Right (cs !! i)
                       | otherwise -> Left ("SLURM_NODEID " ++ show i ++ " is beyond the allocation's " ++ show (length cs) ++ " nodes")

-- Under srun: the physical core numbered by this task's SLURM_LOCALID among
-- those the allocation lets it use.
slurmCpu :: IO (Maybe Int)
slurmCpu = do
  localId <- (>>= readMaybe) <$> lookupEnv "SLURM_LOCALID"
  cores <- physicalCores
  pure $ case localId of
    Just i | i >= 0, not (null cores) -> Just (cores !! (i `mod` length cores))
    _ -> Nothing

-- | Run a worker until the master lets it go. Exits the process with a
-- non-zero code if the master refuses it, cannot prove the secret, or
-- breaks the protocol.
runWorker :: WorkerOptions -> IO ()
runWorker opts = do
  pinned <- prepareProcess opts
  secret <- loadSecret (workerSecret opts) >>= either (failWith 2 . ("no usable secret: " ++)) pure
  build <- buildIdentity
  let connect = case workerAddress opts of
        TcpAddress h p -> connectTcp h p
        TlsAddress h p -> connectTcp h p
        UnixAddress n -> connectUnix n
        ShmAddress n -> connectUnix n
      wantsShm = case workerAddress opts of
        ShmAddress _ -> ShmLink
        _ -> DirectLink
  conn <- connect `catch` \(e :: IOException) ->
    failWith 3 ("cannot connect to master at " ++ where_ ++ ": " ++ displayException e)
  pid <- getProcessID
  host <- nodeName <$> getSystemID
  let hello = WorkerHello protocolVersion build (fromIntegral pid) (T.pack host) (T.pack (workerGroup opts))
                          wantsShm (maybe noCpu fromIntegral pinned)
  -- over TLS the proofs of the secret are bound to the master's certificate
  tls <- case workerAddress opts of
    TlsAddress h _ -> Just <$> (tlsConnect h conn `catch` \(e :: SomeException) ->
                                 failWith 3 ("TLS with the master at " ++ where_ ++ " failed: " ++ displayException e))
    _ -> pure Nothing
  let (link0, binding) = maybe (conn, mempty) id tls
  touchWorkerReserve
  joined <- joinMaster secret binding build where_ hello link0
  case joined of
    Left why -> failWith 3 why
    Right j -> do
      rc <- setLiveness (joinedLiveness j) link0
      when (rc /= 0) $ warn ("cannot set keepalive on the master's link (errno " ++ show rc ++ ")")
      link <- if wantsShm /= ShmLink then pure link0 else
        upgradeWorker 10 conn `catch` \(e :: SomeException) ->
          failWith 3 ("cannot set up shared memory with the master at " ++ where_ ++ ": " ++ displayException e)
      serve link (joinedId j) (joinedMaxFrame j) (joinedPolicy j) (joinedWindow j) `finally` closeConnection link
  where
    where_ = showMasterAddress (workerAddress opts)
    warn = warnWorker

-- What a worker process does before it connects: watch the master's
-- pipe, take its nice value, pin itself to its CPU. The CPU it is
-- pinned to, if it could be.
prepareProcess :: WorkerOptions -> IO (Maybe Int)
prepareProcess opts = do
  when (workerWatchStdin opts) $
    if tracing
      then do
        -- a traced worker leaves through the RTS's own exit, which writes
        -- out its eventlog; the C watchdog's _exit would lose the last events
        main <- myThreadId
        void $ forkIO $ do
          _ <- try (hIsEOF stdin >>= \eof -> unless eof (void (hGetContents stdin))) :: IO (Either IOException ())
          throwTo main ExitSuccess
      else do
        rc <- exitWhenStdinCloses
        when (rc /= 0) $ warnWorker ("cannot watch the master's pipe (error " ++ show rc ++ ")")
  niceText <- lookupEnv envNice
  forM_ niceText $ \t -> case readMaybe t of
    Just n | n >= 0 && n <= (19 :: Int) -> do
      rc <- niceProcessThreads n
      when (rc /= 0) $ warnWorker ("cannot set nice value " ++ show n ++ " (errno " ++ show rc ++ ")")
    _ -> warnWorker (envNice ++ ": not a nice value from 0 to 19: " ++ show t ++ "; ignored")
  case workerCpu opts of
    Nothing -> pure Nothing
    Just cpu -> do
      rc <- pinProcessThreads cpu
      if rc == 0 then pure (Just cpu) else do
        warnWorker ("cannot pin to CPU " ++ show cpu ++ " (errno " ++ show rc ++ "); running unpinned")
        pure Nothing

-- A warning of the worker's, on its standard error.
warnWorker :: String -> IO ()
warnWorker msg = logToStderr ("herd worker: " ++ msg)

-- The heap reserve the worker touches before it joins (the nursery's
-- first pass faults in every page of it: paid before the master counts
-- this worker in, not during the first job), from its variable.
touchWorkerReserve :: IO ()
touchWorkerReserve = do
  reserveText <- lookupEnv envHeapReserve
  reserve <- case traverse parseWorkerHeapReserve reserveText of
    Left why -> failWith 2 (envHeapReserve ++ ": " ++ why)
    Right r -> pure (maybe defaultWorkerHeapReserve id r)
  -- and the heap its collections will reach for (see 'defaultWorkerHeapReserve')
  if reserve > 0 then reserveHeap (reserve * 1024 * 1024) else warmNursery

failWith :: Int -> String -> IO a
failWith code msg = logToStderr ("herd worker: " ++ msg) >> exitWith (ExitFailure code)

