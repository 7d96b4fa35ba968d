-- | @herd bench parsort@: Eden's parallel sort. @parsort@ is the plain
-- program (one sorting stream process per worker, fed element by element,
-- merged by the caller); @parsortchunk@ sends the input in chunks of a
-- given size; @parsortchunk2@ also sorts and returns each chunk separately
-- and merges them in the caller. Each runs with dynamic chunking on and
-- off.
module Bench.Parsort
  ( Options (..)
  , run
  , parsort
  ) where

import Control.DeepSeq (force)
import Control.Exception (evaluate)
import Control.Monad (forM, replicateM_, when)
import Data.List (sort)
import Bench.Common
import Bench.Plot (checkPlotWritable)
import Herd
import Herd.Examples.Eden
import Herd.Core.Report
import System.IO

-- | Benchmark settings.
data Options = Options
  { optN      :: Int
  , optChunks :: [Int]
  , optJson   :: Bool
  , optPlot   :: Maybe FilePath
  , optDashboard :: Maybe String  -- ^ serve the live dashboard at this HOST:PORT
  }

-- | The plain program: as many sorters as workers, merged.
parsort :: Cluster -> Int -> [Int] -> IO [Int]
parsort cluster pes xs = do
  outs <- mapM (instantiate cluster sortProcess) (unshuffle pes xs)
  evaluate (force (mergeAll outs))

parsortChunk :: Cluster -> Int -> Int -> [Int] -> IO [Int]
parsortChunk cluster pes size xs = do
  outs <- mapM (instantiate cluster sortConcatProcess . chunksOf size) (unshuffle pes xs)
  evaluate (force (mergeAll outs))

parsortChunk2 :: Cluster -> Int -> Int -> [Int] -> IO [Int]
parsortChunk2 cluster pes size xs = do
  outs <- mapM (instantiate cluster sortEachProcess . chunksOf size) (unshuffle pes xs)
  evaluate (force (mergeAll (concat outs)))

-- | Run the benchmark and print its table (and JSON line).
run :: Options -> IO ()
run o = do
  hSetBuffering stdout LineBuffering
  checkPlotWritable "parsort" (optPlot o)
  let n = optN o
      input = force (take n (iterate (\x -> (x * 1103515245 + 12345) `mod` 2147483648) 42)) :: [Int]
      expected = sort input
  _ <- evaluate (length expected)
  results <- forM [True, False] $ \on -> withChunking (optDashboard o) on id $ \cluster -> do
    pes <- clusterWorkerCount cluster
    -- warm up with whole runs ('warmRuns'), then each program's median of three
    warmUp cluster
    replicateM_ warmRuns (parsort cluster pes input >>= evaluate . length)
    let one name chunk prog = do
          (secs, ys) <- medianTimed 3 (prog cluster pes input)
          when (ys /= expected) $ hPutStrLn stderr ("parsort: " ++ name ++ " sorted wrongly")
          hPutStrLn stderr ("  " ++ name ++ maybe "" (\c -> " " ++ show c) chunk ++ ", chunking "
                            ++ chunkingName on ++ ": " ++ fixed 3 secs ++ " s")
          pure (name, chunk, on, secs)
    plain <- one "parsort" Nothing parsort
    chunked <- forM (optChunks o) $ \c -> one "parsortchunk" (Just c) (\cl p -> parsortChunk cl p c)
    chunked2 <- forM (optChunks o) $ \c -> one "parsortchunk2" (Just c) (\cl p -> parsortChunk2 cl p c)
    pure (pes, plain : chunked ++ chunked2)
  -- what the children's sorting alone costs, whole shares against the
  -- best parsortchunk2's chunks, timed here in one process (the master's,
  -- whose runtime settings are not a worker's): when the workers are the
  -- limit, this ratio bounds how near plain parsort can come to the best
  -- static variant, however cheap its messages are
  let rows = concatMap snd results
      pes = max 1 (minimum (map fst results))
      shares = unshuffle pes input
      chunk2 = [ (s, c) | ("parsortchunk2", Just c, _, s) <- rows ]
      bestChunk = if null chunk2 then 10000 else snd (minimum chunk2)
      -- each run sorts lists made fresh before its timing starts, so no
      -- run reuses a sort made by the one before
      sortTime arrange = fmap median $ forM [1 .. 5 :: Int] $ \k -> do
        fresh <- evaluate (force (map (map (+ k)) shares))
        fst <$> timed (evaluate (force (map arrange fresh)))
  whole <- sortTime (\share -> [sort share])
  chunked <- sortTime (map sort . chunksOf bestChunk)
  let plainOn = head ([ s | ("parsort", Nothing, True, s) <- rows ] ++ [0])
      -- the shares sort side by side on the workers
      sortWall = whole / fromIntegral pes
      floorRatio = whole / max 1e-9 chunked
      plainOverFloor = plainOn / max 1e-9 sortWall
  putStrLn ("the children's sorting alone (" ++ show pes ++ " shares, one after the other in this process): whole "
            ++ fixed 3 whole ++ " s, in chunks of " ++ show bestChunk ++ " " ++ fixed 3 chunked
            ++ " s; ratio " ++ fixed 2 floorRatio
            ++ "; plain parsort with dynamic chunking against its whole shares' sorting side by side ("
            ++ fixed 3 sortWall ++ " s): " ++ fixed 2 plainOverFloor)
  reportEden "parsort" ("n = " ++ show n) rows
    [ ("sort_whole_s", JNumber whole), ("sort_chunked_s", JNumber chunked), ("sort_chunk", JNumber (fromIntegral bestChunk))
    , ("sort_floor_ratio", JNumber floorRatio), ("plain_over_sort_floor", JNumber plainOverFloor) ]
    (optJson o) (optPlot o)

