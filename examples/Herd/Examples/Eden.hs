{-# LANGUAGE BangPatterns #-}
{-# LANGUAGE StaticPointers #-}
-- | The programs of Berthold's "Dynamic Chunking in Eden", and the tiny
-- task of the throughput benchmark, as static tasks and processes.
--
-- Each program comes in the forms the paper compares: written plainly
-- (one list element per message) and with hand-made static chunks.
module Herd.Examples.Eden
  ( -- * Tiny tasks
    incrementTask
    -- * Warming up
  , warmTask
  , churn
    -- * Echo
  , echoProcess
  , wordsItem
    -- * Sorting
  , sortProcess
  , sortConcatProcess
  , sortEachProcess
  , unshuffle
  , chunksOf
  , mergeAll
    -- * Mandelbrot
  , MandelSpec (..)
  , mandelRow
  , mandelRowTask
  , mandelRowsTask
  ) where

import Data.List (sort)
import qualified Data.Vector.Unboxed as U
import Data.Word (Word16)
import GHC.StaticPtr (StaticPtr)
import Herd (Process, named, process)
import Herd (Task, task)

-- | @x -> x + 1@: a task that costs nothing, so only herd's own cost shows.
incrementTask :: StaticPtr (Task Int Int)
incrementTask = static (named "increment" (task (+ (1 :: Int))))

-- | Allocate about this many megabytes of short-lived list cells; their
-- sum. A benchmark runs it on every worker first, so that the workers'
-- first touch of their nurseries (12-15 us a page on a virtual machine)
-- is not what it measures.
warmTask :: StaticPtr (Task Int Int)
warmTask = static (named "warm" (task churn))

-- | 'warmTask''s work, for the master's own heap.
churn :: Int -> Int
churn mb = sum (countTo (mb * 26000))

-- Not inlined, so the list is built (and dies young) instead of fusing
-- into a loop that allocates nothing.
countTo :: Int -> [Int]
countTo n = [1 .. n]
{-# NOINLINE countTo #-}

-- | Eden's @echo = process id@, over items of machine words.
echoProcess :: StaticPtr (Process (U.Vector Int) (U.Vector Int))
echoProcess = static (named "echo" (process id))

-- | An item of this many machine words (a length word plus @w - 1@ data
-- words, so one word is the smallest item).
wordsItem :: Int -> Int -> U.Vector Int
wordsItem w i = U.generate (max 0 (w - 1)) (+ i)

-- | Eden's @parsort@ child: sort a stream of numbers.
sortProcess :: StaticPtr (Process Int Int)
sortProcess = static (named "sort" (process sort))

-- | @parsortchunk@'s child: input arrives in chunks, output goes back
-- element by element.
sortConcatProcess :: StaticPtr (Process [Int] Int)
sortConcatProcess = static (named "sort . concat" (process (sort . concat)))

-- | @parsortchunk2@'s child: sort each chunk; the caller merges them.
sortEachProcess :: StaticPtr (Process [Int] [Int])
sortEachProcess = static (named "map sort" (process (map sort)))

-- | Deal a list round robin into @n@ sublists (Eden's @unshuffleN@).
unshuffle :: Int -> [a] -> [[a]]
unshuffle n xs = [ every (drop i xs) | i <- [0 .. n - 1] ]
  where every ys = case ys of
          [] -> []
          (y : rest) -> y : every (drop (n - 1) rest)

-- | Cut a list into pieces of @k@ (Eden's @chunk@).
chunksOf :: Int -> [a] -> [[a]]
chunksOf _ [] = []
chunksOf k xs = let (a, b) = splitAt k xs in a : chunksOf k b

-- | Merge sorted lists pairwise, as a balanced tree (Eden's @lmerge@).
mergeAll :: [[Int]] -> [Int]
mergeAll [] = []
mergeAll [xs] = xs
mergeAll xss = mergeAll (pairs xss)
  where
    pairs (a : b : rest) = merge a b : pairs rest
    pairs rest = rest
    merge as@(a : at) bs@(b : bt)
      | a <= b = a : merge at bs
      | otherwise = b : merge as bt
    merge as [] = as
    merge [] bs = bs

-- | A Mandelbrot picture: its size in pixels and the iteration cap.
data MandelSpec = MandelSpec
  { mandelSize :: !Int
  , mandelIterations :: !Int
  } deriving (Eq, Show)

-- | One row of the picture over [-2, 1] x [-1.5, 1.5]: iterations per pixel.
mandelRow :: (Int, Int, Int) -> U.Vector Word16
mandelRow (size, iters, y) = U.generate size pixel
  where
    ci = 1.5 - 3 * fromIntegral y / fromIntegral size :: Double
    pixel x = fromIntegral (go 0 0 0 :: Int)
      where
        cr = -2 + 3 * fromIntegral x / fromIntegral size :: Double
        go !zr !zi !k
          | k >= iters || zr * zr + zi * zi > 4 = k
          | otherwise = go (zr * zr - zi * zi + cr) (2 * zr * zi + ci) (k + 1)

-- | One row per task: @(size, iterations, row)@.
mandelRowTask :: StaticPtr (Task (Int, Int, Int) (U.Vector Word16))
mandelRowTask = static (named "mandelRow" (task mandelRow))

-- | Several rows per task (static chunking): @(size, iterations, rows)@.
mandelRowsTask :: StaticPtr (Task (Int, Int, [Int]) [U.Vector Word16])
mandelRowsTask = static (named "mandelRows" (task (\(s, i, ys) -> [ mandelRow (s, i, y) | y <- ys ])))
