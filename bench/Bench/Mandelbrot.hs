-- | @herd bench mandelbrot@: Eden's Mandelbrot picture, rows of pixels as
-- farm tasks. @mandelbrot@ is the plain program (one row per task, so one
-- message per row each way); @mandelbrotchunk@ groups rows into chunks of
-- a given size by hand. Each runs with dynamic chunking on and off.
module Bench.Mandelbrot
  ( Options (..)
  , run
  ) where

import Control.Monad (forM, when)
import qualified Data.Vector.Unboxed as U
import Bench.Common
import Herd
import Herd.Examples.Eden
import System.IO
import Bench.Plot (checkPlotWritable)

-- | Benchmark settings.
data Options = Options
  { optSize       :: Int
  , optIterations :: Int
  , optChunks     :: [Int]
  , optJson       :: Bool
  , optPlot       :: Maybe FilePath
  , optDashboard :: Maybe String  -- ^ serve the live dashboard at this HOST:PORT
  }

-- | Run the benchmark and print its table (and JSON line).
run :: Options -> IO ()
run o = do
  hSetBuffering stdout LineBuffering
  checkPlotWritable "mandelbrot" (optPlot o)
  let size = optSize o
      iters = optIterations o
      expected = sum [ U.sum (U.map fromIntegral (mandelRow (size, iters, y))) | y <- [0 .. size - 1] ] :: Int
      plain cluster = do
        rows <- farm cluster mandelRowTask [ (size, iters, y) | y <- [0 .. size - 1] ]
        pure $! sum (map (U.sum . U.map fromIntegral) rows)
      chunked c cluster = do
        groups <- farm cluster mandelRowsTask [ (size, iters, ys) | ys <- chunksOf c [0 .. size - 1] ]
        pure $! sum (map (U.sum . U.map fromIntegral) (concat groups))
  rows <- fmap concat $ forM [True, False] $ \on -> withChunking (optDashboard o) on id $ \cluster -> do
    _ <- farm cluster mandelRowTask [(size, 10, 0)]   -- warm up
    let one name chunk prog = do
          (secs, total) <- timed (prog cluster)
          when (total /= expected) $ hPutStrLn stderr ("mandelbrot: " ++ name ++ " computed a different picture")
          hPutStrLn stderr ("  " ++ name ++ maybe "" (\c -> " " ++ show c) chunk ++ ", chunking "
                            ++ chunkingName on ++ ": " ++ fixed3 secs ++ " s")
          pure (name, chunk, on, secs)
    p <- one "mandelbrot" Nothing plain
    cs <- forM (optChunks o) $ \c -> one "mandelbrotchunk" (Just c) (chunked c)
    pure (p : cs)
  reportEden "mandelbrot" (show size ++ "x" ++ show size ++ " pixels") rows [] (optJson o) (optPlot o)
  where fixed3 x = show (fromIntegral (round (x * 1000) :: Int) / 1000 :: Double)
