-- | Starting a cluster's workers: every launch the configuration asks for
-- (local processes, one agent per ssh host, one @srun@), started at once,
-- and the wait until each has connected all its workers or failed.
--
-- Promise: 'awaitLaunches' returns only when every launch is complete, or
-- throws 'LaunchError' naming each that failed (unless partial starts are
-- allowed and some worker connected); it never waits past the start
-- timeout.
module Herd.Master.Launching
  ( startLaunches
  , LocalSet (..)
  , awaitLaunches
  ) where

import Control.Concurrent (threadDelay)
import Control.Exception (throwIO)
import Control.Monad (forM, forM_, unless)
import Data.List (intercalate)
import Herd.Transport.Auth (Secret)
import Herd.Sys.Clock (monotonicSeconds)
import Herd.Settings
import Herd.Core.Error
import Herd.Node.Local
import Herd.Master.Launch.Process (Launch (..))
import Herd.Master.Launch.Slurm
import Herd.Master.Launch.Ssh
import Herd.Master.Types (WorkerInfo (..))
import System.Process (getProcessExitCode)

-- | The local worker processes as started, and how to start one more
-- like them on a CPU (to replace one that died).
data LocalSet = LocalSet
  { localStarted :: [LocalWorker]
  , localRespawn :: Maybe Int -> IO LocalWorker
  }

-- | Start every launch the configuration asks for; none waits for another.
startLaunches :: Config -> Secret -> [Maybe Int] -> Maybe Int -> String -> String -> String -> IO ([Launch], Maybe LocalSet)
startLaunches cfg secret plan slurmTasks localAddr tcpAddr remoteAddr = do
  let local = LocalLaunch localAddr (configWorkerRtsOptions cfg) "local" secret (configWorkerNice cfg)
                          (Just (configWorkerHeapReserve cfg))
  (locals, localSet) <- if null plan then pure ([], Nothing) else do
    ws <- spawnLocalWorkers local plan
    let respawn cpu = do
          started <- spawnLocalWorkers local [cpu]
          case started of
            [w] -> pure w
            _ -> throwIO (LaunchError "no worker was started")
    pure ([localLaunch "local" (length ws) ws], Just (LocalSet ws respawn))
  simulated <- if configSimulatedWorkers cfg == 0 then pure [] else do
    let total = configSimulatedWorkers cfg
        hosts = min total (configSimulatedHosts cfg)
        counts = [ total `div` hosts + (if k < total `mod` hosts then 1 else 0) | k <- [0 .. hosts - 1] ]
    ws <- spawnSimulatedHosts (LocalLaunch tcpAddr (configWorkerRtsOptions cfg) "simulated" secret
                                          (configWorkerNice cfg) Nothing) counts
    pure [localLaunch "simulated" total ws]
  hosts <- forM (configHosts cfg) $ startSshLaunch SshLaunch
    { sshCommand = configSshCommand cfg, sshAddress = remoteAddr
    , sshRtsOptions = configWorkerRtsOptions cfg, sshHeapReserve = configWorkerHeapReserve cfg, sshSecret = secret
    , sshShip = configShip cfg, sshLog = configLog cfg }
  slurm <- forM (maybe [] pure slurmTasks) $ startSlurmLaunch SlurmLaunch
    { slurmAddress = remoteAddr, slurmRtsOptions = configWorkerRtsOptions cfg
    , slurmHeapReserve = configWorkerHeapReserve cfg
    , slurmSecret = secret, slurmLog = configLog cfg }
  pure (locals ++ simulated ++ hosts ++ slurm, localSet)

-- Local processes under a launch name, expected to connect this many
-- workers in all.
localLaunch :: String -> Int -> [LocalWorker] -> Launch
localLaunch name expected ws = Launch
  { launchName = name
  , launchExpected = pure (Just expected)
  , launchFailure = do
      exited <- length . filter (/= Nothing) <$> mapM (getProcessExitCode . localHandle) ws
      pure $ if exited == 0 then Nothing
             else Just (show exited ++ " of " ++ show (length ws) ++ " " ++ name
                        ++ " processes exited early; their errors are on standard error above")
  , launchStop = stopLocalWorkers ws
  }

-- | Wait until every launch has all its workers connected or has failed, or
-- the start timeout passes; then go on or throw as 'Herd.Master.withCluster' says.
awaitLaunches :: Config -> IO [WorkerInfo] -> [Launch] -> IO ()
awaitLaunches cfg workerInfos launches = do
  deadline <- (+ configStartTimeout cfg) <$> monotonicSeconds
  let connectedOf l infos = length (filter ((== launchName l) . infoGroup) infos)
      -- Right: complete; Left (Just why): failed; Left Nothing: still starting
      poll = do
        infos <- workerInfos
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
  have <- length <$> workerInfos
  unless (null failures) $
    if configAllowPartialStart cfg && have > 0
      then forM_ failures $ \why -> configLog cfg ("herd: going on without a launch that failed: " ++ why)
      else throwIO (LaunchError (intercalate "; " failures))
