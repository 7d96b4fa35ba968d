{-# OPTIONS_GHC -fno-full-laziness #-}
-- | @herd bench pagerank@: PageRank on a generated graph, in one process
-- and on the cluster's workers as datasets ("Herd.Dataset"): the graph is
-- made on the workers and stays there with its ranks, each iteration's
-- contributions go worker to worker, and only each range's change comes
-- to the master. A row gives the seconds for all iterations and the
-- bytes per iteration through the master's links (relayed parts
-- included) and carried from worker to worker.
--
-- The one-process run goes before the cluster starts and again after it
-- stops, the cluster's rounds between, each on the same graph (made
-- before the clock starts); a row gives the best of its runs: the
-- machine is shared and noisy, and the best of each is the fairest ratio.
--
-- The workers take a heap reserve (256 MiB by default): each holds its
-- graph and ranks, and every iteration makes megabytes of sums that die
-- an iteration later, so without one each major collection gives memory
-- back that the next iteration touches afresh (page faults in the
-- kernel). On this benchmark's 2-core VM the reserve cut an iteration by
-- 6-10%; @--worker-heap-reserve 0@ measures without it.
--
-- Promise: the cluster's ranks equal the one-process ranks within 1e-12
-- relative (the bench fails otherwise).
module Bench.PageRank
  ( Options (..)
  , run
  ) where

import Control.Exception (evaluate)
import Control.Monad (foldM, forM, unless, when)
import qualified Data.Vector.Unboxed as VU
import Bench.Common (timed)
import Herd
import Herd.Config
import Herd.Dataset
import Herd.Core.Report
import Herd.Examples.PageRank
import System.Exit (die)
import System.IO

-- | Benchmark settings.
data Options = Options
  { optNodes      :: Int
  , optDegree     :: Int
  , optIterations :: Int
  , optPartitions :: Maybe Int   -- ^ default: one per worker
  , optWorkers    :: Int
  , optRounds     :: Int
  , optReserve    :: Int         -- ^ each worker's heap reserve, MiB ('configWorkerHeapReserve')
  , optJson       :: Bool
  }

-- | Run the benchmark: the one-process row, then the datasets row.
run :: Options -> IO ()
run o = do
  hSetBuffering stdout LineBuffering
  let size = Size (optNodes o) (optDegree o)
      parts = maybe (optWorkers o) id (optPartitions o)
      iters = optIterations o
  localGraph <- evaluate (forceParts [ makeGraphPart size parts j | j <- [0 .. parts - 1] ])
  let cfg = defaultConfig { configWorkers = Just (optWorkers o), configWorkerHeapReserve = optReserve o }
  let local r = do
        (t, (v, _)) <- timed (localRun r size localGraph iters)
        hPutStrLn stderr ("  one-process: " ++ fixed 3 t ++ " s")
        pure (t, v)
  (tFirst, localRanks) <- local 1
  (results, graphBytes) <- withCluster cfg $ \cluster -> do
    True <- waitForWorkers cluster (optWorkers o) 60
    (graph, graphCost) <- withTraffic cluster (generateDataset cluster graphGen size parts)
    rounds <- forM [1 .. optRounds o] $ \r -> do
      start <- mapDataset cluster initialState graph
      (final, cost) <- withTraffic cluster (foldM (iteration cluster) start [1 .. iters])
      hPutStrLn stderr ("  round " ++ show r ++ ": datasets " ++ fixed 3 (trafficSeconds cost) ++ " s")
      ranks <- VU.concat <$> (collectDataset cluster =<< mapDataset cluster ranksOf final)
      releaseDatasets cluster [final]
      pure (trafficSeconds cost, trafficMasterBytes cost, trafficRelayedBytes cost + trafficHandedBytes cost, ranks)
    pure (rounds, trafficMasterBytes graphCost)
  (tLast, _) <- local 2
  let tLocal = min tFirst tLast
      (tHerd, masterB, workerB, ranks) = minimum results
  let worst = VU.maximum (VU.zipWith (\a b -> abs (a - b) / max 1e-300 (abs b)) ranks localRanks)
  unless (VU.length ranks == VU.length localRanks && worst <= 1e-12) $
    die ("pagerank: the cluster's ranks differ from one process's by " ++ show worst ++ " relative")
  let perIter b = fromIntegral b / fromIntegral (max 1 iters) :: Double
      rows = [ ("one-process", tLocal, 0, 0), ("datasets", tHerd, perIter masterB, perIter workerB) ]
  putStr $ renderTable ["mode", "seconds", "master KB/iter", "worker KB/iter", "x one-process"]
    [ [ m, fixed 3 t, fixed 1 (mb / 1e3), fixed 1 (wb / 1e3), fixed 2 (tLocal / t) ] | (m, t, mb, wb) <- rows ]
  putStrLn (show (optNodes o) ++ " nodes x " ++ show (optDegree o) ++ " edges, " ++ show iters ++ " iterations, "
            ++ show parts ++ " partitions, workers' heap reserve " ++ show (optReserve o) ++ " MiB; ranks agree within "
            ++ show worst ++ " relative")
  when (optJson o) $ putStrLn $ renderJson $ JObject
    [ ("bench", JString "pagerank")
    , ("nodes", JInt (fromIntegral (optNodes o))), ("degree", JInt (fromIntegral (optDegree o)))
    , ("iterations", JInt (fromIntegral iters)), ("partitions", JInt (fromIntegral parts))
    , ("workers", JInt (fromIntegral (optWorkers o))), ("worker_heap_reserve_mib", JInt (fromIntegral (optReserve o)))
    , ("max_relative_difference", JNumber worst)
    , ("rows", JArray [ JObject [ ("mode", JString m), ("seconds", JNumber t)
                                , ("master_bytes_per_iteration", JNumber mb), ("worker_bytes_per_iteration", JNumber wb) ]
                      | (m, t, mb, wb) <- rows ])
    , ("graph_master_bytes", JInt (fromIntegral graphBytes)), ("rounds", JInt (fromIntegral (optRounds o)))
    , ("speedup", JNumber (tLocal / tHerd)) ]
  where
    iteration cluster st _ = do
      sums <- shuffleDataset cluster contributions (datasetPartitions st) st
      next <- zipDatasets cluster damped st sums
      _ <- queryDataset cluster rankDelta () next
      releaseDatasets cluster [sums]
      releaseDatasets cluster [st]
      pure next

-- The one-process run of a round (the round keeps it from being shared
-- between rounds).
localRun :: Int -> Size -> [GraphPart] -> Int -> IO (VU.Vector Double, [Double])
localRun r size graph iters = do
  let out@(v, ds) = pageRankLocal size graph (iters + 0 * r)
  _ <- evaluate (VU.sum v + sum ds)
  pure out
{-# NOINLINE localRun #-}

-- The edges of every range, evaluated.
forceParts :: [GraphPart] -> [GraphPart]
forceParts gs = foldr (\g rest -> VU.length (gpTargets g) `seq` rest) gs gs
