-- | @herd bench pfilter@: FP Complete's scaling experiment. The particle
-- filter of "Herd.Examples.ParticleFilter" runs at each worker count with
-- each master loop, on one cluster of the largest count per loop (a run at
-- W workers uploads its particles to the first W and lets only those work).
-- With @--simulate@ each particle's step sleeps @--cost@ instead of
-- computing, so hundreds of workers fit on a small machine while
-- everything the master does stays real.
--
-- Ideal time: the particle steps evolved times the cost, over the workers
-- (with real computation: the measured step time in place of the cost).
-- Efficiency is ideal over measured; busy is the mean share of a worker's
-- time spent in steps, waiting the rest.
module Bench.Pfilter
  ( Options (..)
  , run
  ) where

import Control.Monad (forM, forM_, when)
import Data.IORef
import qualified Data.Map.Strict as M
import Bench.Common (timed)
import Bench.Plot
import Herd
import Herd.Config (defaultWorkerRtsOptions)
import Herd.Examples.ParticleFilter
import Herd.Report
import System.IO

-- | Benchmark settings.
data Options = Options
  { optWorkers  :: [Int]
  , optStates   :: Int
  , optSteps    :: Int
  , optCost     :: Double
  , optSimulate :: Bool
  , optLoops    :: [MasterLoop]
  , optPlot     :: Maybe FilePath
  , optTransport :: Maybe TransportKind
  , optJson     :: Bool
  , optDashboard :: Maybe String  -- ^ serve the live dashboard at this HOST:PORT
  }

data Row = Row
  { rowLoop    :: MasterLoop
  , rowWorkers :: Int
  , rowSeconds :: Double
  , rowIdeal   :: Double
  , rowBusy    :: Double
  , rowMoved   :: Int
  }


-- | Run the benchmark: table, plot file, and JSON line.
run :: Options -> IO ()
run o = do
  hSetBuffering stdout LineBuffering
  let most = maximum (optWorkers o)
      simulate = if optSimulate o then optCost o else 0
      setup = defaultSetup { setupParticles = optStates o, setupSteps = optSteps o, setupSimulate = simulate }
      cfg = defaultConfig
        { configWorkers = Just most
        , configDashboard = optDashboard o
        , configStartTimeout = 60 + fromIntegral most / 4
        , configMaxPendingHandshakes = max 256 (most + 16)
        , configHandshakeTimeout = 30
        , configWorkerNice = if most > 2 then 10 else 0
        , configPinning = NoPinning
        , configTransport = optTransport o
          -- sleeping workers allocate little: a small nursery keeps hundreds in memory
        , configWorkerRtsOptions = if optSimulate o then ["-N1", "-A1m", "-V0"] else defaultWorkerRtsOptions }
  checkPlotWritable "pfilter" (optPlot o)
  hPutStrLn stderr ("pfilter: starting " ++ show most ++ " workers")
  -- one cluster per master loop: the loop drives every API of its cluster
  rows <- fmap concat $ forM (optLoops o) $ \loop -> withCluster cfg { configMasterLoop = loop } $ \cluster -> do
    have <- clusterWorkerCount cluster
    when (have < most) $ hPutStrLn stderr ("pfilter: only " ++ show have ++ " workers connected")
    forM (optWorkers o) $ \w -> do
      let opts = defaultEvolveOptions { evolveWorkerLimit = Just w }
      ids <- resetStatesWith opts cluster particleStep (initialParticles setup)
      stats <- newIORef []
      let evolveAll inputs = do
            (out, s) <- evolveManyWith opts cluster particleStep inputs
            modifyIORef' stats (s :)
            pure out
      (secs, result) <- timed (runFilter setup evolveAll ids)
      calls <- readIORef stats
      let evolved = sum (runEvolved result)
          busyTotal = sum (concatMap (M.elems . esBusy) calls)
          ideal = if optSimulate o then fromIntegral evolved * optCost o / fromIntegral w
                  else busyTotal / fromIntegral w
          row = Row loop w secs ideal (busyTotal / (fromIntegral w * secs)) (sum (map esMoved calls))
      hPutStrLn stderr ("  " ++ masterLoopName loop ++ ", " ++ show w ++ " workers: " ++ fixed 3 secs ++ " s (ideal "
                        ++ fixed 3 ideal ++ " s, efficiency " ++ fixed 2 (ideal / secs) ++ ")")
      pure row
  putStr $ renderTable ["master", "workers", "seconds", "ideal", "efficiency", "busy", "waiting", "moved"]
    [ [ masterLoopName (rowLoop r), show (rowWorkers r), fixed 3 (rowSeconds r), fixed 3 (rowIdeal r)
      , fixed 3 (rowIdeal r / rowSeconds r), fixed 3 (rowBusy r), fixed 3 (1 - rowBusy r), show (rowMoved r) ]
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
    , ("rows", JArray [ JObject [ ("master", JString (masterLoopName (rowLoop r))), ("workers", JInt (fromIntegral (rowWorkers r)))
                                , ("seconds", JNumber (rowSeconds r)), ("ideal", JNumber (rowIdeal r))
                                , ("efficiency", JNumber (rowIdeal r / rowSeconds r))
                                , ("busy", JNumber (rowBusy r)), ("waiting", JNumber (1 - rowBusy r))
                                , ("moved", JInt (fromIntegral (rowMoved r))) ]
                      | r <- rows ]) ]
