{-# LANGUAGE ScopedTypeVariables #-}
-- | PageRank as datasets: the graph is made on the workers and stays
-- there, each iteration's shares go worker to worker, and only each
-- partition's highest ranks come back at the end.
-- Try: herd-example-ranks --nodes 100000 --iterations 10
module Main (main) where

import Control.Monad (foldM)
import Data.List (sortOn)
import Data.Ord (Down (..))
import Herd.Dataset
import Herd.Options (herdMain)
import Numeric (showFFloat)
import Options.Applicative
import RankTasks

main :: IO ()
main = herdMain "Rank the nodes of a generated graph with PageRank, on every core" settings $ \(nodes, iterations) cluster -> do
  raw <- generateDataset cluster edgesGen nodes 4
  graph <- shuffleDataset cluster byNode 4 raw
  releaseDatasets cluster [raw]
  start <- mapDataset cluster startRanks graph
  final <- foldM (\ranks (_ :: Int) -> do
                    shares <- zipDatasets cluster spreadRanks graph ranks
                    sums <- shuffleDataset cluster sumByTarget 4 shares
                    next <- zipDatasets cluster damp graph sums
                    releaseDatasets cluster [ranks, sums]
                    releaseDatasets cluster [shares]
                    pure next)
                 start [1 .. iterations]
  top <- take 3 . sortOn (Down . snd) . concat <$> queryDataset cluster topRanks 3 final
  putStrLn (unwords [ show u ++ ":" ++ showFFloat (Just 3) r "" | (u, r) <- top ])
  where
    settings = (,) <$> option (positive "a node count") (long "nodes" <> metavar "N" <> value 10000 <> showDefault
                                                         <> help "nodes of the generated graph")
                   <*> option (positive "an iteration count") (long "iterations" <> metavar "N" <> value 10 <> showDefault
                                                               <> help "PageRank iterations")
    positive what = eitherReader $ \s -> case reads s of
      [(n, "")] | n > 0 -> Right n
      _ -> Left ("expected " ++ what ++ " above 0, got " ++ show s)
