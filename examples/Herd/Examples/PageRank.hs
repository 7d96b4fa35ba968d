{-# LANGUAGE BangPatterns, DeriveGeneric, StaticPointers #-}
{-# OPTIONS_GHC -O2 #-}
-- | PageRank, the iterative job of @herd bench pagerank@, on a graph
-- made from its size alone (the same on every run): node @u@ has
-- @degree@ out-edges to nodes picked by a hash of @(u, k)@. The graph is
-- cut into ranges of nodes; a range's edges and ranks live together in
-- one partition ('RankState') that stays on its worker. Each iteration
-- spreads every node's rank over its out-edges into one dense vector per
-- range ('contributions', a shuffle whose parts go worker to worker),
-- sums a range's vectors and damps them beside the old ranks
-- ('damped'), and brings back only each range's change ('rankDelta').
--
-- 'pageRankLocal' is the same arithmetic in one process, over the same
-- ranges in the same order, so the two agree to rounding.
module Herd.Examples.PageRank
  ( GraphPart (..)
  , RankState (..)
  , Size (..)
  , rangeOf
  , makeGraphPart
  , graphGen
  , initialState
  , contributions
  , damped
  , rankDelta
  , ranksOf
  , pageRankLocal
  , damping
  ) where

import Control.Monad (forM_)
import Control.Monad.ST (ST, runST)
import Data.Bits (shiftR, xor)
import Data.Int (Int32)
import Data.List (foldl')
import Data.Store (Store)
import qualified Data.Vector.Unboxed as VU
import qualified Data.Vector.Unboxed.Mutable as VUM
import Data.Word (Word64)
import GHC.Generics (Generic)
import GHC.StaticPtr (StaticPtr)
import Herd.Dataset

-- | The graph's size: nodes, and out-edges per node.
data Size = Size { sizeNodes :: !Int, sizeDegree :: !Int }
  deriving (Eq, Show, Generic)

instance Store Size

-- | The nodes of one range and their out-edges, in tiles: the edges
-- into one tile of targets ('tileTargets' nodes) from one block of this
-- range's nodes ('blockSources' nodes) are one run, sorted by target
-- (sources ascending within a target), the runs ordered by tile, then
-- block. Spreading the ranks a run at a time reads a block's ranks within
-- a core's own cache and writes a tile's sums in order: the step is then
-- bound by streaming the edges, not by misses two cores would fight over
-- in the cache they share. Each target still adds its shares in the order
-- of their sources.
data GraphPart = GraphPart
  { gpTotal   :: !Int                  -- ^ nodes in the whole graph
  , gpDegree  :: !Int
  , gpFirst   :: !Int                  -- ^ the range's first node
  , gpCount   :: !Int                  -- ^ the range's nodes
  , gpTargets :: !(VU.Vector Int32)    -- ^ each edge's target
  , gpSources :: !(VU.Vector Int32)    -- ^ each edge's source, from the range's first node
  , gpRuns    :: !(VU.Vector Int)      -- ^ where each (tile, block) run starts, and the edges' count
  } deriving (Eq, Show, Generic)

instance Store GraphPart

-- | A range's edges, its ranks, and how far they moved in the last step.
data RankState = RankState
  { rsGraph :: !GraphPart
  , rsRanks :: !(VU.Vector Double)
  , rsDelta :: !Double
  } deriving (Eq, Show, Generic)

instance Store RankState

-- | The damping factor.
damping :: Double
damping = 0.85

-- | Range @j@ of @p@ over @n@ nodes: its first node and its length.
rangeOf :: Int -> Int -> Int -> (Int, Int)
rangeOf n p j = let lo = n * j `div` p; hi = n * (j + 1) `div` p in (lo, hi - lo)

-- | Targets per tile and sources per block: a block's ranks, read at
-- random, are 1 MiB (a core's own cache); a tile's sums, written in
-- order, are 4 MiB (measured best of 2^15 to 2^20 each).
tileTargets, blockSources :: Int
tileTargets = 524288
blockSources = 131072

-- | The edges of range @j@ of @p@.
makeGraphPart :: Size -> Int -> Int -> GraphPart
makeGraphPart (Size n d) p j = GraphPart n d lo len targets sources runs
  where
    (lo, len) = rangeOf n p j
    edge i = let (u, k) = (lo + i `div` d, i `mod` d) in fromIntegral (mix (fromIntegral (u * 64 + k)) `mod` fromIntegral n) :: Int
    blocks = (len + blockSources - 1) `div` blockSources
    tiles = (n + tileTargets - 1) `div` tileTargets
    runOf t s = (t `div` tileTargets) * blocks + s `div` blockSources
    -- two stable counting sorts: by target, then by run
    (byTarget, _) = countingSort n (\i -> edge i) (VU.generate (len * d) id)
    (order, runs) = countingSort (tiles * blocks) (\i -> runOf (edge i) (i `div` d)) byTarget
    targets = VU.map (fromIntegral . edge) order
    sources = VU.map (\i -> fromIntegral (i `div` d)) order
    mix :: Word64 -> Word64
    mix x0 = let x1 = (x0 `xor` (x0 `shiftR` 30)) * 0xbf58476d1ce4e5b9
                 x2 = (x1 `xor` (x1 `shiftR` 27)) * 0x94d049bb133111eb
             in x2 `xor` (x2 `shiftR` 31)

-- The elements in order of their keys (below @keys@), equal keys in the
-- order given; and where each key's run starts, then the length.
countingSort :: Int -> (Int -> Int) -> VU.Vector Int -> (VU.Vector Int, VU.Vector Int)
countingSort keys key xs = runST $ do
  counts <- VUM.replicate (keys + 1) (0 :: Int)
  VU.forM_ xs $ \x -> VUM.unsafeModify counts (+ 1) (key x + 1)
  forM_ [1 .. keys] $ \k -> VUM.unsafeRead counts (k - 1) >>= \c -> VUM.unsafeModify counts (+ c) k
  starts <- VU.freeze counts
  out <- VUM.new (VU.length xs)
  VU.forM_ xs $ \x -> do
    at <- VUM.unsafeRead counts (key x)
    VUM.unsafeWrite counts (key x) (at + 1)
    VUM.unsafeWrite out at x
  (,) <$> VU.unsafeFreeze out <*> pure starts

-- | Each range's edges, made on the worker that holds them.
graphGen :: StaticPtr (DatasetGen Size GraphPart)
graphGen = static (partitionGen makeGraphPart)

-- | Every rank 1/n to start.
initialState :: StaticPtr (DatasetMap GraphPart RankState)
initialState = static (partitionMap (\g -> RankState g (VU.replicate (gpCount g) (1 / fromIntegral (gpTotal g))) 0))

-- | A range's ranks spread over its out-edges, cut into one dense vector
-- of sums per range of the @p@.
contributions :: StaticPtr (Shuffler RankState (VU.Vector Double) (VU.Vector Double))
contributions = static (shuffler spread sumParts)

-- Each range's sums are made on their own, from the runs of edges into
-- the range's tiles, so the worker can send the others' sums on their way
-- before it makes the sums it keeps.
spread :: Int -> RankState -> [VU.Vector Double]
spread p (RankState g ranks _) = [ sumsInto (rangeOf (gpTotal g) p j) | j <- [0 .. p - 1] ]
  where
    blocks = (gpCount g + blockSources - 1) `div` blockSources
    sumsInto (lo, len) = VU.create $ do
      acc <- VUM.replicate len 0
      forM_ [lo `div` tileTargets .. (lo + len - 1) `div` tileTargets] $ \t ->
        forM_ [t * blocks .. t * blocks + blocks - 1] $ \r -> do
          let (from, to) = (VU.unsafeIndex (gpRuns g) r, VU.unsafeIndex (gpRuns g) (r + 1))
          scatter g ranks lo (firstEdgeTo g lo from to) (firstEdgeTo g (lo + len) from to) acc
      pure acc

-- The first edge of a run whose target is at least this node (the run's
-- end if none is).
firstEdgeTo :: GraphPart -> Int -> Int -> Int -> Int
firstEdgeTo g t = go
  where
    targets = gpTargets g
    go lo hi | lo >= hi = lo
             | fromIntegral (VU.unsafeIndex targets mid) < t = go (mid + 1) hi
             | otherwise = go lo mid
      where mid = (lo + hi) `div` 2

-- Add the shares of edges @from@ to @to@ (whose targets are from node
-- @base@ on) into the sums.
scatter :: GraphPart -> VU.Vector Double -> Int -> Int -> Int -> VUM.MVector s Double -> ST s ()
scatter g ranks base from to acc = forM_ [from .. to - 1] $ \e -> do
  let !share = VU.unsafeIndex ranks (fromIntegral (VU.unsafeIndex sources e)) * inv
  VUM.unsafeModify acc (+ share) (fromIntegral (VU.unsafeIndex targets e) - base)
  where
    inv = 1 / fromIntegral (gpDegree g) :: Double
    targets = gpTargets g
    sources = gpSources g

-- A range's sums, one vector from each range in order, added up.
sumParts :: [VU.Vector Double] -> VU.Vector Double
sumParts [] = VU.empty
sumParts (v : vs) = foldl' (VU.zipWith (+)) v vs

-- | The new ranks of a range from its sums, beside its edges, and how far
-- they moved.
damped :: StaticPtr (DatasetZip RankState (VU.Vector Double) RankState)
damped = static (partitionZip step)
  where
    step (RankState g old _) sums =
      let new = dampOf (gpTotal g) sums
      in RankState g new (VU.sum (VU.zipWith (\a b -> abs (a - b)) new old))

dampOf :: Int -> VU.Vector Double -> VU.Vector Double
dampOf n = VU.map (\s -> (1 - damping) / fromIntegral n + damping * s)

-- | How far a range's ranks moved in the last step.
rankDelta :: StaticPtr (DatasetQuery RankState () Double)
rankDelta = static (partitionQuery (\st () -> rsDelta st))

-- | A range's ranks.
ranksOf :: StaticPtr (DatasetMap RankState (VU.Vector Double))
ranksOf = static (partitionMap rsRanks)

-- | PageRank in one process over the ranges' edges ('makeGraphPart'
-- for each range, in order): the same sums in the same order, for this
-- many iterations; the ranks and each step's change.
pageRankLocal :: Size -> [GraphPart] -> Int -> (VU.Vector Double, [Double])
pageRankLocal size parts iterations = go iterations start []
  where
    n = sizeNodes size
    p = length parts
    start = VU.replicate n (1 / fromIntegral n)
    go 0 ranks deltas = (ranks, reverse deltas)
    go k ranks deltas =
      let perPart = [ spread p (RankState g (VU.slice (gpFirst g) (gpCount g) ranks) 0) | g <- parts ]
          sums = VU.concat [ sumParts [ cut !! j | cut <- perPart ] | j <- [0 .. p - 1] ]
          new = dampOf n sums
          delta = VU.sum (VU.zipWith (\a b -> abs (a - b)) new ranks)
      in new `seq` go (k - 1) new (delta : deltas)
