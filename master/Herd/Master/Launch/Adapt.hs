{-# LANGUAGE ScopedTypeVariables #-}
-- | Adaptive scaling under SLURM: the thin IO around the pure tracker and
-- policy ("Herd.Core.Adapt.Track", "Herd.Core.Adapt").
--
-- Once a second it reads the master's jobs from @squeue@ (by the job name
-- this master gives them all), the cluster's status (the farm tasks
-- waiting, each job's workers by the group they report), steps the
-- tracker, and carries out its actions: @sbatch@ a job that runs this
-- executable as a host agent connecting back (the secret in a file of
-- mode 600 only this user reads, TLS where the cluster has it), hold a
-- retiring job's workers, @scancel@. Every decision goes to the log with
-- its reason. A SLURM command that fails is logged and counted; the
-- cluster goes on with the hosts it has. When the body ends, every job
-- still known is cancelled and the secret file removed.
module Herd.Master.Launch.Adapt
  ( AdaptContext (..)
  , withAdaptive
  , checkSlurmCommands
  ) where

import Control.Concurrent (threadDelay)
import Control.Concurrent.Async (withAsync)
import Control.Exception
import Control.Monad (forM_, forever, unless, when)
import Data.IORef
import Data.List (stripPrefix)
import qualified Data.Map.Strict as M
import qualified Data.Set as S
import Herd.Core.Adapt (AdaptLimits (..))
import Herd.Core.Adapt.Slurm
import Herd.Core.Adapt.Track
import Herd.Core.Base (WorkerId)
import Herd.Core.Error (HerdError (..))
import Herd.Core.Master.Events (Event (..))
import Herd.Core.Master.Workers (WorkerInfo (..))
import Herd.Core.Monitor.Status
import Herd.Master.Shell
import Herd.Sys.Clock (monotonicSeconds)
import Herd.Sys.Env
import Herd.Transport.Auth (Secret, secretBytes, secretEnvVar)
import qualified Data.ByteString as B
import System.Directory (createDirectoryIfMissing, findExecutable, getHomeDirectory, removeFile)
import System.Environment (getEnvironment, getExecutablePath)
import System.Exit (ExitCode (..))
import System.FilePath ((</>))
import System.Posix.Files (setFileMode)
import System.Posix.Process (getProcessID)
import System.Process (CreateProcess (..), proc, readCreateProcessWithExitCode)
import System.Timeout (timeout)

-- | What the driver needs from the cluster.
data AdaptContext = AdaptContext
  { acSettings     :: SlurmAdapt
  , acAddress      :: String             -- ^ @[tls:]HOST:PORT@ the agents connect to
  , acRtsOptions   :: [String]           -- ^ the workers' RTS options
  , acHeapReserve  :: Int                -- ^ MiB each worker touches before it joins
  , acSecret       :: Secret
  , acStartTimeout :: Double             -- ^ seconds a running job may take to connect
  , acLog          :: String -> IO ()
  , acShell        :: Shell
  , acStatus       :: IO Status
  , acHeld         :: IO (M.Map WorkerId Int)  -- ^ values (Refs, evolve states) each worker holds, as far as known
  , acPublish      :: Maybe AdaptSummary -> IO ()  -- ^ where the status page reads the jobs
  }

-- | 'LaunchError' unless @sbatch@, @squeue@ and @scancel@ are on the PATH.
checkSlurmCommands :: IO ()
checkSlurmCommands = do
  missing <- filter (null . snd) <$> mapM (\c -> (,) c . maybe "" id <$> findExecutable c) ["sbatch", "squeue", "scancel"]
  unless (null missing) $ throwIO $ LaunchError
    ("adaptive SLURM (--slurm-adapt) needs " ++ unwords (map fst missing) ++ " on the PATH; is SLURM installed here?")

