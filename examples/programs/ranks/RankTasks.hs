{-# LANGUAGE StaticPointers #-}
-- | The functions of the ranks example, each on one partition of a
-- dataset where it is held. They live outside Main, as every static
-- function must.
module RankTasks
  ( edgesGen
  , byNode
  , startRanks
  , spreadRanks
  , sumByTarget
  , damp
  , topRanks
  ) where

import Data.List (sortOn)
import qualified Data.Map.Strict as M
import Data.Ord (Down (..))
import GHC.StaticPtr (StaticPtr)
import Herd.Dataset

-- | Nodes @j, j + n, ..@ below the count, each with three out-edges
-- picked by a hash of the node, as (node, targets).
edgesGen :: StaticPtr (DatasetGen Int [(Int, [Int])])
edgesGen = static (partitionGen (\nodes n j -> [ (u, [ mix (u * 3 + k) `mod` nodes | k <- [0 .. 2] ]) | u <- [j, j + n .. nodes - 1] ]))

-- A hash of an edge's number.
mix :: Int -> Int
mix x = (x * 2654435761 + 97) `mod` 4294967291

-- | Each node's edges, partitioned by node (as every shuffle here is, so
-- the graph and the ranks are co-partitioned).
byNode :: StaticPtr (Shuffler [(Int, [Int])] [(Int, [Int])] (M.Map Int [Int]))
byNode = static (keyedShuffler (\(u, es) -> [(u, es)]) (++))

-- | Every node's rank starts at 1.
startRanks :: StaticPtr (DatasetMap (M.Map Int [Int]) (M.Map Int Double))
startRanks = static (partitionMap (M.map (const 1)))

-- | Each node's rank shared out over its edges.
spreadRanks :: StaticPtr (DatasetZip (M.Map Int [Int]) (M.Map Int Double) [(Int, Double)])
spreadRanks = static (partitionZip (\graph ranks ->
  [ (t, r / fromIntegral (length es)) | (u, es) <- M.toList graph, let r = M.findWithDefault 0 u ranks, t <- es ]))

-- | The shares summed per target node.
sumByTarget :: StaticPtr (Shuffler [(Int, Double)] [(Int, Double)] (M.Map Int Double))
sumByTarget = static (keyedShuffler (\p -> [p]) (+))

-- | The new ranks: 0.15 plus 0.85 of the shares (a node nobody links to
-- keeps 0.15).
damp :: StaticPtr (DatasetZip (M.Map Int [Int]) (M.Map Int Double) (M.Map Int Double))
damp = static (partitionZip (\graph sums -> M.mapWithKey (\u _ -> 0.15 + 0.85 * M.findWithDefault 0 u sums) graph))

-- | A partition's highest ranks, this many.
topRanks :: StaticPtr (DatasetQuery (M.Map Int Double) Int [(Int, Double)])
topRanks = static (partitionQuery (\ranks k -> take k (sortOn (Down . snd) (M.toList ranks))))
