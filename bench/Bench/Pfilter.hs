-- | @herd bench pfilter@: FP Complete's scaling experiment. The particle
-- filter of "Herd.Examples.ParticleFilter" runs at each worker count with
-- each master loop, on one cluster of the largest count per loop (a run at
-- W workers uploads its particles to the first W and lets only those work).
-- With @--simulate@ each particle's step sleeps @--cost@ instead of
-- computing, so hundreds of workers fit on a small machine while
-- everything the master does stays real.
--
-- With @--sim-hosts K@ (K above 0) the simulated workers are played by K
-- simulated-host processes ("Herd.Simulate.Host"): each worker has its own
-- TCP link and runs the real step, and the sleep becomes a timer, so
-- thousands of workers fit where a process each would swamp the
-- scheduler. @--sim-hosts 0@ keeps one real process per worker. With
-- simulated hosts the evolve calls run in two levels by default (each
-- host's agent schedules its workers, the master balances the hosts:
-- 'Herd.Config.configHostScheduling'), so the bench measures the real
-- scheduler at both levels; @--one-level@ has the master schedule every
-- worker itself, as without hosts.
--
-- Ideal time: the particle steps evolved times the cost, over the workers
-- (with real computation: the measured step time in place of the cost).
-- Efficiency is ideal over measured; busy is the mean share of a worker's
-- time spent in steps, waiting the rest. Each row also says who spent the
-- CPU: the master process, and the worker processes (or simulated hosts)
-- together, from @/proc@; and where the wall time went: inside the evolve
-- calls, or in the filter's own work between them (resampling, building
-- the next inputs), when every worker waits; and the minor page faults
-- of the master, and of the workers (or hosts) together, during the run
-- (first touches of memory, dear on a virtual machine: see
-- "Herd.Sys.HeapReserve").
module Bench.Pfilter
  ( Options (..)
  , Levels (..)
  , run
  ) where

import Control.Exception (evaluate)
import Control.Monad (forM, forM_, when)
import Data.IORef
import qualified Data.Map.Strict as M
import Bench.Apart (answerApart, runApart)
import Bench.Common (ownUsage, processUsage, timed)
import Data.List (intercalate)
import Data.Maybe (fromMaybe)
import Text.Printf (printf)
import Bench.Plot
import Herd
import Herd.Config
import Herd.Monitor
import Herd.Settings (defaultWorkerRtsOptions)
import Herd.Examples.ParticleFilter
import Herd.Core.Report
import Herd.Node.Topology (physicalCores)
import Data.Containers.ListUtils (nubOrd)
import GHC.Stats (allocated_bytes, gc_cpu_ns, getRTSStats, getRTSStatsEnabled)
import System.CPUTime (getCPUTime)
import System.Mem (performMinorGC)
import System.Exit (die)
import System.IO

-- | Benchmark settings.
data Options = Options
  { optWorkers  :: [Int]
  , optStates   :: Int
  , optSteps    :: Int
  , optCost     :: Double
  , optSimulate :: Bool
  , optSimHosts :: Maybe Int   -- ^ simulated-host processes ('Nothing': by the worker count)
  , optLoops    :: [MasterLoop]
  , optPlot     :: Maybe FilePath
  , optTransport :: Maybe TransportKind
  , optJson     :: Bool
  , optDashboard :: Maybe String  -- ^ serve the live dashboard at this HOST:PORT
  , optLevels :: Maybe Levels
    -- ^ who schedules the workers ('Nothing': two levels when there are
    -- simulated hosts, else one)
  , optAnswerTo :: Maybe FilePath
    -- ^ measure only, and write the rows to this file for the process that
    -- started this one ("Bench.Apart"); a hidden option
  }

-- | Who schedules an evolve call's workers.
data Levels
  = OneLevel   -- ^ the master, every worker
  | TwoLevel
    -- ^ each host's agent its own workers, the master the hosts
    -- ('Herd.Config.configHostScheduling'); one cluster per worker count
  deriving (Eq, Show)

-- The levels a run uses: as asked, else two with simulated hosts.
levelsFor :: Options -> Int -> Levels
levelsFor o hosts = fromMaybe (if hosts > 0 then TwoLevel else OneLevel) (optLevels o)

