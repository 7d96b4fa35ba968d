{-# OPTIONS_GHC -fno-full-laziness -fno-cse #-}
-- (Without those two flags GHC shares @map fib inputs@ between models and
-- core counts, and every run after the first measures nothing.)

-- | @herd bench models@: the HaLVM study's Table 1 and Figure 3 on Linux.
--
-- One Fibonacci farm (K tasks of fib N) run under five models: sequential
-- code; the Eval monad (sparks, via Strategies); forkIO (green threads);
-- forkOS (OS threads); and herd worker processes. The in-runtime models run
-- in this process with as many capabilities as cores; herd runs one worker
-- process per core, and its time is the farm alone (workers already
-- connected), with start-up reported separately.
module Bench.Models
  ( Options (..)
  , run
  ) where

import Control.Concurrent
import Control.DeepSeq (force)
import Control.Exception (evaluate)
import Control.Monad (forM, unless, when)
import Control.Parallel.Strategies (parList, rdeepseq, using)
import Herd
import Herd.Config
import Herd.Examples.Fib (fib, fibTask)
import Herd.Node.Topology (physicalCores)
import Herd.Core.Report
import Bench.Plot
import Herd.Sys.Clock (monotonicSeconds)
import System.IO

-- | Benchmark settings.
data Options = Options
  { optFib   :: Int
  , optTasks :: Int
  , optCores :: Maybe [Int]
  , optJson  :: Bool
  , optPlot  :: Maybe FilePath
  , optDashboard :: Maybe String  -- ^ serve the live dashboard at this HOST:PORT
  }

data Row = Row
  { rowModel :: String
  , rowUnit  :: String
  , rowCores :: Int
  , rowSecs  :: Double
  , rowNote  :: String
  }

now :: IO Double
now = monotonicSeconds

timed :: IO a -> IO (a, Double)
timed act = do
  t0 <- now
  a <- act
  t1 <- now
  pure (a, t1 - t0)

-- | Run the benchmark and print its table (and JSON line).
run :: Options -> IO ()
run o = do
  hSetBuffering stdout LineBuffering
  checkPlotWritable "models" (optPlot o)
  physical <- length <$> physicalCores
  let cores = maybe [1 .. physical] id (optCores o)
      inputs = replicate (optTasks o) (optFib o)
      expected = fib (optFib o) * optTasks o
      check name xs = unless (sum xs == expected) $ fail (name ++ " computed a wrong sum")
  when (maximum cores > physical) $
    hPutStrLn stderr ("herd bench models: note: " ++ show (maximum cores) ++ " cores asked, "
                      ++ show physical ++ " physical cores here; runs beyond that share cores")
  putStrLn ("fib " ++ show (optFib o) ++ " x " ++ show (optTasks o) ++ " tasks; cores " ++ show cores)
  (seqOut, seqSecs) <- timed (evaluate (force (map fib inputs)))
  check "sequential" seqOut
  progressLine "sequential" 1 seqSecs
  rows <- fmap concat $ forM cores $ \c -> do
    setNumCapabilities c
    (evalOut, evalSecs) <- timed (evaluate (force (map fib inputs `using` parList rdeepseq)))
    check "eval" evalOut
    progressLine "eval" c evalSecs
    (forkOut, forkSecs) <- timed (threaded forkIO inputs)
    check "forkio" forkOut
    progressLine "forkio" c forkSecs
    (osOut, osSecs) <- timed (threaded forkOS inputs)
    check "forkos" osOut
    progressLine "forkos" c osSecs
    setNumCapabilities 1
    (startSecs, (herdOut, herdSecs)) <- do
      t0 <- now
      withCluster defaultConfig { configWorkers = Just c, configDashboard = optDashboard o } $ \cluster -> do
        t1 <- now
        r <- timed (farm cluster fibTask inputs)
        pure (t1 - t0, r)
    check "herd" herdOut
    progressLine "herd" c herdSecs
    pure [ Row "eval" "spark" c evalSecs ""
         , Row "forkio" "green thread" c forkSecs ""
         , Row "forkos" "OS thread" c osSecs ""
         , Row "herd" "process" c herdSecs ("start-up " ++ fixed 2 startSecs ++ " s") ]
  let allRows = Row "sequential" "-" 1 seqSecs "" : rows
      speedup r = seqSecs / rowSecs r
  putStrLn ""
  putStr $ renderTable ["model", "unit of parallelism", "cores", "seconds", "speedup", "efficiency", "note"]
    [ [rowModel r, rowUnit r, show (rowCores r), fixed 3 (rowSecs r), fixed 2 (speedup r)
      , fixed 2 (speedup r / fromIntegral (rowCores r)), rowNote r]
    | r <- allRows ]
  writePlot (optPlot o) $ lineSvg Linear Linear
      ("fib " ++ show (optFib o) ++ " x " ++ show (optTasks o) ++ ": speedup over sequential") "cores" "speedup"
      ([ Series name colour False [ (fromIntegral (rowCores r), speedup r) | r <- rows, rowModel r == name ]
       | (name, colour) <- [("herd", "#1f77b4"), ("forkio", "#2ca02c"), ("forkos", "#ff7f0e"), ("eval", "#d62728")] ]
       ++ [ Series "ideal" "#555" True [ (fromIntegral c, fromIntegral c) | c <- cores ] ])
  when (optJson o) $ putStrLn $ renderJson $ JObject
    [ ("bench", JString "models")
    , ("fib", JInt (fromIntegral (optFib o)))
    , ("tasks", JInt (fromIntegral (optTasks o)))
    , ("rows", JArray [ JObject [ ("model", JString (rowModel r)), ("cores", JInt (fromIntegral (rowCores r)))
                                , ("seconds", JNumber (rowSecs r)), ("speedup", JNumber (speedup r))
                                , ("efficiency", JNumber (speedup r / fromIntegral (rowCores r))) ]
                      | r <- allRows ]) ]
  where
    progressLine :: String -> Int -> Double -> IO ()
    progressLine name c secs =
      hPutStrLn stderr ("  " ++ name ++ " on " ++ show c ++ " core(s): " ++ fixed 3 secs ++ " s")

-- One thread per task, started with the given fork, results collected in
-- order.
threaded :: (IO () -> IO ThreadId) -> [Int] -> IO [Int]
threaded fork inputs = do
  vars <- forM inputs $ \n -> do
    v <- newEmptyMVar
    _ <- fork (evaluate (fib n) >>= putMVar v)
    pure v
  mapM takeMVar vars
