-- | @herd demo@: the HaLVM study's Fibonacci farm, first on one worker and
-- then on every core, with a progress bar and a closing table. Given
-- cluster options (ssh hosts, SLURM, a listen address, or workers to wait
-- for), it runs the farm once on that cluster instead, with time-stamped
-- log lines so a run can be followed across machines.
module Demo
  ( Options (..)
  , ClusterOptions (..)
  , run
  ) where

import Herd.Log (logToStderr)
import Control.Monad (unless, when)
import Data.IORef
import qualified Data.IntMap.Strict as IM
import Data.Time.Clock.POSIX (getPOSIXTime)
import Herd
import Herd.Config (parseHostsFile)
import System.Exit (exitWith, ExitCode (..))
import Herd.Examples.Fib (fib, fibTask)
import Herd.Core.Report (fixed, renderTable)
import Herd.Clock (monotonicSeconds)
import System.IO

-- | What the demo runs.
data Options = Options
  { optFib     :: Int        -- ^ Fibonacci argument of each task
  , optTasks   :: Int        -- ^ number of tasks
  , optWorkers :: Maybe Int  -- ^ workers of the parallel run
  , optCluster :: ClusterOptions
  }

-- | Where the workers of a cluster run come from.
data ClusterOptions = ClusterOptions
  { coHosts        :: [HostSpec]       -- ^ ssh hosts
  , coHostsFile    :: Maybe FilePath   -- ^ more ssh hosts, from a file
  , coSlurm        :: Bool             -- ^ one worker per task of the SLURM allocation
  , coListen       :: Maybe (String, Int)  -- ^ address to listen on
  , coAdvertise    :: Maybe String     -- ^ address workers connect to
  , coWaitWorkers  :: Int              -- ^ workers to wait for (joining by hand)
  , coSecretFile   :: Maybe FilePath
  , coShip         :: Bool
  , coAllowPartial :: Bool
  , coSsh          :: Maybe String     -- ^ the ssh command, split on spaces
  , coLiveness     :: Maybe Double
  , coStartTimeout :: Maybe Double
  , coTransport    :: Maybe TransportKind  -- ^ how local workers are linked (default: shm)
  , coTls          :: Bool             -- ^ TLS on TCP links
  , coDashboard    :: Maybe String     -- ^ serve the live dashboard at this HOST:PORT
  }

isClusterRun :: ClusterOptions -> Bool
isClusterRun co = not (null (coHosts co)) || coHostsFile co /= Nothing || coSlurm co
                  || coListen co /= Nothing || coWaitWorkers co > 0

-- | Run the demo.
run :: Options -> IO ()
run o | isClusterRun (optCluster o) = runCluster o
run o | optWorkers o == Just 0 = do
  logToStderr "herd demo: --workers 0 starts no worker; add --listen or --wait-workers to wait for workers joining by hand"
  exitWith (ExitFailure 2)
run o = do
  hSetBuffering stdout LineBuffering
  putStrLn ("herd demo: fib " ++ show (optFib o) ++ " computed " ++ show (optTasks o)
            ++ " times, each task in a worker process pinned to its own core")
  case coDashboard (optCluster o) of
    Just _ -> do
      -- one cluster, so the page follows one run from start to end
      putStrLn "(with --dashboard the single-worker run is skipped: the page shows the run on all cores)"
      (_, parStats, _) <- runOn "all cores" (optWorkers o)
      putStrLn ""
      putStrLn "per worker:"
      putStr (renderStats parStats)
    Nothing -> compareRuns
  where
   compareRuns = do
    (one, oneStats, oneSum) <- runOn "1 worker" (Just 1)
    (par, parStats, parSum) <- runOn "all cores" (optWorkers o)
    when (oneSum /= parSum) $ logToStderr "herd demo: the two runs disagree (this is a bug)"
    let workers = length (jobWorkerStats parStats)
    putStrLn ""
    putStr $ renderTable ["run", "workers", "seconds", "speedup"]
      [ ["1 worker", "1", fixed 2 one, "1.00"]
      , ["all cores", show workers, fixed 2 par, fixed 2 (one / par)] ]
    putStrLn ""
    putStrLn "per worker, parallel run:"
    putStr (renderStats parStats)
    putStrLn ""
    putStrLn "per worker, single-worker run:"
    putStr (renderStats oneStats)
   runOn label workers = do
      let cfg = defaultConfig { configWorkers = workers, configTransport = coTransport (optCluster o)
                              , configTls = coTls (optCluster o), configDashboard = coDashboard (optCluster o) }
      withCluster cfg $ \cluster -> do
        n <- clusterWorkerCount cluster
        putStrLn ("\n" ++ label ++ ": " ++ show n ++ " worker process" ++ (if n == 1 then "" else "es"))
        tty <- hIsTerminalDevice stdout
        (secs, stats, s, wrong) <- timedFarm o tty cluster
        when tty (putStrLn "")
        -- every task's result exactly once, and right: anything else is a bug
        unless (null wrong && s == optTasks o * fib (optFib o)) $ do
          logToStderr ("herd demo: wrong results (this is a bug): " ++ unwords (take 10 wrong))
          exitWith (ExitFailure 1)
        putStrLn "packets on each link (dynamic chunking):"
        clusterPacketStats cluster >>= putStr . renderPacketStats
        pure (secs, stats, s)

