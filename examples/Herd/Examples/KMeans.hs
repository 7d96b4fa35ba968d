{-# LANGUAGE BangPatterns, StaticPointers #-}
-- The assignment loop is the whole of the work; -O2 makes it 30% faster
-- than the package default -O1 (16 ns a point against 21).
{-# OPTIONS_GHC -O2 #-}
-- | k-means on points in the plane, the iterative job of @herd bench
-- kmeans@: every iteration assigns each point to its nearest centroid and
-- moves the centroids to the means of their points. The points never
-- change, only the centroids do, so the points can be shared once
-- ('kmeansHeldTask': a task names its slice of the shared points) or
-- sent again with every iteration ('kmeansSentTask': a task carries its
-- slice), or held as slices on the workers ('kmeansRefQuery': each
-- runs where its slice is). All compute the same partial sums, so all runs
-- give the same centroids.
module Herd.Examples.KMeans
  ( Points
  , Centroids
  , Partial
  , makePoints
  , initialCentroids
  , assignPartial
  , combinePartials
  , nextCentroids
  , chunkRanges
  , kmeansHeldTask
  , kmeansSentTask
  , kmeansRefQuery
  ) where

import Control.Monad.ST (runST)
import Data.List (foldl')
import qualified Data.Vector.Unboxed as VU
import qualified Data.Vector.Unboxed.Mutable as VUM
import GHC.StaticPtr (StaticPtr)
import Herd

-- | Points as x0, y0, x1, y1 ...
type Points = VU.Vector Double

-- | Centroids, laid out as points.
type Centroids = VU.Vector Double

-- | Per centroid: the sums of x and y of its points (laid out as points),
-- and how many points it has.
type Partial = (VU.Vector Double, VU.Vector Int)

-- | This many points in k clusters, the same every run (a fixed hash,
-- not a random generator).
makePoints :: Int -> Int -> Points
makePoints k n = VU.generate (2 * n) coordinate
  where
    coordinate j =
      let i = j `div` 2
          c = i `mod` k
          centre = if even j then fromIntegral (c `mod` 4) * 10 else fromIntegral (c `div` 4) * 10
      in centre + noise (j * 7919 + 13)
    noise s = fromIntegral (hash s `mod` 2001) / 1000 - 1
    hash :: Int -> Int
    hash s = let a = (s * 2654435761) `mod` 4294967296 in (a * 40503 + 1) `mod` 2147483647

-- | The first k points as the first centroids.
initialCentroids :: Int -> Points -> Centroids
initialCentroids k = VU.take (2 * k)

-- | The partial sums of the points from index @lo@ (inclusive) to @hi@
-- (exclusive) of these points: one pass, nothing allocated per point.
assignPartial :: Centroids -> Points -> Int -> Int -> Partial
assignPartial cs ps lo hi = runST $ do
  sums <- VUM.replicate (2 * k) 0
  counts <- VUM.replicate k 0
  let loop !p
        | p >= hi = pure ()
        | otherwise = do
            let !x = ps `VU.unsafeIndex` (2 * p)
                !y = ps `VU.unsafeIndex` (2 * p + 1)
                !c = nearest planes x y
            VUM.unsafeModify sums (+ x) (2 * c)
            VUM.unsafeModify sums (+ y) (2 * c + 1)
            VUM.unsafeModify counts (+ 1) c
            loop (p + 1)
  loop lo
  (,) <$> VU.unsafeFreeze sums <*> VU.unsafeFreeze counts
  where
    k = VU.length cs `div` 2
    planes = distancePlanes cs

-- Per centroid c, the three numbers -2cx, -2cy and cx^2 + cy^2: the
-- squared distance from (x, y) to c less x^2 + y^2 (the same for every
-- centroid) is then -2cx*x - 2cy*y + (cx^2 + cy^2). Nearest by this form
-- needs no copies between registers, which GHC's native code generator
-- turns into a chain of dependencies from one centroid to the next; with
-- two centroids a round it assigns points 2.5 times as fast as the plain
-- difference of squares (40 ns a point against 16, k = 8).
distancePlanes :: Centroids -> VU.Vector Double
distancePlanes cs = VU.generate (3 * (VU.length cs `div` 2)) plane
  where
    plane j =
      let (c, r) = j `divMod` 3
          cx = cs VU.! (2 * c)
          cy = cs VU.! (2 * c + 1)
      in case r of { 0 -> -2 * cx; 1 -> -2 * cy; _ -> cx * cx + cy * cy }

-- The index of the centroid nearest (x, y), the first of equals.
nearest :: VU.Vector Double -> Double -> Double -> Int
nearest planes !x !y = go 0 0 (1 / 0)
  where
    !end = VU.length planes
    dist j = (planes `VU.unsafeIndex` j) * x + (planes `VU.unsafeIndex` (j + 1)) * y
             + planes `VU.unsafeIndex` (j + 2)
    go !j !best !bestD
      | j + 3 < end =
          let !d = dist j
              !e = dist (j + 3)
          in if d <= e
               then (if d < bestD then go (j + 6) j d else go (j + 6) best bestD)
               else (if e < bestD then go (j + 6) (j + 3) e else go (j + 6) best bestD)
      | j < end = if dist j < bestD then j `div` 3 else best `div` 3
      | otherwise = best `div` 3
{-# NOINLINE nearest #-}

-- | Add partial sums up.
combinePartials :: [Partial] -> Partial
combinePartials [] = (VU.empty, VU.empty)
combinePartials (p : ps) = foldl' add p ps
  where add (s1, c1) (s2, c2) = (VU.zipWith (+) s1 s2, VU.zipWith (+) c1 c2)

-- | The means of the clusters (a centroid without points stays put).
nextCentroids :: Centroids -> Partial -> Centroids
nextCentroids old (sums, counts) = VU.generate (VU.length old) $ \j ->
  let n = counts VU.! (j `div` 2)
  in if n == 0 then old VU.! j else sums VU.! j / fromIntegral n

-- | Split n points into this many ranges (lo, hi) of nearly equal size.
chunkRanges :: Int -> Int -> [(Int, Int)]
chunkRanges chunks n = [ (n * i `div` c, n * (i + 1) `div` c) | i <- [0 .. c - 1] ]
  where c = max 1 chunks

heldStep :: (Shared Points, (Int, Int), Centroids) -> Partial
heldStep (points, (lo, hi), cs) = assignPartial cs (sharedValue points) lo hi

sentStep :: (Points, Centroids) -> Partial
sentStep (slice, cs) = assignPartial cs slice 0 (VU.length slice `div` 2)

-- | One slice of the shared points, by index range, against the centroids.
kmeansHeldTask :: StaticPtr (Task (Shared Points, (Int, Int), Centroids) Partial)
kmeansHeldTask = static (named "kmeansHeld" (task heldStep))

-- | One slice of points held on a worker ("Herd.Master.Job.Refs"), against the
-- centroids given.
kmeansRefQuery :: StaticPtr (RefQuery Points Centroids Partial)
kmeansRefQuery = static (named "kmeansRef" (refQuery (\slice cs -> assignPartial cs slice 0 (VU.length slice `div` 2))))

-- | One slice of points, carried in the argument, against the centroids.
kmeansSentTask :: StaticPtr (Task (Points, Centroids) Partial)
kmeansSentTask = static (named "kmeansSent" (task sentStep))
