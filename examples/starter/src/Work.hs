{-# LANGUAGE StaticPointers #-}
-- | What the workers run. A function crosses to a worker as a static
-- pointer to a 'Task': write it at top level, in a module other than Main.
module Work (collatzSteps, collatzTask) where

import GHC.StaticPtr (StaticPtr)
import Herd

-- | Steps of the Collatz sequence from n down to 1.
collatzSteps :: Int -> Int
collatzSteps = go 0
  where
    go :: Int -> Int -> Int
    go steps 1 = steps
    go steps k = go (steps + 1) (if even k then k `div` 2 else 3 * k + 1)

-- | 'collatzSteps' as a task the workers can run.
collatzTask :: StaticPtr (Task Int Int)
collatzTask = static (named "collatzSteps" (task collatzSteps))