-- Farm the demo's tasks with a progress display; the seconds taken, the
-- statistics, the sum of the results, and what was wrong: a task whose
-- result is not fib's, or that came back other than once.
timedFarm :: Options -> Bool -> Cluster -> IO (Double, FarmStats, Int, [String])
timedFarm o tty cluster = do
  done <- newIORef (0 :: Int)
  total <- newIORef 0
  seen <- newIORef (IM.empty :: IM.IntMap Int)
  bad <- newIORef []
  start <- now
  stats <- farmAsCompleted cluster fibTask (replicate (optTasks o) (optFib o)) $ \i v -> do
    modifyIORef' seen (IM.insertWith (+) i 1)
    when (v /= fib (optFib o)) $ modifyIORef' bad (("task " ++ show i ++ " gave " ++ show v) :)
    modifyIORef' total (+ v)
    k <- atomicModifyIORef' done (\d -> (d + 1, d + 1))
    t <- now
    progress tty k (optTasks o) (t - start)
  end <- now
  s <- readIORef total
  counts <- readIORef seen
  wrongValues <- reverse <$> readIORef bad
  let times = [ "task " ++ show i ++ " came back " ++ show (IM.findWithDefault 0 i counts) ++ " times"
              | i <- [0 .. optTasks o - 1], IM.findWithDefault 0 i counts /= 1 ]
  pure (end - start, stats, s, wrongValues ++ times)

now :: IO Double
now = monotonicSeconds

-- Redraw a one-line progress bar on a terminal; elsewhere (a log) print a
-- line at every tenth of the job instead.
progress :: Bool -> Int -> Int -> Double -> IO ()
progress tty k total secs
  | tty = putStr ('\r' : bar) >> hFlush stdout
  | (k * 10) `div` total /= ((k - 1) * 10) `div` total = putStrLn bar
  | otherwise = pure ()
  where
    width = 40
    filled = (k * width) `div` max 1 total
    bar = "  [" ++ replicate filled '#' ++ replicate (width - filled) '.' ++ "] "
          ++ show k ++ "/" ++ show total ++ "  " ++ fixed 1 secs ++ " s"


-- One run on the cluster the options describe.
runCluster :: Options -> IO ()
runCluster o = do
  hSetBuffering stdout LineBuffering
  let co = optCluster o
  fileHosts <- case coHostsFile co of
    Nothing -> pure []
    Just path -> do
      text <- readFile path
      case parseHostsFile text of
        Left why -> failWith ("--hosts-file " ++ path ++ ": " ++ why)
        Right hs -> pure hs
  let hosts = coHosts co ++ fileHosts
      cfg = defaultConfig
        { configWorkers = Just (maybe 0 id (optWorkers o))
        , configHosts = hosts
        , configSlurm = coSlurm co
        , configListenHost = fmap fst (coListen co)
        , configListenPort = maybe 0 snd (coListen co)
        , configAdvertiseHost = coAdvertise co
        , configSecret = maybe (configSecret defaultConfig) SecretFile (coSecretFile co)
        , configShip = coShip co
        , configAllowPartialStart = coAllowPartial co
        , configSshCommand = maybe (configSshCommand defaultConfig) words (coSsh co)
        , configLivenessTimeout = maybe (configLivenessTimeout defaultConfig) id (coLiveness co)
        , configStartTimeout = maybe (configStartTimeout defaultConfig) id (coStartTimeout co)
        , configLog = stampedLog
        , configTransport = coTransport co
        , configTls = coTls co
        , configDashboard = coDashboard co
        }
  putStrLn ("herd demo: fib " ++ show (optFib o) ++ " computed " ++ show (optTasks o) ++ " times on a cluster")
  withCluster cfg $ \cluster -> do
    let want = max 1 (coWaitWorkers co)
    have <- clusterWorkerCount cluster
    when (have < want) $ do
      stampedLog ("herd demo: waiting for " ++ show (want - have) ++ " more worker(s) to join")
      ok <- waitForWorkers cluster want (maybe 600 id (coStartTimeout co))
      unless ok $ failWith ("fewer than " ++ show want ++ " workers joined in time")
    infos <- clusterWorkerInfo cluster
    stampedLog ("herd demo: starting with " ++ show (length infos) ++ " workers: "
                ++ unwords [ infoHost i ++ "/" ++ show (infoPid i) | i <- infos ])
    (secs, stats, s, wrong) <- timedFarm o False cluster
    let ok = null wrong && s == optTasks o * fib (optFib o)
    putStrLn ("herd demo: " ++ show (optTasks o) ++ " tasks in " ++ fixed 2 secs ++ " s; results "
              ++ (if ok then "complete and correct" else "WRONG: " ++ unwords (take 10 wrong)))
    putStr (renderStats stats)
    clusterPacketStats cluster >>= putStr . renderPacketStats
    unless ok $ exitWith (ExitFailure 1)
  where
    failWith msg = logToStderr ("herd demo: " ++ msg) >> exitWith (ExitFailure 2)

-- Log lines on standard error, prefixed with the wall-clock time in seconds
-- (so lines from several machines can be lined up).
stampedLog :: String -> IO ()
stampedLog line = do
  t <- getPOSIXTime
  logToStderr (fixed 3 (realToFrac t :: Double) ++ " " ++ line)
