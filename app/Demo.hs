-- | @herd demo@: the HaLVM study's Fibonacci farm, first on one worker and
-- then on every core, with a progress bar and a closing table.
module Demo
  ( Options (..)
  , run
  ) where

import Control.Monad (when)
import Data.IORef
import Herd
import Herd.Examples.Fib (fib, fibTask)
import Herd.Report (fixed, renderTable)
import Herd.Clock (monotonicSeconds)
import System.IO

-- | What the demo runs.
data Options = Options
  { optFib     :: Int        -- ^ Fibonacci argument of each task
  , optTasks   :: Int        -- ^ number of tasks
  , optWorkers :: Maybe Int  -- ^ workers of the parallel run
  }

-- | Run the demo.
run :: Options -> IO ()
run o = do
  hSetBuffering stdout LineBuffering
  putStrLn ("herd demo: fib " ++ show (optFib o) ++ " computed " ++ show (optTasks o)
            ++ " times, each task in a worker process pinned to its own core")
  (one, oneStats, oneSum) <- runOn "1 worker" (Just 1)
  (par, parStats, parSum) <- runOn "all cores" (optWorkers o)
  when (oneSum /= parSum) $ hPutStrLn stderr "herd demo: the two runs disagree (this is a bug)"
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
  where
    runOn label workers = do
      let cfg = defaultConfig { configWorkers = workers }
      withCluster cfg $ \cluster -> do
        n <- clusterWorkerCount cluster
        putStrLn ("\n" ++ label ++ ": " ++ show n ++ " worker process" ++ (if n == 1 then "" else "es"))
        tty <- hIsTerminalDevice stdout
        done <- newIORef (0 :: Int)
        total <- newIORef 0
        start <- now
        stats <- farmAsCompleted cluster fibTask (replicate (optTasks o) (optFib o)) $ \_ v -> do
          modifyIORef' total (+ v)
          k <- atomicModifyIORef' done (\d -> (d + 1, d + 1))
          t <- now
          progress tty k (optTasks o) (t - start)
        end <- now
        when tty (putStrLn "")
        s <- readIORef total
        when (s /= optTasks o * fib (optFib o)) $ hPutStrLn stderr "herd demo: wrong result (this is a bug)"
        pure (end - start, stats, s)

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

