{-# LANGUAGE StaticPointers #-}
-- | The sweep's task: Newton's method for a root of x^3 - 2x + 2 from one
-- starting point. From some starts it never settles (from 0 it jumps to
-- 1 and back forever); it then throws, naming the start, and the farm
-- reports that start's failure while the others go on.
module SweepTasks (newtonTask) where

import GHC.StaticPtr (StaticPtr)
import Herd

newton :: Double -> Double
newton x0 = go (50 :: Int) x0
  where
    f x = x * x * x - 2 * x + 2
    f' x = 3 * x * x - 2
    go 0 _ = errorWithoutStackTrace ("no root within 50 steps from " ++ show x0)
    go k x
      | abs (f x) < 1e-12 = x
      | f' x == 0 = errorWithoutStackTrace ("a flat tangent at " ++ show x ++ " from " ++ show x0)
      | otherwise = go (k - 1) (x - f x / f' x)

-- | The root Newton's method reaches from a start.
newtonTask :: StaticPtr (Task Double Double)
newtonTask = static (named "newton" (task newton))