-- | Run the body while the driver scales the cluster; cancel every job
-- and remove the secret file after it, also when it throws.
withAdaptive :: AdaptContext -> IO a -> IO a
withAdaptive ctx body = do
  checkSlurmCommands
  pid <- getProcessID
  dir <- (</> ".herd" </> "adapt") <$> getHomeDirectory
  createDirectoryIfMissing True dir
  let name = "herd-adapt-" ++ show pid
      secretPath = dir </> name ++ ".secret"
  B.writeFile secretPath B.empty >> setFileMode secretPath 0o600
  B.writeFile secretPath (secretBytes (acSecret ctx))
  exe <- getExecutablePath
  trackerRef <- newIORef emptyTracker
  awaitedRef <- newIORef 0
  older <- shellLossHooks (acShell ctx)
  setLossHooks (acShell ctx) older { lossAwaited = (+) <$> lossAwaited older <*> readIORef awaitedRef }
  let job = AgentJob
        { agentName = name, agentLogDir = dir, agentExecutable = exe
        , agentEnv = [ (envConnect, acAddress ctx), (envAgent, show (adaptHostSlots limits))
                     , (envSecretFile, secretPath), ("GHCRTS", unwords (acRtsOptions ctx))
                     , (envHeapReserve, show (acHeapReserve ctx)) ] }
      limits = slurmAdaptLimits (acSettings ctx)
      knobs = Knobs
        { knobLimits = limits
        , knobWalltime = either (const Nothing) (Just . fromIntegral) . parseWalltime =<< slurmAdaptWalltime (acSettings ctx)
        , knobLead = slurmAdaptLead (acSettings ctx), knobStartTimeout = acStartTimeout ctx }
  queueError <- newIORef Nothing
  let driver = Driver ctx job knobs trackerRef awaitedRef queueError
  acLog ctx ("herd: adaptive: " ++ show (adaptMin limits) ++ " to " ++ show (adaptMax limits)
             ++ " SLURM jobs of " ++ show (adaptHostSlots limits) ++ " worker(s), named " ++ name
             ++ "; their output goes to " ++ dir)
  acPublish ctx (Just (summary emptyTracker))
  withAsync (forever (guarded driver >> threadDelay 1000000)) (const body)
    `finally` finish driver secretPath older

-- The driver's parts.
data Driver = Driver
  { drContext :: AdaptContext
  , drJob     :: AgentJob
  , drKnobs   :: Knobs
  , drTracker :: IORef Tracker
  , drAwaited :: IORef Int
  , drQueueError :: IORef (Maybe String)  -- ^ why squeue failed last round, if it did
  }

