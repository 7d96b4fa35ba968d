{-# LANGUAGE StaticPointers #-}
-- | The HdpH suite's divide-and-conquer workloads, each three ways: plain
-- sequential code, the Par monad on one worker ("Herd.Par"), and a
-- division at the master ("Herd.Skeleton") whose pieces run as tasks with
-- the Par monad. @herd bench par@ and the tests run them.
module Herd.Examples.Par
  ( -- * nfib
    nfib
  , nfibPar
  , nfibTask
  , nfibDivide
    -- * sumEuler
  , totient
  , sumEuler
  , sumEulerPar
  , sumEulerTask
  , sumEulerDivide
    -- * n-queens
  , queens
  , queensFrom
  , queensPar
  , queensTask
  , queensDivide
    -- * mandelbrot
  , mandelRows
  , mandelPar
  , mandelTask
  , mandelDivide
    -- * A tree of sleeping leaves, for simulated workers
  , treePar
  , treeTask
  , treeDivide
    -- * A node of a graph of futures
  , nodeValue
  , nodeTask
  , sumTask
    -- * The cost of one spawn and get
  , spawnGetLoop
  , spawnGetTask
  ) where

import Control.Exception (evaluate)
import GHC.StaticPtr (StaticPtr)
import Herd (Task, named, simulatedWork, task)
import Herd.Par
import Herd.Skeleton (Divide (..))
import GHC.Clock (getMonotonicTime)
import System.IO.Unsafe (unsafePerformIO)

-- | The number of calls naive Fibonacci makes: every call counts one.
nfib :: Int -> Int
nfib n
  | n < 2 = 1
  | otherwise = nfib (n - 1) + nfib (n - 2) + 1

-- | 'nfib' spawning both calls above the threshold.
nfibPar :: Int -> Int -> Par Int
nfibPar threshold n
  | n <= max 1 threshold = pure (nfib n)
  | otherwise = do
      a <- spawn (nfibPar threshold (n - 1))
      b <- nfibPar threshold (n - 2)
      x <- get a
      pure (x + b + 1)

-- | A piece of nfib: @(n, threshold)@.
nfibTask :: StaticPtr (Task (Int, Int) Int)
nfibTask = static (named "nfib" (task (\(n, t) -> runPar (nfibPar t n))))

-- | nfib divided at the master while a piece is well above its threshold.
nfibDivide :: Divide (Int, Int) Int
nfibDivide = Divide
  { trivial = \(n, t) -> n <= t + 2
  , divide = \(n, t) -> [(n - 1, t), (n - 2, t)]
  , combine = \_ bs -> sum bs + 1 }

-- | Euler's totient, by counting the numbers below coprime to it.
totient :: Int -> Int
totient n = length [ k | k <- [1 .. n], gcd n k == 1 ]

-- | The sum of totients from @lo@ to @hi@.
sumEuler :: (Int, Int) -> Int
sumEuler (lo, hi) = sum (map totient [lo .. hi])

-- | 'sumEuler' in chunks of this size, each a child.
sumEulerPar :: Int -> (Int, Int) -> Par Int
sumEulerPar chunk (lo, hi) = sum <$> parMap sumEuler
  [ (a, min hi (a + chunk - 1)) | a <- [lo, lo + chunk .. hi] ]

-- | A range of sumEuler, in chunks of 50 on its worker.
sumEulerTask :: StaticPtr (Task (Int, Int) Int)
sumEulerTask = static (named "sumEuler" (task (runPar . sumEulerPar 50)))

-- | A range halved at the master (the upper half first: its totients cost more).
sumEulerDivide :: Divide (Int, Int) Int
sumEulerDivide = Divide
  { trivial = \(lo, hi) -> hi - lo < 100
  , divide = \(lo, hi) -> let mid = (lo + hi) `div` 2 in [(mid + 1, hi), (lo, mid)]
  , combine = \_ bs -> sum bs }

-- | The solutions of @n@ queens extending a placement (one column per row
-- placed, the last row first).
queensFrom :: Int -> [Int] -> Int
queensFrom n placed
  | length placed == n = 1
  | otherwise = sum [ queensFrom n (c : placed) | c <- [1 .. n], safe c placed ]

-- Whether a queen in the next row at this column is attacked by none placed.
safe :: Int -> [Int] -> Bool
safe c placed = and [ c /= q && abs (c - q) /= d | (d, q) <- zip [1 ..] placed ]

-- | The solutions of @n@ queens.
queens :: Int -> Int
queens n = queensFrom n []

-- | 'queensFrom' with each placement of the next rows a child, down to
-- this many rows placed.
queensPar :: Int -> Int -> [Int] -> Par Int
queensPar depth n placed
  | length placed >= depth || length placed == n = pure (queensFrom n placed)
  | otherwise = sum <$> parMapM (queensPar depth n) [ c : placed | c <- [1 .. n], safe c placed ]

-- | A partial placement @(n, placed)@, its next two rows as children.
queensTask :: StaticPtr (Task (Int, [Int]) Int)
queensTask = static (named "queens" (task (\(n, placed) -> runPar (queensPar (length placed + 2) n placed))))

-- | Queens divided at the master one row at a time.
queensDivide :: Divide (Int, [Int]) Int
queensDivide = Divide
  { trivial = \(n, placed) -> length placed >= n - 4
  , divide = \(n, placed) -> [ (n, c : placed) | c <- [1 .. n], safe c placed ]
  , combine = \_ bs -> sum bs }

-- | The sum of escape-time iterations (at most 255) over rows @lo@ to
-- @hi@ of a @size@ by @size@ image of the Mandelbrot set.
mandelRows :: Int -> (Int, Int) -> Int
mandelRows size (lo, hi) = sum [ escape (x, y) | y <- [lo .. hi], x <- [0 .. size - 1] ]
  where
    escape (x, y) =
      let cr = -2 + 3 * fromIntegral x / fromIntegral size :: Double
          ci = -1.5 + 3 * fromIntegral y / fromIntegral size
          go :: Int -> Double -> Double -> Int
          go k zr zi
            | k >= 255 || zr * zr + zi * zi > 4 = k
            | otherwise = go (k + 1) (zr * zr - zi * zi + cr) (2 * zr * zi + ci)
      in go 0 0 0

-- | Rows in bands of this many, each a child.
mandelPar :: Int -> Int -> (Int, Int) -> Par Int
mandelPar band size (lo, hi) = sum <$> parMap (mandelRows size)
  [ (a, min hi (a + band - 1)) | a <- [lo, lo + band .. hi] ]

-- | Rows @(size, (lo, hi))@ in bands of 4 on the worker.
mandelTask :: StaticPtr (Task (Int, (Int, Int)) Int)
mandelTask = static (named "mandelbrot" (task (\(size, rows) -> runPar (mandelPar 4 size rows))))

-- | The image halved by rows at the master.
mandelDivide :: Divide (Int, (Int, Int)) Int
mandelDivide = Divide
  { trivial = \(_, (lo, hi)) -> hi - lo < 8
  , divide = \(size, (lo, hi)) -> let mid = (lo + hi) `div` 2 in [(size, (lo, mid)), (size, (mid + 1, hi))]
  , combine = \_ bs -> sum bs }

-- | A binary tree of @leaves@ leaves, each standing for @cost@ seconds of
-- work ('simulatedWork'), every inner node spawning its left half: the
-- number of leaves.
treePar :: Double -> Int -> Par Int
treePar cost leaves
  | leaves <= 1 = pure $! simulatedWork cost 1
  | otherwise = do
      let half = leaves `div` 2
      a <- spawn (treePar cost half)
      b <- treePar cost (leaves - half)
      x <- get a
      pure $! x + b

-- | A subtree @(leaves, cost)@ on its worker.
treeTask :: StaticPtr (Task (Int, Double) Int)
treeTask = static (named "tree" (task (\(leaves, cost) -> runPar (treePar cost leaves))))

-- | The tree halved at the master.
treeDivide :: Divide (Int, Double) Int
treeDivide = Divide
  { trivial = \(leaves, _) -> leaves <= 1
  , divide = \(leaves, cost) -> let half = leaves `div` 2 in [(half, cost), (leaves - half, cost)]
  , combine = \_ bs -> sum bs }

-- | A node's value from its own number and its inputs' values.
nodeValue :: Int -> [Int] -> Int
nodeValue i ins = (i * 31 + sum (zipWith (*) [1 ..] ins)) `mod` 1000003

-- | 'nodeValue' as a task: the node's number first, then its inputs; a
-- negative number throws.
nodeTask :: StaticPtr (Task [Int] Int)
nodeTask = static (named "node" (task node))
  where
    node (i : ins)
      | i < 0 = error ("node " ++ show i ++ " refuses")
      | otherwise = nodeValue i ins
    node [] = 0

-- | The sum of a list, as a task.
sumTask :: StaticPtr (Task [Int] Int)
sumTask = static (named "sum" (task sum))

-- | @k@ spawns, each got at once, of a trivial child: the sum of the
-- children's values.
spawnGetLoop :: Int -> Par Int
spawnGetLoop k = go 0 0
  where
    go i acc
      | i >= k = pure acc
      | otherwise = do
          v <- spawn_ (pure i)
          x <- get v
          go (i + 1) (acc + x)

-- | Microseconds per spawn and get of 'spawnGetLoop' with this many,
-- timed on the worker that runs it.
spawnGetTask :: StaticPtr (Task Int Double)
spawnGetTask = static (named "spawnGet" (task spawnGetMicros))

spawnGetMicros :: Int -> Double
spawnGetMicros k = unsafePerformIO $ do
  t0 <- getMonotonicTime
  _ <- evaluate (runPar (spawnGetLoop k))
  t1 <- getMonotonicTime
  pure ((t1 - t0) * 1e6 / fromIntegral (max 1 k))
{-# NOINLINE spawnGetMicros #-}
