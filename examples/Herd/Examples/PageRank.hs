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

-- | The nodes of one range and their out-edges, sorted by target so that
-- spreading the ranks writes the sums in order (and reads only this
-- range's ranks at random): that keeps the step within the caches'
-- reach instead of adding at random all over the graph's sums.
data GraphPart = GraphPart
  { gpTotal   :: !Int                  -- ^ nodes in the whole graph
  , gpDegree  :: !Int
  , gpFirst   :: !Int                  -- ^ the range's first node
  , gpCount   :: !Int                  -- ^ the range's nodes
  , gpTargets :: !(VU.Vector Int32)    -- ^ each edge's target, ascending
  , gpSources :: !(VU.Vector Int32)    -- ^ each edge's source, from the range's first node
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

-- | The edges of range @j@ of @p@.
makeGraphPart :: Size -> Int -> Int -> GraphPart
makeGraphPart (Size n d) p j = GraphPart n d lo len targets sources
  where
    (lo, len) = rangeOf n p j
    edge i = let (u, k) = (lo + i `div` d, i `mod` d) in fromIntegral (mix (fromIntegral (u * 64 + k)) `mod` fromIntegral n) :: Int
    unsorted = VU.generate (len * d) edge
    -- a counting sort of the edges by target (stable: sources ascend within a target)
    (targets, sources) = runST $ do
      counts <- VUM.replicate (n + 1) (0 :: Int)
      VU.forM_ unsorted $ \t -> VUM.unsafeModify counts (+ 1) (t + 1)
      forM_ [1 .. n] $ \t -> VUM.unsafeRead counts (t - 1) >>= \c -> VUM.unsafeModify counts (+ c) t
      ts <- VUM.new (len * d)
      ss <- VUM.new (len * d)
      VU.iforM_ unsorted $ \i t -> do
        at <- VUM.unsafeRead counts t
        VUM.unsafeWrite counts t (at + 1)
        VUM.unsafeWrite ts at (fromIntegral t)
        VUM.unsafeWrite ss at (fromIntegral (i `div` d))
      (,) <$> VU.unsafeFreeze ts <*> VU.unsafeFreeze ss
    mix :: Word64 -> Word64
    mix x0 = let x1 = (x0 `xor` (x0 `shiftR` 30)) * 0xbf58476d1ce4e5b9
                 x2 = (x1 `xor` (x1 `shiftR` 27)) * 0x94d049bb133111eb
             in x2 `xor` (x2 `shiftR` 31)

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

spread :: Int -> RankState -> [VU.Vector Double]
spread p (RankState g ranks _) = [ VU.slice lo len acc | j <- [0 .. p - 1], let (lo, len) = rangeOf (gpTotal g) p j ]
  where acc = VU.create (do v <- VUM.replicate (gpTotal g) 0; scatter g ranks v; pure v)

scatter :: GraphPart -> VU.Vector Double -> VUM.MVector s Double -> ST s ()
scatter g ranks acc = forM_ [0 .. VU.length targets - 1] $ \e -> do
  let !share = VU.unsafeIndex ranks (fromIntegral (VU.unsafeIndex sources e)) * inv
  VUM.unsafeModify acc (+ share) (fromIntegral (VU.unsafeIndex targets e))
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
