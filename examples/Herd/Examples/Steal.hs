{-# LANGUAGE StaticPointers #-}
-- | The HdpH suite's workloads as one task each whose top levels are
-- children other workers steal ('spawnTask'): a farm of one such task
-- keeps every worker busy, with no division at the master. Below the
-- stealable levels each piece runs as "Herd.Examples.Par" does on its
-- worker. @herd bench par@ and the tests run them.
module Herd.Examples.Steal
  ( nfibSteal
  , nfibStealTask
  , sumEulerSteal
  , sumEulerStealTask
  , queensSteal
  , queensStealTask
  , mandelSteal
  , mandelStealTask
  , treeSteal
  , treeStealTask
  , depthTask
  , relayTask
  , spawnTaskGetTask
  , unitTask
  ) where

import Control.Exception (evaluate)
import GHC.Clock (getMonotonicTime)
import GHC.StaticPtr (StaticPtr)
import System.IO.Unsafe (unsafePerformIO)
import Herd (Task, named, simulatedWork, task)
import Herd.Examples.Par
import Herd.Par

-- | nfib @(n, threshold, cut)@: each call above @cut@ spawns its larger
-- half as a stealable child and computes the smaller itself; from @cut@
-- down, 'nfibPar' with the threshold.
nfibSteal :: (Int, Int, Int) -> Int
nfibSteal (n, t, cut) = runPar (go n)
  where
    go k
      | k <= cut = nfibPar t k
      | otherwise = do
          a <- spawnTask nfibStealTask (k - 1, t, cut)
          b <- go (k - 2)
          x <- get a
          pure (x + b + 1)

-- | 'nfibSteal' as a task.
nfibStealTask :: StaticPtr (Task (Int, Int, Int) Int)
nfibStealTask = static (named "nfib-steal" (task nfibSteal))

-- | sumEuler over a range: halved into a stealable upper half (its
-- totients cost more) and a lower half computed here while wider than
-- 200, then in chunks of 50 as 'sumEulerPar'.
sumEulerSteal :: (Int, Int) -> Int
sumEulerSteal range = runPar (go range)
  where
    go (lo, hi)
      | hi - lo < 200 = sumEulerPar 50 (lo, hi)
      | otherwise = do
          let mid = (lo + hi) `div` 2
          upper <- spawnTask sumEulerStealTask (mid + 1, hi)
          lower <- go (lo, mid)
          x <- get upper
          pure (x + lower)

-- | 'sumEulerSteal' as a task.
sumEulerStealTask :: StaticPtr (Task (Int, Int) Int)
sumEulerStealTask = static (named "sumEuler-steal" (task sumEulerSteal))

-- | n-queens from a placement @(n, placed)@: each placement of the first
-- three rows a stealable child, then 'queensPar' two rows deeper.
queensSteal :: (Int, [Int]) -> Int
queensSteal (n, placed)
  | length placed >= 3 || length placed == n = runPar (queensPar (length placed + 2) n placed)
  | otherwise = runPar $ do
      kids <- mapM (\p -> spawnTask queensStealTask (n, p)) [ c : placed | c <- [1 .. n], fits c ]
      sum <$> mapM get kids
  where
    fits c = and [ c /= q && abs (c - q) /= d | (d, q) <- zip [1 ..] placed ]

-- | 'queensSteal' as a task.
queensStealTask :: StaticPtr (Task (Int, [Int]) Int)
queensStealTask = static (named "queens-steal" (task queensSteal))

-- | Mandelbrot rows @(size, (lo, hi))@: halved into stealable children
-- while more than 16 rows, then in bands of 4 as 'mandelPar'.
mandelSteal :: (Int, (Int, Int)) -> Int
mandelSteal (size, rows) = runPar (go rows)
  where
    go (lo, hi)
      | hi - lo < 16 = mandelPar 4 size (lo, hi)
      | otherwise = do
          let mid = (lo + hi) `div` 2
          top <- spawnTask mandelStealTask (size, (lo, mid))
          bottom <- go (mid + 1, hi)
          x <- get top
          pure (x + bottom)

-- | 'mandelSteal' as a task.
mandelStealTask :: StaticPtr (Task (Int, (Int, Int)) Int)
mandelStealTask = static (named "mandelbrot-steal" (task mandelSteal))

-- | A tree of @leaves@ sleeping leaves of @cost@ seconds @(leaves, cost,
-- cut)@: subtrees above @cut@ leaves spawn their left half as a
-- stealable child; from @cut@ down, 'treePar'. The number of leaves.
treeSteal :: (Int, Double, Int) -> Int
treeSteal (total, cost, cut) = runPar (go total)
  where
    go leaves
      | leaves <= max 1 cut = treePar cost leaves
      | otherwise = do
          let half = leaves `div` 2
          a <- spawnTask treeStealTask (half, cost, cut)
          b <- go (leaves - half)
          x <- get a
          pure $! x + b

-- | 'treeSteal' as a task.
treeStealTask :: StaticPtr (Task (Int, Double, Int) Int)
treeStealTask = static (named "tree-steal" (task treeSteal))

-- | A chain of @depth@ stealable children, each waiting for the next with
-- a 'get' (and adding one): @depth@, whoever runs each level.
depthTask :: StaticPtr (Task Int Int)
depthTask = static (named "depth" (task depthChain))

depthChain :: Int -> Int
depthChain d
  | d <= 0 = 0
  | otherwise = runPar $ do
      v <- spawnTask depthTask (d - 1)
      x <- get v
      pure (x + 1)

-- | A relay of stealable children @(depth, secs)@: each offers the next,
-- then works @secs@ (a sleep on a worker, so its link is served
-- meanwhile) before it waits for it. On two workers the idle one takes
-- the child while its spawner works, and the spawner, waiting, takes the
-- thief's own child in turn: each worker runs children spawned by
-- children it did not run. The depth.
relayTask :: StaticPtr (Task (Int, Double) Int)
relayTask = static (named "relay" (task relay))

relay :: (Int, Double) -> Int
relay (d, secs)
  | d <= 0 = 0
  | otherwise = runPar $ do
      v <- spawnTask relayTask (d - 1, secs)
      w <- pure $! simulatedWork secs (0 :: Int)
      x <- get v
      pure (x + w + 1)

-- | A child that does nothing: its argument back.
unitTask :: StaticPtr (Task Int Int)
unitTask = static (named "unit" (task id))

-- | Microseconds per 'spawnTask' of 'unitTask' and 'get' of it, @k@ of
-- them one after another, timed on the worker that runs it (each child is
-- offered, then taken back at its 'get' unless a thief was quicker).
spawnTaskGetTask :: StaticPtr (Task Int Double)
spawnTaskGetTask = static (named "spawnTaskGet" (task spawnTaskGetMicros))

spawnTaskGetMicros :: Int -> Double
spawnTaskGetMicros k = unsafePerformIO $ do
  t0 <- getMonotonicTime
  _ <- evaluate (runPar (loop 0 0))
  t1 <- getMonotonicTime
  pure ((t1 - t0) * 1e6 / fromIntegral (max 1 k))
  where
    loop :: Int -> Int -> Par Int
    loop i acc
      | i >= k = pure acc
      | otherwise = do
          v <- spawnTask unitTask i
          x <- get v
          loop (i + 1) (acc + x)
{-# NOINLINE spawnTaskGetMicros #-}