data Row = Row
  { rowLoop    :: MasterLoop
  , rowWorkers :: Int
  , rowSeconds :: Double
  , rowIdeal   :: Double
  , rowBusy    :: Double
  , rowMoved   :: Int
  , rowMasterCpu :: Double
  , rowHostsCpu  :: Double
  , rowInCalls   :: Double   -- ^ seconds inside evolve calls (the rest is the filter's own work)
  , rowFaults    :: Int      -- ^ the master's minor page faults during the run
  , rowHostsFaults :: Int    -- ^ the worker processes' (or simulated hosts') together
  , rowMasterGc    :: Maybe Double  -- ^ the master's collector CPU seconds (GHC.Stats; 'Nothing' without @+RTS -T@)
  , rowMasterAlloc :: Maybe Double  -- ^ bytes the master allocated per state evolved (GHC.Stats)
  , rowLinks       :: Int           -- ^ links the master kept open
  , rowEvolved     :: Int           -- ^ states evolved in the run
  , rowHostMoved   :: Int           -- ^ states moved between hosts (two levels)
  } deriving (Show, Read)

-- Microseconds of CPU per evolved state.
perState :: Row -> Double -> Double
perState r secs = secs * 1e6 / fromIntegral (max 1 (rowEvolved r))


-- | Run the benchmark: table, plot file, and JSON line.
run :: Options -> IO ()
run o = do
  hSetBuffering stdout LineBuffering
  cores <- length <$> physicalCores
  let most = maximum (optWorkers o)
      simulate = if optSimulate o then optCost o else 0
      hosts = case optSimHosts o of
        Just k -> k
        Nothing | optSimulate o && most > cores -> max 1 cores
                | otherwise -> 0
      setup = defaultSetup { setupParticles = optStates o, setupSteps = optSteps o, setupSimulate = simulate }
      workerSettings
        | hosts > 0 = defaultConfig
            { configWorkers = Just 0, configSimulatedWorkers = most, configSimulatedHosts = hosts
            , configWorkerRtsOptions = ["-N1", "-A16m"] }
        | otherwise = defaultConfig
            { configWorkers = Just most
              -- sleeping workers allocate little: a small nursery keeps hundreds in memory
            , configWorkerRtsOptions = if optSimulate o then ["-N1", "-A1m", "-V0"] else defaultWorkerRtsOptions }
      cfg = workerSettings
        { configDashboard = optDashboard o
          -- a process per worker takes a while to start each; simulated
          -- hosts connect thousands of workers in seconds, and a start that
          -- stalls should not hold the bench for ten minutes
        , configStartTimeout = 60 + fromIntegral most / (if hosts > 0 then 40 else 4)
        , configMaxPendingHandshakes = max 256 (most + 16)
        , configHandshakeTimeout = 30
        , configWorkerNice = if most > 2 then 10 else 0
        , configPinning = NoPinning
        , configTransport = optTransport o }
  when (hosts > 0 && not (optSimulate o)) $
    die "pfilter: --sim-hosts above 0 needs --simulate (a simulated host plays workers whose time is simulated)"
  case (optAnswerTo o, optLoops o) of
    (Just path, _) -> measure o cfg setup hosts >>= answerApart path
    (Nothing, _ : _ : _) -> do
      -- more than one loop: each in a master process of its own ("Bench.Apart")
      checkPlotWritable "pfilter" (optPlot o)
      rows <- concat <$> mapM (\loop -> runApart (childArgs o hosts loop)) (optLoops o)
      report o hosts rows
    (Nothing, _) -> do
      checkPlotWritable "pfilter" (optPlot o)
      measure o cfg setup hosts >>= report o hosts

-- The arguments that measure one master loop in a process of its own and
-- write its rows to the given file.
childArgs :: Options -> Int -> MasterLoop -> FilePath -> [String]
childArgs o hosts loop answerFile =
  [ "bench", "pfilter", "--answer-to", answerFile, "--workers", intercalate "," (map show (optWorkers o)), "--states", show (optStates o)
  , "--steps", show (optSteps o), "--cost", printf "%.9f" (optCost o), "--sim-hosts", show hosts
  , "--master", masterLoopName loop ]
  ++ [ "--simulate" | optSimulate o ]
  ++ [ case levelsFor o hosts of { TwoLevel -> "--two-level"; OneLevel -> "--one-level" } ]
  ++ maybe [] (\t -> ["--transport", transportName t]) (optTransport o)
  ++ maybe [] (\d -> ["--dashboard", d]) (optDashboard o)

-- CPU seconds and page faults of several processes together.
sumUsage :: [(Double, Int)] -> (Double, Int)
sumUsage us = (sum (map fst us), sum (map snd us))

