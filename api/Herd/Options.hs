{-# LANGUAGE ScopedTypeVariables #-}
-- | Your program's command line: herd's cluster flags (the ones @herd
-- demo@ takes) as an optparse-applicative parser, and 'herdMain', a
-- @main@ that serves as a worker before anything else runs.
--
-- > import Herd
-- > import Herd.Options
-- > import Options.Applicative
-- >
-- > main :: IO ()
-- > main = herdMain "Square some numbers" (option auto (long "count" <> value 100)) $ \count cluster ->
-- >   farm cluster squareTask [1 .. count] >>= print . sum
--
-- Its @--help@ lists your flags and herd's: @--workers@, @--hosts@,
-- @--hosts-file@, @--slurm@, @--listen@, @--advertise@, @--wait-workers@,
-- @--secret-file@, @--ship@, @--allow-partial@, @--ssh@, @--liveness@,
-- @--start-timeout@, @--transport@, @--tls@, @--dashboard@, @--memory-limit@,
-- @--task-deadline@, and @--slurm-adapt@ with the flags that shape its
-- jobs (@--slurm-job-workers@, @--slurm-partition@, @--slurm-time@,
-- @--slurm-lead@, @--slurm-option@, @--adapt-wait@, @--adapt-idle@).
--
-- Promises: every flag is validated when parsed, and a bad one is
-- reported with its name and what it accepts (a bad hosts file as a
-- 'ConfigError' naming @--hosts-file@); in a worker process 'herdMain'
-- parses nothing and runs nothing of yours.
module Herd.Options
  ( -- * A program's main
    herdMain
  , herdMainWith
    -- * The cluster flags
  , ClusterFlags (..)
  , AdaptFlags (..)
  , clusterFlags
  , configFromFlags
  , flagsNameRemoteWorkers
  , awaitFlaggedWorkers
  ) where

import Control.Exception (throwIO, try)
import Control.Monad (forM_, unless, when)
import System.Directory (doesFileExist)
import GHC.IO.Exception (IOException (ioe_description))
import System.IO.Error (isDoesNotExistError, isPermissionError)
import Data.Char (isDigit)
import Herd
import Herd.Config
import Herd.Settings (parseDashboardAddress, parseHostList, parseHostsFile)
import Herd.Node (parseHostPort)
import Options.Applicative
import Herd.Core.Adapt.Slurm (parseAdaptRange, parseWalltime)

-- | What herd's flags say about the cluster.
data ClusterFlags = ClusterFlags
  { flagWorkers      :: Maybe Int            -- ^ @--workers N@: local workers
  , flagHosts        :: [HostSpec]           -- ^ @--hosts HOST[:N],...@: ssh hosts
  , flagHostsFile    :: Maybe FilePath       -- ^ @--hosts-file FILE@: more ssh hosts
  , flagSlurm        :: Bool                 -- ^ @--slurm@: one worker per task of the SLURM allocation
  , flagListen       :: Maybe (String, Int)  -- ^ @--listen HOST[:PORT]@
  , flagAdvertise    :: Maybe String         -- ^ @--advertise HOST@
  , flagWaitWorkers  :: Int                  -- ^ @--wait-workers N@: workers to wait for
  , flagSecretFile   :: Maybe FilePath       -- ^ @--secret-file FILE@
  , flagShip         :: Bool                 -- ^ @--ship@: copy the executable to each ssh host
  , flagAllowPartial :: Bool                 -- ^ @--allow-partial@: go on with the hosts that started
  , flagSsh          :: Maybe String         -- ^ @--ssh COMMAND@
  , flagLiveness     :: Maybe Double         -- ^ @--liveness SECONDS@
  , flagStartTimeout :: Maybe Double         -- ^ @--start-timeout SECONDS@
  , flagTransport    :: Maybe TransportKind  -- ^ @--transport tcp|unix|shm@
  , flagTls          :: Bool                 -- ^ @--tls@
  , flagDashboard    :: Maybe String         -- ^ @--dashboard HOST:PORT@
  , flagMemoryLimit  :: Maybe MemoryLimit    -- ^ @--memory-limit MIB|auto|none@: each worker's resident memory
  , flagTaskDeadline :: Maybe Double         -- ^ @--task-deadline SECONDS@: the most a farm task may compute
  , flagSlurmAdapt   :: Maybe (Int, Int)     -- ^ @--slurm-adapt MIN..MAX@: SLURM jobs added and cancelled with the work
  , flagAdaptJob     :: AdaptFlags           -- ^ what each of those jobs asks for, and the policy's waits
  } deriving (Eq, Show)

-- | The flags that shape adaptive SLURM jobs (@--slurm-adapt@); each
-- 'Nothing' keeps 'defaultSlurmAdapt''s setting.
data AdaptFlags = AdaptFlags
  { adaptFlagWorkers   :: Maybe Int     -- ^ @--slurm-job-workers N@: workers (CPUs) per job
  , adaptFlagPartition :: Maybe String  -- ^ @--slurm-partition NAME@
  , adaptFlagTime      :: Maybe String  -- ^ @--slurm-time LIMIT@: each job's walltime
  , adaptFlagLead      :: Maybe Double  -- ^ @--slurm-lead SECONDS@: retire this long before the walltime
  , adaptFlagOptions   :: [String]      -- ^ @--slurm-option OPT@, repeatable: more sbatch options
  , adaptFlagWait      :: Maybe Double  -- ^ @--adapt-wait SECONDS@: work waits this long before a job is added
  , adaptFlagIdle      :: Maybe Double  -- ^ @--adapt-idle SECONDS@: a job idle this long is cancelled
  } deriving (Eq, Show)

-- | The adaptive flags, each validated as it is parsed.
adaptFlags :: Parser AdaptFlags
adaptFlags = AdaptFlags
  <$> optional (option (wholeNumber "a worker count" 1 1024) (long "slurm-job-workers" <> metavar "N"
        <> help "with --slurm-adapt: workers (CPUs) each SLURM job brings (default: 1)"))
  <*> optional (strOption (long "slurm-partition" <> metavar "NAME" <> help "with --slurm-adapt: the partition to submit to"))
  <*> optional (option (eitherReader (\t -> t <$ parseWalltime t)) (long "slurm-time" <> metavar "LIMIT"
        <> help "with --slurm-adapt: each job's walltime, as sbatch --time takes it (e.g. 30, 1:00:00, 1-0)"))
  <*> optional (option (seconds 0 86400) (long "slurm-lead" <> metavar "SECONDS"
        <> help "with --slurm-time: a job stops taking work this long before its walltime, staggered (default: 60)"))
  <*> many (strOption (long "slurm-option" <> metavar "OPT"
        <> help "with --slurm-adapt: one more sbatch option, e.g. --slurm-option=--account=proj (repeatable)"))
  <*> optional (option (seconds 0 86400) (long "adapt-wait" <> metavar "SECONDS"
        <> help "with --slurm-adapt: work must wait this long before a job is added (default: 2)"))
  <*> optional (option (seconds 0 86400) (long "adapt-idle" <> metavar "SECONDS"
        <> help "with --slurm-adapt: a job idle this long with no work waiting is cancelled (default: 10)"))

-- | The cluster flags, each validated as it is parsed.
clusterFlags :: Parser ClusterFlags
clusterFlags = ClusterFlags
  <$> optional (option (wholeNumber "a worker count" 0 4096) (long "workers" <> metavar "N"
        <> help "local workers (default: one per physical core; with --hosts, --slurm, --listen or --wait-workers, 0)"))
  <*> option (eitherReader parseHostList) (long "hosts" <> metavar "HOST[:N],..." <> value []
        <> help "start N workers on each host over ssh (no N: one per physical core)")
  <*> optional (strOption (long "hosts-file" <> metavar "FILE" <> help "more ssh hosts, one per line: HOST [N]"))
  <*> switch (long "slurm" <> help "start one worker per task of the enclosing SLURM allocation (srun)")
  <*> optional (option listenAddress (long "listen" <> metavar "HOST[:PORT]"
        <> help "address to listen on (default: loopback, or all interfaces with --hosts/--slurm)"))
  <*> optional (strOption (long "advertise" <> metavar "HOST"
        <> help "address workers connect to (default: the listen address or this host's name)"))
  <*> option (wholeNumber "a worker count" 0 100000) (long "wait-workers" <> metavar "N" <> value 0
        <> help "wait until N workers have joined (e.g. by herd worker --connect) before starting")
  <*> optional (strOption (long "secret-file" <> metavar "FILE"
        <> help "the shared secret (default: $HERD_SECRET, else ~/.herd/cookie)"))
  <*> switch (long "ship" <> help "copy this executable to each ssh host first")
  <*> switch (long "allow-partial" <> help "go on with the hosts that started if some fail")
  <*> optional (strOption (long "ssh" <> metavar "COMMAND"
        <> help "the ssh command and its options (default: ssh -o BatchMode=yes)"))
  <*> optional (option (seconds 1 3600) (long "liveness" <> metavar "SECONDS"
        <> help "a link silent this long counts as lost (default: 4)"))
  <*> optional (option (seconds 0.1 86400) (long "start-timeout" <> metavar "SECONDS"
        <> help "time for launched workers to connect (default: 30)"))
  <*> optional (option (eitherReader parseTransportKind) (long "transport" <> metavar "tcp|unix|shm"
        <> help "how local workers are linked (default: shm; workers on other hosts use tcp)"))
  <*> switch (long "tls" <> help "encrypt TCP links with TLS (workers joining by hand connect to tls:HOST:PORT)")
  <*> optional (option (eitherReader (\s -> s <$ parseDashboardAddress s)) (long "dashboard" <> metavar "HOST:PORT"
        <> help "serve a live dashboard there (e.g. 127.0.0.1:8787; port 0: a free one, logged): \
                \the page at /, JSON at /api/status, Prometheus metrics at /metrics"))
  <*> optional (option (eitherReader parseMemoryLimit) (long "memory-limit" <> metavar "MIB|auto|none"
        <> help "resident memory each worker may hold: above it the worker is killed and its task charged, \
                \above 80% it gets no new work (default auto: 90% of its host's memory shared among its workers)"))
  <*> optional (option (seconds 0.001 1000000) (long "task-deadline" <> metavar "SECONDS"
        <> help "stop a farm task that computes longer than this on its worker; it fails saying so (default: none)"))
  <*> optional (option (eitherReader parseAdaptRange) (long "slurm-adapt" <> metavar "MIN..MAX"
        <> help "submit SLURM jobs (each a host agent) while work waits and cancel idle ones, \
                \keeping MIN to MAX of them (see --slurm-job-workers, --slurm-time, --adapt-idle)"))
  <*> adaptFlags

-- | Parse @--memory-limit@: a whole number of MiB from 16, @auto@ or
-- @none@, naming what is wrong.
parseMemoryLimit :: String -> Either String MemoryLimit
parseMemoryLimit s = case s of
  "auto" -> Right MemoryLimitAuto
  "none" -> Right NoMemoryLimit
  _ | not (null s), all isDigit s, length s < 9, read s >= (16 :: Int) -> Right (MemoryLimitMiB (read s))
    | otherwise -> Left ("expected MiB from 16, auto or none, got " ++ show s)

-- | Whether the flags ask for workers from elsewhere than this host's own
-- processes (ssh, SLURM, or workers joining by hand): then no local worker
-- starts unless @--workers@ asks for some.
flagsNameRemoteWorkers :: ClusterFlags -> Bool
flagsNameRemoteWorkers f = not (null (flagHosts f)) || flagHostsFile f /= Nothing || flagSlurm f || flagSlurmAdapt f /= Nothing
                           || flagListen f /= Nothing || flagWaitWorkers f > 0

-- | The configuration the flags describe, on top of the one given (the
-- hosts file is read here; one that does not parse throws 'ConfigError'
-- naming @--hosts-file@).
configFromFlags :: ClusterFlags -> Config -> IO Config
configFromFlags f base = do
  fileHosts <- case flagHostsFile f of
    Nothing -> pure []
    Just path -> do
      read' <- try (readFile path >>= \t -> length t `seq` pure t)
      text <- either (\(e :: IOException) -> throwIO (ConfigError "--hosts-file" (path ++ ": " ++ ioReason e))) pure read'
      either (throwIO . ConfigError "--hosts-file" . (\why -> path ++ ": " ++ why)) pure (parseHostsFile text)
  forM_ (flagSecretFile f) $ \path -> do
    there <- doesFileExist path
    unless there $ throwIO (ConfigError "--secret-file" (path ++ ": no such file (make one with: head -c 32 /dev/urandom | base64 > "
                                                         ++ path ++ "; chmod 600 " ++ path ++ ")"))
  let remote = flagsNameRemoteWorkers f
  adapt <- either (throwIO . ConfigError "--slurm-adapt") pure (adaptFromFlags f (configSlurmAdapt base))
  pure base
    { configWorkers = case flagWorkers f of
        Just n -> Just n
        Nothing | remote -> Just 0
                | otherwise -> configWorkers base
    , configHosts = configHosts base ++ flagHosts f ++ fileHosts
    , configSlurm = configSlurm base || flagSlurm f
    , configListenHost = maybe (configListenHost base) (Just . fst) (flagListen f)
    , configListenPort = maybe (configListenPort base) snd (flagListen f)
    , configAdvertiseHost = maybe (configAdvertiseHost base) Just (flagAdvertise f)
    , configSecret = maybe (configSecret base) SecretFile (flagSecretFile f)
    , configShip = configShip base || flagShip f
    , configAllowPartialStart = configAllowPartialStart base || flagAllowPartial f
    , configSshCommand = maybe (configSshCommand base) words (flagSsh f)
    , configLivenessTimeout = maybe (configLivenessTimeout base) id (flagLiveness f)
    , configStartTimeout = maybe (configStartTimeout base) id (flagStartTimeout f)
    , configTransport = maybe (configTransport base) Just (flagTransport f)
    , configTls = configTls base || flagTls f
    , configDashboard = maybe (configDashboard base) Just (flagDashboard f)
    , configWorkerMemoryLimit = maybe (configWorkerMemoryLimit base) id (flagMemoryLimit f)
    , configTaskDeadline = maybe (configTaskDeadline base) Just (flagTaskDeadline f)
    , configSlurmAdapt = adapt
    }

-- The adaptive settings the flags describe on top of the configuration's,
-- or why they do not fit (a job flag without @--slurm-adapt@).
adaptFromFlags :: ClusterFlags -> Maybe SlurmAdapt -> Either String (Maybe SlurmAdapt)
adaptFromFlags f base = case (flagSlurmAdapt f, base) of
  (Nothing, Nothing)
    | j /= AdaptFlags Nothing Nothing Nothing Nothing [] Nothing Nothing ->
        Left "--slurm-job-workers, --slurm-partition, --slurm-time, --slurm-lead, --slurm-option, --adapt-wait \
             \and --adapt-idle shape adaptive jobs: give --slurm-adapt MIN..MAX too"
    | otherwise -> Right Nothing
  (range, _) -> Right (Just (tweak range (maybe defaultSlurmAdapt id base)))
  where
    j = flagAdaptJob f
    tweak range a =
      let l = slurmAdaptLimits a
          l' = l { adaptMin = maybe (adaptMin l) fst range, adaptMax = maybe (adaptMax l) snd range
                 , adaptHostSlots = maybe (adaptHostSlots l) id (adaptFlagWorkers j)
                 , adaptGrowAfter = maybe (adaptGrowAfter l) id (adaptFlagWait j)
                 , adaptIdleAfter = maybe (adaptIdleAfter l) id (adaptFlagIdle j) }
      in a { slurmAdaptLimits = l'
           , slurmAdaptPartition = maybe (slurmAdaptPartition a) Just (adaptFlagPartition j)
           , slurmAdaptWalltime = maybe (slurmAdaptWalltime a) Just (adaptFlagTime j)
           , slurmAdaptLead = maybe (slurmAdaptLead a) id (adaptFlagLead j)
           , slurmAdaptOptions = slurmAdaptOptions a ++ adaptFlagOptions j }

