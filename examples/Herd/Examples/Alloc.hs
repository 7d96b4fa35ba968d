{-# LANGUAGE StaticPointers #-}
-- | An allocation-heavy task: build a 'Data.Map.Strict.Map' from a
-- pseudo-random key sequence and fold it. Used to choose workers' nursery
-- size (@-A@), which a non-allocating task like naive Fibonacci cannot
-- show.
module Herd.Examples.Alloc
  ( mapBuild
  , mapBuildTask
  ) where

import Data.List (foldl')
import qualified Data.Map.Strict as M
import GHC.StaticPtr (StaticPtr)
import Herd (Task, named, task)

-- | Insert @n@ keys from a linear congruential sequence, then sum the map.
mapBuild :: Int -> Int
mapBuild n = M.foldl' (+) 0 (foldl' insert M.empty (take n (iterate next 12345)))
  where
    next x = (x * 1103515245 + 12345) `mod` 2147483648
    insert m k = M.insertWith (+) (k `mod` (4 * n + 1)) 1 m

-- | 'mapBuild' as a task.
mapBuildTask :: StaticPtr (Task Int Int)
mapBuildTask = static (named "mapBuild" (task mapBuild))
