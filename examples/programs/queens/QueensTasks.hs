{-# LANGUAGE StaticPointers #-}
-- | N-queens' pieces: a partial placement (one column per row placed,
-- the last row first) is counted on a worker with the Par monad, each
-- placement of the next row a child; the master divides the board's
-- first rows ('queensDivide').
module QueensTasks (countTask, queensDivide, safe) where

import GHC.StaticPtr (StaticPtr)
import Herd
import Herd.Par
import Herd.Skeleton (Divide (..))

-- | Whether a queen in the next row at this column is attacked by none placed.
safe :: Int -> [Int] -> Bool
safe c placed = and [ c /= q && abs (c - q) /= d | (d, q) <- zip [1 ..] placed ]

-- The solutions extending a placement, rows below the cut-off as children.
solutions :: Int -> Int -> [Int] -> Par Int
solutions cutoff n placed
  | length placed == n = pure 1
  | length placed >= cutoff = pure (sequentially placed)
  | otherwise = sum <$> parMapM (solutions cutoff n) [ c : placed | c <- [1 .. n], safe c placed ]
  where
    sequentially p
      | length p == n = 1
      | otherwise = sum [ sequentially (c : p) | c <- [1 .. n], safe c p ]

-- | The solutions of an @(n, placement)@, on a worker.
countTask :: StaticPtr (Task (Int, [Int]) Int)
countTask = static (named "queens" (task (\(n, placed) -> runPar (solutions (length placed + 2) n placed))))

-- | The master places queens a row at a time until the pieces suffice.
queensDivide :: Divide (Int, [Int]) Int
queensDivide = Divide
  { trivial = \(n, placed) -> length placed >= n - 4
  , divide = \(n, placed) -> [ (n, c : placed) | c <- [1 .. n], safe c placed ]
  , combine = \_ counts -> sum counts }