-- Run the filter at each worker count with each master loop of the options.
measure :: Options -> Config -> FilterSetup -> Int -> IO [Row]
measure o cfg setup hosts = do
  let most = maximum (optWorkers o)
  hPutStrLn stderr ("pfilter: starting " ++ show most ++ " workers"
                    ++ (if hosts > 0 then " in " ++ show hosts ++ " simulated hosts" else ""))
  -- one cluster per master loop: the loop drives every API of its cluster
  -- two levels: a cluster of each worker count, every worker scheduled by its host
  let clusters
        | levelsFor o hosts == TwoLevel = [ (cfg { configSimulatedWorkers = w, configHostScheduling = True }, [w]) | w <- optWorkers o ]
        | otherwise = [(cfg, optWorkers o)]
  fmap concat $ forM [ (l, c) | l <- optLoops o, c <- clusters ] $ \(loop, (cfg', counts)) -> withCluster cfg' { configMasterLoop = loop } $ \cluster -> do
    have <- clusterWorkerCount cluster
    when (have < maximum counts) $ hPutStrLn stderr ("pfilter: only " ++ show have ++ " workers connected")
    pids <- nubOrd . map infoPid <$> clusterWorkerInfo cluster
    links <- statusLinks <$> clusterStatus cluster
    forM counts $ \w -> do
      let opts = defaultEvolveOptions { evolveWorkerLimit = Just w }
      ids <- resetStatesWith opts cluster particleStep (initialParticles setup)
      stats <- newIORef []
      inCalls <- newIORef 0
      let evolveAll inputs = do
            -- the filter's inputs are lazy (the resampling that makes them
            -- runs when they are forced): force them here, so that work
            -- counts as the filter's, not as the call's
            _ <- evaluate (M.foldl' (flip seq) () inputs)
            (t, (out, s)) <- timed (evolveManyWith opts cluster particleStep inputs)
            modifyIORef' stats (s :)
            modifyIORef' inCalls (+ t)
            pure out
      stats0 <- masterStats
      master0 <- getCPUTime
      (_, faults0) <- ownUsage
      (hosts0, hostFaults0) <- sumUsage <$> mapM processUsage pids
      (secs, result) <- timed (runFilter setup evolveAll ids)
      (_, faults1) <- ownUsage
      (hosts1, hostFaults1) <- sumUsage <$> mapM processUsage pids
      master1 <- getCPUTime
      stats1 <- masterStats
      calls <- readIORef stats
      callSecs <- readIORef inCalls
      let evolved = sum (runEvolved result)
          busyTotal = sum (concatMap (M.elems . esBusy) calls)
          ideal = if optSimulate o then fromIntegral evolved * optCost o / fromIntegral w
                  else busyTotal / fromIntegral w
          row = Row loop w secs ideal (busyTotal / (fromIntegral w * secs)) (sum (map esMoved calls))
                    (fromIntegral (master1 - master0) / 1e12) (hosts1 - hosts0) callSecs (faults1 - faults0) (hostFaults1 - hostFaults0)
                    (statsGc <$> stats0 <*> stats1) ((\a b -> statsAlloc a b / fromIntegral (max 1 evolved)) <$> stats0 <*> stats1)
                    links evolved (sum (map esHostMoved calls))
      hPutStrLn stderr ("  " ++ masterLoopName loop ++ ", " ++ show w ++ " workers: " ++ fixed 3 secs ++ " s (ideal "
                        ++ fixed 3 ideal ++ " s, efficiency " ++ fixed 2 (ideal / secs) ++ ")")
      pure row

-- The master's runtime statistics at one point: collector CPU seconds so
-- far, before and after a minor collection, and bytes allocated after it
-- (the collection makes that count exact). The caller keeps these points
-- outside its CPU and wall-clock windows, and 'statsGc' leaves the forced
-- collections out. 'Nothing' when the runtime keeps no statistics (herd's
-- binary runs with @-T@).
data MasterStats = MasterStats
  { statsGcBefore  :: Double
  , statsGcAfter   :: Double
  , statsAllocated :: Double
  }

masterStats :: IO (Maybe MasterStats)
masterStats = do
  enabled <- getRTSStatsEnabled
  if not enabled then pure Nothing else do
    before <- gc_cpu_ns <$> getRTSStats
    performMinorGC
    after <- getRTSStats
    pure (Just (MasterStats (fromIntegral before / 1e9) (fromIntegral (gc_cpu_ns after) / 1e9)
                            (fromIntegral (allocated_bytes after))))

-- Collector seconds between two points, without their forced collections.
statsGc :: MasterStats -> MasterStats -> Double
statsGc a b = statsGcBefore b - statsGcAfter a

statsAlloc :: MasterStats -> MasterStats -> Double
statsAlloc a b = statsAllocated b - statsAllocated a

-- Print the table, write the plot, and end with the JSON line.
report :: Options -> Int -> [Row] -> IO ()
report o hosts rows = do
  putStr $ renderTable ["master", "workers", "sim hosts", "links", "seconds", "ideal", "efficiency", "busy", "waiting", "moved", "host moves"
                       , "master cpu s", "master us/state", "hosts cpu s", "hosts us/state", "in calls s", "between s", "master faults", "hosts faults"
                       , "master gc s", "master B/state"]
    [ [ masterLoopName (rowLoop r), show (rowWorkers r), show hosts, show (rowLinks r), fixed 3 (rowSeconds r), fixed 3 (rowIdeal r)
      , fixed 3 (rowIdeal r / rowSeconds r), fixed 3 (rowBusy r), fixed 3 (1 - rowBusy r), show (rowMoved r), show (rowHostMoved r)
      , fixed 2 (rowMasterCpu r), fixed 1 (perState r (rowMasterCpu r)), fixed 2 (rowHostsCpu r), fixed 1 (perState r (rowHostsCpu r))
      , fixed 3 (rowInCalls r), fixed 3 (rowSeconds r - rowInCalls r)
      , show (rowFaults r), show (rowHostsFaults r)
      , maybe "-" (fixed 2) (rowMasterGc r), maybe "-" (fixed 0) (rowMasterAlloc r) ]
    | r <- rows ]
  let colours = [(ThreadedLoop, "#d62728"), (EpollLoop, "#1f77b4")]
      series = [ Series (masterLoopName l) c False [ (fromIntegral (rowWorkers r), rowSeconds r) | r <- rows, rowLoop r == l ]
               | (l, c) <- colours, l `elem` optLoops o ]
            ++ [ Series "ideal" "#555" True
                   [ (fromIntegral (rowWorkers r), rowIdeal r) | r <- rows, rowLoop r == head (optLoops o) ] ]
      title = "particle filter, " ++ show (optStates o) ++ " states, " ++ show (optSteps o) ++ " steps"
              ++ (if optSimulate o then ", simulated " ++ fixed 3 (optCost o) ++ " s steps" else "")
  writePlot (optPlot o) (logLogSvg title "workers" "seconds" series)
  forM_ [ r | r <- rows, rowWorkers r == maximum (map rowWorkers rows) ] $ \r ->
    putStrLn (masterLoopName (rowLoop r) ++ " at " ++ show (rowWorkers r) ++ " workers: efficiency "
              ++ fixed 3 (rowIdeal r / rowSeconds r))
  when (optJson o) $ putStrLn $ renderJson $ JObject
    [ ("bench", JString "pfilter")
    , ("levels", JInt (case levelsFor o hosts of { TwoLevel -> 2; OneLevel -> 1 }))
    , ("rows", JArray [ JObject [ ("master", JString (masterLoopName (rowLoop r))), ("workers", JInt (fromIntegral (rowWorkers r)))
                                , ("seconds", JNumber (rowSeconds r)), ("ideal", JNumber (rowIdeal r))
                                , ("efficiency", JNumber (rowIdeal r / rowSeconds r))
                                , ("busy", JNumber (rowBusy r)), ("waiting", JNumber (1 - rowBusy r))
                                , ("moved", JInt (fromIntegral (rowMoved r)))
                                , ("host_moved", JInt (fromIntegral (rowHostMoved r)))
                                , ("sim_hosts", JInt (fromIntegral hosts))
                                , ("links", JInt (fromIntegral (rowLinks r)))
                                , ("master_cpu_s", JNumber (rowMasterCpu r)), ("hosts_cpu_s", JNumber (rowHostsCpu r))
                                , ("evolved", JInt (fromIntegral (rowEvolved r)))
                                , ("master_cpu_us_per_state", JNumber (perState r (rowMasterCpu r)))
                                , ("hosts_cpu_us_per_state", JNumber (perState r (rowHostsCpu r)))
                                , ("calls_s", JNumber (rowInCalls r)), ("between_calls_s", JNumber (rowSeconds r - rowInCalls r))
                                , ("master_faults", JInt (fromIntegral (rowFaults r)))
                                , ("hosts_faults", JInt (fromIntegral (rowHostsFaults r)))
                                , ("master_gc_s", maybe JNull JNumber (rowMasterGc r))
                                , ("master_alloc_bytes_per_state", maybe JNull JNumber (rowMasterAlloc r)) ]
                      | r <- rows ]) ]