-- One round; an exception in it (other than the driver's own end) is
-- logged and the next round tries again.
guarded :: Driver -> IO ()
guarded d = oneRound d `catch` \(e :: SomeException) -> case fromException e of
  Just (_ :: SomeAsyncException) -> throwIO e
  Nothing -> acLog (drContext d) ("herd: adaptive: a round failed: " ++ displayException e)

oneRound :: Driver -> IO ()
oneRound d = do
  let ctx = drContext d
  st <- acStatus ctx
  held <- acHeld ctx
  queue <- readQueue d
  now <- monotonicSeconds
  let rows = jobRows st
      perJob = M.fromListWith (\(JobWorkers a x h) (JobWorkers b y k) -> JobWorkers (a + b) (x && y) (h + k))
                 [ (jid, JobWorkers 1 (workerIdle r) (M.findWithDefault 0 (rowWorker r) held)) | (jid, r) <- rows ]
      ob = Observation now queue perJob (sum (map jobRowPending (statusJobs st)))
  acts <- atomicModifyIORef' (drTracker d) (\tr -> observe (drKnobs d) ob tr)
  mapM_ (act d rows) acts
  tr <- readIORef (drTracker d)
  acPublish ctx (Just (summary tr))
  let awaited = awaitedWorkers (drKnobs d) tr
  was <- atomicModifyIORef' (drAwaited d) (\w -> (awaited, w))
  when (was /= awaited) $ shellAwaitedChanged (acShell ctx)

-- The connected workers of the master's adaptive jobs, by job id.
jobRows :: Status -> [(String, WorkerRow)]
jobRows st =
  [ (jid, r) | r <- statusWorkers st, rowState r /= Lost, Just info <- [rowInfo r]
  , Just jid <- [stripPrefix adaptGroupPrefix (infoGroup info)] ]

-- A worker with nothing of the master's to run.
workerIdle :: WorkerRow -> Bool
workerIdle r = rowState r /= Busy && rowInFlight r == 0 && rowStreams r == 0 && rowStates r == 0

-- Carry out one action.
act :: Driver -> [(String, WorkerRow)] -> Action -> IO ()
act d rows a = case a of
  Say line -> acLog ctx line
  HoldJobs ids -> do
    let held = [ WorkerHeld (rowWorker r) True | (jid, r) <- rows, jid `S.member` S.fromList ids ]
    unless (null held) $ shellStep (acShell ctx) True held
  CancelJobs ids _ -> do
    r <- slurm ctx "scancel" ids ""
    either (\why -> acLog ctx ("herd: adaptive: scancel " ++ unwords ids ++ " failed: " ++ why)) (const (pure ())) r
  SubmitJobs n _ -> forM_ [1 .. n] $ \_ -> do
    -- the job's environment is this one (sbatch exports it) less herd's
    -- own variables and a secret it may hold: the script sets what the
    -- agent needs, and the secret goes by its file only
    outer <- getEnvironment
    let clean = [ kv | kv@(k, _) <- outer, k `notElem` (secretEnvVar : "GHCRTS" : herdVariables) ]
    out <- slurmIn (Just clean) ctx "sbatch" (sbatchArguments (acSettings ctx) (drJob d)) (agentScript (drJob d))
    now <- monotonicSeconds
    says <- atomicModifyIORef' (drTracker d) (submitted now (out >>= parseSubmitted))
    forM_ [ l | Say l <- says ] (acLog ctx)
  where ctx = drContext d

-- The master's jobs in the queue, or 'Nothing' when squeue fails (logged
-- when it starts failing, or fails otherwise, and when it works again).
readQueue :: Driver -> IO (Maybe (M.Map String SlurmState))
readQueue d = do
  let ctx = drContext d
  r <- slurm ctx "squeue" ["-h", "-o", squeueFormat, "-n", agentName (drJob d)] ""
  before <- atomicModifyIORef' (drQueueError d) (\e -> (either Just (const Nothing) r, e))
  case r of
    Left why -> do
      when (before /= Just why) $
        acLog ctx ("herd: adaptive: cannot read the queue (" ++ why ++ "); the jobs' states are unknown until it can")
      pure Nothing
    Right out -> do
      when (before /= Nothing) $ acLog ctx "herd: adaptive: the queue can be read again"
      let parsed = parseQueue out
      forM_ [ why | Left why <- parsed ] $ \why -> acLog ctx ("herd: adaptive: " ++ why)
      pure (Just (M.fromList [ e | Right e <- parsed ]))

-- Run a SLURM command with its input, within 30 s; its output, or why not.
slurm :: AdaptContext -> String -> [String] -> String -> IO (Either String String)
slurm = slurmIn Nothing

-- 'slurm' in this environment ('Nothing': this process's).
slurmIn :: Maybe [(String, String)] -> AdaptContext -> String -> [String] -> String -> IO (Either String String)
slurmIn environment _ cmd args input = do
  r <- try (timeout 30000000 (readCreateProcessWithExitCode (proc cmd args) { env = environment } input))
  pure $ case r of
    Left (e :: IOException) -> Left (cmd ++ ": " ++ displayException e)
    Right Nothing -> Left (cmd ++ " gave no answer within 30 s")
    Right (Just (ExitSuccess, out, _)) -> Right out
    Right (Just (code, out, err)) ->
      Left (cmd ++ " " ++ exitText code ++ ": " ++ lastLine (if null (words err) then out else err))
  where
    exitText (ExitFailure c) = "exited with code " ++ show c
    exitText ExitSuccess = "succeeded"
    lastLine t = case filter (not . null . words) (lines t) of
      [] -> "(nothing printed)"
      ls -> last ls

-- Cancel every job still known, put the loss hooks back, remove the
-- secret file.
finish :: Driver -> FilePath -> LossHooks -> IO ()
finish d secretPath older = do
  let ctx = drContext d
  setLossHooks (acShell ctx) older
  tr <- readIORef (drTracker d)
  let left = M.keys (trJobs tr)
  unless (null left) $ do
    acLog ctx ("herd: adaptive: the cluster ends; cancelling job(s) " ++ unwords left)
    _ <- slurm ctx "scancel" left ""
    pure ()
  acPublish ctx Nothing
  removeFile secretPath `catch` \(_ :: IOException) -> pure ()
