{-# LANGUAGE ScopedTypeVariables #-}
-- | Starting local workers: the same executable, re-run in worker mode,
-- one per selected core.
--
-- Each worker gets its master's address, its CPU and its RTS options
-- through the environment (never the command line, so the program's own
-- arguments reach it unchanged), standard output sent to @/dev/null@ (a
-- worker's copy of the program must not print the master's output twice),
-- standard error shared with the master, and a pipe on standard input that
-- carries the secret in its first line and nothing after: when the master
-- (or the agent that started the worker) exits, even by SIGKILL, the kernel
-- closes that pipe and the worker exits (see "Herd.Node").
module Herd.Node.Local
  ( LocalWorker (..)
  , LocalLaunch (..)
  , planCpus
  , spawnLocalWorkers
  , spawnLocalWorker
  , spawnSimulatedHosts
  , stopLocalWorkers
  ) where

import Herd.Sys.Trace (workerEventlogOptions)
import Data.Char (isDigit)
import Control.Concurrent (threadDelay)
import Control.Exception
import Control.Monad (forM_)
import Herd.Transport.Auth (Secret, secretToLine)
import Herd.Sys.BuildId (buildHint)
import Herd.Settings
import Herd.Core.Error (HerdError (..))
import Herd.Sys.Env
import Herd.Node.Topology (allowedCpus, physicalCores)
import System.Environment (getArgs, getEnvironment, getExecutablePath)
import System.IO
import System.Posix.Signals (sigKILL, signalProcess)
import System.Process

-- | A started local worker process.
data LocalWorker = LocalWorker
  { localCpu    :: Maybe Int
  , localHandle :: ProcessHandle
  , localStdin  :: Handle   -- ^ kept open while the master lives
  }

-- | The CPU of each local worker to start (@Nothing@: unpinned), given the
-- configuration. More workers than CPUs share CPUs round robin.
planCpus :: Config -> IO [Maybe Int]
planCpus cfg = do
  cpus <- case configPinning cfg of
    PinPhysicalCores -> physicalCores
    PinLogicalCores -> allowedCpus
    PinCores cs -> do
      allowed <- allowedCpus
      case filter (`notElem` allowed) cs of
        [] -> pure cs
        bad -> throwIO (ConfigError "configPinning"
                 ("CPUs " ++ show bad ++ " are not available to this process (allowed: "
                  ++ show allowed ++ ")"))
    NoPinning -> physicalCores
  let count = case configWorkers cfg of
        Just n -> n
        Nothing | hasRemoteLaunch cfg || configSimulatedWorkers cfg > 0 -> 0
                | otherwise -> length cpus
  pure $ case configPinning cfg of
    NoPinning -> replicate count Nothing
    _ -> take count (map Just (cycle cpus))

-- | What every worker of one local launch shares.
data LocalLaunch = LocalLaunch
  { launchAddress    :: String    -- ^ @HOST:PORT@ of the master
  , launchRtsOptions :: [String]  -- ^ the workers' RTS options
  , launchGroup      :: String    -- ^ the launch's name, reported in each hello
  , launchSecret     :: Secret
  , launchNice       :: Int       -- ^ the workers' nice value (0: as the launcher)
  , launchHeapReserve :: Maybe Int
    -- ^ MiB of heap each worker touches before it joins ('Nothing': the
    -- worker's own default, 'Herd.Sys.HeapReserve.defaultWorkerHeapReserve')
  }

-- | Start one worker per planned CPU.
spawnLocalWorkers :: LocalLaunch -> [Maybe Int] -> IO [LocalWorker]
spawnLocalWorkers launch = mapM (spawnLocalWorker launch)

-- | Start one worker, pinned to this CPU if one is given.
spawnLocalWorker :: LocalLaunch -> Maybe Int -> IO LocalWorker
spawnLocalWorker launch cpu = spawnOne launch cpu [ (envCpu, show c) | Just c <- [cpu] ]

-- | Start simulated hosts ("Herd.Simulate.Host"), each playing the given
-- number of workers, connecting to the launch's address (which must be
-- TCP).
spawnSimulatedHosts :: LocalLaunch -> [Int] -> IO [LocalWorker]
spawnSimulatedHosts launch counts = mapM (\n -> spawnOne launch Nothing [(envSimulated, show n)]) counts

-- One process of this executable in a herd role, told its role by these
-- variables.
spawnOne :: LocalLaunch -> Maybe Int -> [(String, String)] -> IO LocalWorker
spawnOne launch cpu role = do
  exe <- getExecutablePath
  args <- getArgs
  baseEnv <- filter (\(k, _) -> k `notElem` ("GHCRTS" : herdVariables)) <$> getEnvironment
  hint <- buildHint
  -- a traced master's workers trace too, each to its own file
  eventlog <- workerEventlogOptions (portOf (launchAddress launch))
  -- createProcess closes a handle given as UseHandle, so each worker gets its own
  devNull <- openFile "/dev/null" WriteMode
  let env = baseEnv ++
        [ (envConnect, launchAddress launch)
        , (envWatchStdin, "1")
        , (envSecretStdin, "1")
        , (envGroup, launchGroup launch)
        , ("GHCRTS", unwords (launchRtsOptions launch ++ eventlog)) ] ++
        role ++
        [ (envBuildHint, h) | Just h <- [hint] ] ++
        [ (envNice, show (launchNice launch)) | launchNice launch > 0 ] ++
        [ (envHeapReserve, show m) | Just m <- [launchHeapReserve launch] ]
  (Just stdinH, _, _, ph) <- createProcess (proc exe args)
    { env = Just env, std_in = CreatePipe, std_out = UseHandle devNull
    , std_err = Inherit, close_fds = True }
  -- A worker that died at once has closed its end; it is reported by
  -- its exit code, not by this write.
  (hPutStrLn stdinH (secretToLine (launchSecret launch)) >> hFlush stdinH)
    `catch` \(_ :: IOException) -> pure ()
  pure (LocalWorker cpu ph stdinH)

-- | Stop local workers: close their pipes (they exit on end of file), give
-- them a moment, then kill any that remain, and reap them all.
stopLocalWorkers :: [LocalWorker] -> IO ()
stopLocalWorkers workers = do
  forM_ workers $ \w -> hClose (localStdin w) `catch` \(_ :: IOException) -> pure ()
  let waitAll :: Int -> IO ()
      waitAll 0 = pure ()
      waitAll n = do
        codes <- mapM (getProcessExitCode . localHandle) workers
        if all (/= Nothing) codes then pure () else threadDelay 10000 >> waitAll (n - 1)
  waitAll (200 :: Int)
  forM_ workers $ \w -> do
    code <- getProcessExitCode (localHandle w)
    case code of
      Just _ -> pure ()
      Nothing -> do
        -- SIGKILL, not SIGTERM: a stopped worker would keep a SIGTERM
        -- pending, and the wait for it would never end
        mpid <- getPid (localHandle w)
        forM_ mpid $ \p -> signalProcess sigKILL p `catch` \(_ :: IOException) -> pure ()
        _ <- waitForProcess (localHandle w)
        pure ()

-- The master's port in a worker's address: the number it ends with
-- (@HOST:PORT@, or @shm:herd-PID-PORT@ and @unix:herd-PID-PORT@, whose
-- socket is named after the port); 0 when it ends with none.
portOf :: String -> Int
portOf address = case reverse (takeWhile isDigit (reverse address)) of
  digits@(_ : _) | length digits < 10 -> read digits
  _ -> 0
