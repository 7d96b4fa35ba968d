-- | @herd demo@: the HaLVM study's Fibonacci farm, first on one worker and
-- then on every core, with a progress bar and a closing table. Given
-- cluster options (ssh hosts, SLURM, a listen address, or workers to wait
-- for), it runs the farm once on that cluster instead, with time-stamped
-- log lines so a run can be followed across machines.
module Demo
  ( Options (..)
  , run
  ) where

import Herd.Sys.Log (logToStderr)
import Control.Concurrent (threadDelay)
import Control.Monad (unless, when)
import Data.IORef
import qualified Data.IntMap.Strict as IM
import Herd
import Herd.Config
import Herd.Monitor
import Herd.Options
import System.Exit (exitWith, ExitCode (..))
import Herd.Examples.Fib (fib, fibTask)
import Herd.Examples.Steal (relayTask)
import Herd.Core.Report (fixed, renderTable)
import Herd.Sys.Clock (monotonicSeconds)
import System.IO

-- | What the demo runs.
data Options = Options
  { optFib     :: Int           -- ^ Fibonacci argument of each task
  , optTasks   :: Int           -- ^ number of tasks
  , optSerial  :: Double        -- ^ seconds of a serial phase before and after the farm (on a cluster)
  , optRelay   :: Int           -- ^ instead of the farm, a relay of this many stolen children (0: the farm)
  , optCluster :: ClusterFlags  -- ^ where the workers come from
  }

-- | Run the demo.
run :: Options -> IO ()
run o | optRelay o > 0 = runRelay o
run o | flagsNameRemoteWorkers (optCluster o) = runCluster o
run o | flagWorkers (optCluster o) == Just 0 = do
  logToStderr "herd demo: --workers 0 starts no worker; add --listen or --wait-workers to wait for workers joining by hand"
  exitWith (ExitFailure 2)
run o = do
  hSetBuffering stdout LineBuffering
  putStrLn ("herd demo: fib " ++ show (optFib o) ++ " computed " ++ show (optTasks o)
            ++ " times, each task in a worker process pinned to its own core")
  case flagDashboard (optCluster o) of
    Just _ -> do
      -- one cluster, so the page follows one run from start to end
      putStrLn "(with --dashboard the single-worker run is skipped: the page shows the run on all cores)"
      (_, parStats, _) <- runOn "all cores" (flagWorkers (optCluster o))
      putStrLn ""
      putStrLn "per worker:"
      putStr (renderStats parStats)
    Nothing -> compareRuns
  where
   compareRuns = do
    (one, oneStats, oneSum) <- runOn "1 worker" (Just 1)
    (par, parStats, parSum) <- runOn "all cores" (flagWorkers (optCluster o))
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
      -- every cluster flag counts, the worker count as this run asks
      flagged <- configFromFlags (optCluster o) defaultConfig
      let cfg = flagged { configWorkers = workers }
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
  cfg <- configFromFlags (optCluster o) defaultConfig
  putStrLn ("herd demo: fib " ++ show (optFib o) ++ " computed " ++ show (optTasks o) ++ " times on a cluster")
  withCluster cfg $ \cluster -> do
    have <- clusterWorkerCount cluster
    when (have < max 1 (flagWaitWorkers (optCluster o))) $
      logToStderr ("herd demo: waiting for " ++ show (max 1 (flagWaitWorkers (optCluster o)) - have) ++ " more worker(s) to join")
    awaitFlaggedWorkers (optCluster o) cluster
    infos <- clusterWorkerInfo cluster
    logToStderr ("herd demo: starting with " ++ show (length infos) ++ " workers: "
                 ++ unwords [ infoHost i ++ "/" ++ show (infoPid i) | i <- infos ])
    serialPhase "before"
    (secs, stats, s, wrong) <- timedFarm o False cluster
    serialPhase "after"
    let ok = null wrong && s == optTasks o * fib (optFib o)
    putStrLn ("herd demo: " ++ show (optTasks o) ++ " tasks in " ++ fixed 2 secs ++ " s; results "
              ++ (if ok then "complete and correct" else "WRONG: " ++ unwords (take 10 wrong)))
    putStr (renderStats stats)
    clusterPacketStats cluster >>= putStr . renderPacketStats
    unless ok $ exitWith (ExitFailure 1)
  where
    -- the master alone computes (here: waits), as a job's serial part does
    serialPhase when' = when (optSerial o > 0) $ do
      logToStderr ("herd demo: serial phase " ++ when' ++ " the farm: " ++ fixed 1 (optSerial o) ++ " s")
      threadDelay (round (optSerial o * 1e6))
      logToStderr ("herd demo: serial phase " ++ when' ++ " the farm: over")

-- A relay of stolen children ('relayTask') on the cluster the options
-- describe: the answer checked, and the stolen children each worker ran.
runRelay :: Options -> IO ()
runRelay o = do
  hSetBuffering stdout LineBuffering
  cfg <- configFromFlags (optCluster o) defaultConfig
  withCluster cfg $ \cluster -> do
    awaitFlaggedWorkers (optCluster o) cluster
    have <- clusterWorkerCount cluster
    logToStderr ("herd demo: a relay of " ++ show (optRelay o) ++ " stolen children on " ++ show have ++ " workers")
    [depth] <- farm cluster relayTask [(optRelay o, 0.2)]
    rows <- statusWorkers <$> clusterStatus cluster
    infos <- clusterWorkerInfo cluster
    let hostOf w = head ([ infoHost i ++ "/" ++ show (infoPid i) | i <- infos, infoId i == w ] ++ ["worker " ++ show w])
        ok = depth == optRelay o
    putStrLn ("herd demo: a relay of " ++ show (optRelay o) ++ " children: " ++ (if ok then "exact" else "WRONG: " ++ show depth))
    mapM_ (\r -> putStrLn ("  " ++ hostOf (rowWorker r) ++ " ran " ++ show (countRan (rowSteals r)) ++ " stolen children, "
                           ++ show (countStolen (rowSteals r)) ++ " of its children were stolen")) rows
    unless ok $ exitWith (ExitFailure 1)