-- Why a file could not be read, in words.
ioReason :: IOException -> String
ioReason e
  | isDoesNotExistError e = "no such file"
  | isPermissionError e = "permission denied"
  | otherwise = ioe_description e

-- | Wait for the workers @--wait-workers@ asked for (at least one), for up
-- to the start timeout (600 s if none was given); throws 'LaunchError'
-- saying how many came if they do not.
awaitFlaggedWorkers :: ClusterFlags -> Cluster -> IO ()
awaitFlaggedWorkers f cluster = do
  let want = max 1 (flagWaitWorkers f)
  ok <- waitForWorkers cluster want (maybe 600 id (flagStartTimeout f))
  unless ok $ do
    have <- clusterWorkerCount cluster
    throwIO (LaunchError ("--wait-workers " ++ show want ++ ": only " ++ show have ++ " joined in time"))

-- | The whole of a herd program's @main@. In a worker process it serves
-- the master and exits, before anything else runs (so nothing of yours
-- runs once per worker). Otherwise it parses the command line (your flags
-- and herd's cluster flags, with @--help@), starts the cluster the flags
-- describe on top of 'defaultConfig', waits for the workers
-- @--wait-workers@ names, and runs the body with your options.
herdMain :: String -> Parser a -> (a -> Cluster -> IO r) -> IO r
herdMain description = herdMainWith description id

-- | 'herdMain' with your own changes to the configuration, applied before
-- the flags' (so a flag wins).
herdMainWith :: String -> (Config -> Config) -> Parser a -> (a -> Cluster -> IO r) -> IO r
herdMainWith description adjust yours body = do
  serveIfWorker
  (flags, opts) <- customExecParser (prefs (showHelpOnEmpty <> noBacktrack))
    (info (((,) <$> clusterFlags <*> yours) <**> helper) (fullDesc <> progDesc description))
  cfg <- configFromFlags flags (adjust defaultConfig)
  withCluster cfg $ \cluster -> do
    when (flagWaitWorkers flags > 0) (awaitFlaggedWorkers flags cluster)
    body opts cluster

-- A whole number within bounds, naming what it counts.
wholeNumber :: String -> Int -> Int -> ReadM Int
wholeNumber what lo hi = eitherReader $ \s ->
  if not (null s) && all isDigit s && length s < 10 && read s >= lo && read s <= hi
    then Right (read s)
    else Left ("expected " ++ what ++ ": a whole number from " ++ show lo ++ " to " ++ show hi ++ ", got " ++ show s)

-- Seconds within bounds.
seconds :: Double -> Double -> ReadM Double
seconds lo hi = eitherReader $ \s -> case reads s of
  [(x, "")] | x >= lo && x <= hi -> Right x
  _ -> Left ("expected seconds from " ++ show lo ++ " to " ++ show hi ++ ", got " ++ show s)

-- HOST:PORT, or a bare host (port 0: a free one).
listenAddress :: ReadM (String, Int)
listenAddress = eitherReader $ \s -> case parseHostPort s of
  Right hp -> Right hp
  Left _ | ':' `notElem` s, not (null s) -> Right (s, 0)
  Left why -> Left why
