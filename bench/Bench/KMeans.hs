-- | @herd bench kmeans@: an iterative job whose data does not change. The
-- same k-means run three ways on one cluster: @held@ shares the points
-- once ("Herd.Master.Job.Shared") and sends each iteration only the centroids and
-- index ranges; @refs@ holds the slices on the workers ("Herd.Master.Job.Refs") and
-- runs each iteration's step where its slice is; @resent@ sends every task
-- its slice of points again at every iteration, as a farm alone must. A row gives the
-- seconds (the share included) and the bytes through the master's links,
-- in all and per iteration (the share not included).
--
-- Promise: every mode ends with the same centroids, bit for bit (the
-- bench fails otherwise): they add the same points in the same order.
module Bench.KMeans
  ( Options (..)
  , run
  ) where

import Control.Monad (foldM, forM_, unless, when)
import qualified Data.Vector.Unboxed as VU
import Bench.Common (timed)
import Herd
import Herd.Config
import Herd.Monitor
import Herd.Core.Report
import Herd.Examples.KMeans
import System.Exit (die)
import System.IO

-- | Benchmark settings.
data Options = Options
  { optPoints     :: Int
  , optIterations :: Int
  , optClusters   :: Int   -- ^ k
  , optChunks     :: Int   -- ^ tasks per iteration
  , optWorkers    :: Int
  , optJson       :: Bool
  }

data Row = Row
  { rowMode    :: String
  , rowSeconds :: Double
  , rowBytes   :: Int   -- ^ through the master, in all
  , rowPerIter :: Double  -- ^ through the master per iteration, the share not included
  , rowResult  :: Centroids
  }

-- | Run the benchmark: one row per mode.
run :: Options -> IO ()
run o = do
  hSetBuffering stdout LineBuffering
  let n = optPoints o
      k = optClusters o
      points = makePoints k n
      start = initialCentroids k points
      ranges = chunkRanges (optChunks o) n
      slice lo hi = VU.slice (2 * lo) (2 * (hi - lo)) points
      cfg = defaultConfig { configWorkers = Just (optWorkers o) }
  _ <- pure $! VU.length points
  rows <- withCluster cfg $ \cluster -> do
    True <- waitForWorkers cluster (optWorkers o) 60
    held <- measure cluster "held" $ do
      shared <- share cluster points
      b0 <- masterBytes cluster
      cs <- foldM (\cs _ -> nextCentroids cs . combinePartials
                              <$> farm cluster kmeansHeldTask [ (shared, r, cs) | r <- ranges ])
                  start [1 .. optIterations o]
      b1 <- masterBytes cluster
      unshare cluster shared
      pure (cs, b1 - b0)
    refs <- measure cluster "refs" $ do
      slices <- putRefs cluster [ slice lo hi | (lo, hi) <- ranges ]
      b0 <- masterBytes cluster
      cs <- foldM (\cs _ -> nextCentroids cs . combinePartials
                              <$> queryRefs cluster kmeansRefQuery [ (s, cs) | s <- slices ])
                  start [1 .. optIterations o]
      b1 <- masterBytes cluster
      releaseMany cluster slices
      pure (cs, b1 - b0)
    resent <- measure cluster "resent" $ do
      b0 <- masterBytes cluster
      cs <- foldM (\cs _ -> nextCentroids cs . combinePartials
                              <$> farm cluster kmeansSentTask [ (slice lo hi, cs) | (lo, hi) <- ranges ])
                  start [1 .. optIterations o]
      b1 <- masterBytes cluster
      pure (cs, b1 - b0)
    pure [held, refs, resent]
  let [held, _, resent] = rows
  forM_ rows $ \r -> unless (rowResult r == rowResult held) $
    die ("kmeans: the modes disagree: " ++ rowMode r ++ " gives " ++ show (rowResult r) ++ ", held " ++ show (rowResult held))
  putStr $ renderTable ["mode", "seconds", "master MB", "master KB/iteration", "x held"]
    [ [ rowMode r, fixed 3 (rowSeconds r), fixed 1 (fromIntegral (rowBytes r) / 1e6), fixed 1 (rowPerIter r / 1e3)
      , fixed 2 (rowSeconds r / rowSeconds held) ]
    | r <- rows ]
  putStrLn ("centroids: " ++ unwords [ "(" ++ fixed 2 x ++ "," ++ fixed 2 y ++ ")"
                                     | [x, y] <- pairs (VU.toList (rowResult held)) ])
  when (optJson o) $ putStrLn $ renderJson $ JObject
    [ ("bench", JString "kmeans")
    , ("points", JInt (fromIntegral n)), ("iterations", JInt (fromIntegral (optIterations o)))
    , ("rows", JArray [ JObject [ ("mode", JString (rowMode r)), ("seconds", JNumber (rowSeconds r))
                                , ("master_bytes", JInt (fromIntegral (rowBytes r)))
                                , ("master_bytes_per_iteration", JNumber (rowPerIter r)) ]
                      | r <- rows ])
    , ("speedup", JNumber (rowSeconds resent / rowSeconds held)) ]
  where
    pairs (x : y : rest) = [x, y] : pairs rest
    pairs _ = []
    measure cluster mode act = do
      before <- masterBytes cluster
      (secs, (cs, iterBytes)) <- timed act
      after <- masterBytes cluster
      hPutStrLn stderr ("  " ++ mode ++ ": " ++ fixed 3 secs ++ " s")
      pure Row { rowMode = mode, rowSeconds = secs, rowBytes = after - before
               , rowPerIter = fromIntegral iterBytes / fromIntegral (max 1 (optIterations o)), rowResult = cs }

-- Bytes the master's links carried both ways, so far.
masterBytes :: Cluster -> IO Int
masterBytes cluster = do
  s <- clusterStatus cluster
  pure (sum [ bytesSent p + bytesReceived p | r <- statusWorkers s, Just p <- [rowLink r] ])
