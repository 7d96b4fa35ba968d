-- | @herd bench nursery@: how the workers' nursery size (@+RTS -A@) changes
-- the time of an allocation-heavy farm. This is the measurement behind
-- 'Herd.Settings.defaultWorkerRtsOptions'.
module Bench.Nursery
  ( Options (..)
  , run
  ) where

import Control.Monad (forM, when)
import Herd
import Herd.Config
import Herd.Examples.Alloc (mapBuildTask)
import Herd.Core.Report
import Herd.Sys.Clock (monotonicSeconds)
import System.IO

-- | Benchmark settings.
data Options = Options
  { optSizes :: [String]  -- ^ nursery sizes, such as @1m@
  , optTasks :: Int
  , optKeys  :: Int
  , optJson  :: Bool
  , optDashboard :: Maybe String  -- ^ serve the live dashboard at this HOST:PORT
  }

now :: IO Double
now = monotonicSeconds

-- | Run the benchmark and print its table (and JSON line).
run :: Options -> IO ()
run o = do
  hSetBuffering stdout LineBuffering
  putStrLn ("map build of " ++ show (optKeys o) ++ " keys x " ++ show (optTasks o)
            ++ " tasks on every core, per nursery size")
  rows <- forM (optSizes o) $ \size -> do
    let cfg = defaultConfig { configWorkerRtsOptions = ["-N1", "-A" ++ size], configDashboard = optDashboard o }
    secs <- withCluster cfg $ \cluster -> do
      _ <- farm cluster mapBuildTask [optKeys o]   -- warm up: code paged in
      t0 <- now
      ys <- farm cluster mapBuildTask (replicate (optTasks o) (optKeys o))
      t1 <- length ys `seq` now
      pure (t1 - t0)
    hPutStrLn stderr ("  -A" ++ size ++ ": " ++ fixed 3 secs ++ " s")
    pure (size, secs)
  let best = minimum (map snd rows)
  putStr $ renderTable ["nursery", "seconds", "relative to best"]
    [ ["-A" ++ s, fixed 3 t, fixed 2 (t / best)] | (s, t) <- rows ]
  when (optJson o) $ putStrLn $ renderJson $ JObject
    [ ("bench", JString "nursery")
    , ("rows", JArray [ JObject [("nursery", JString s), ("seconds", JNumber t), ("relative", JNumber (t / best))]
                      | (s, t) <- rows ]) ]
