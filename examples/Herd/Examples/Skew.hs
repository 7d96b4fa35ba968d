{-# LANGUAGE StaticPointers #-}
-- | The skew case of FP Complete's article: states whose step takes a
-- fixed time (a sleep), and whose children take what their parent took.
-- Ten states, nine of 1 s and one of 10 s, on two workers: the best split
-- takes 10 s, an even split 14 s, first come first served 12 s.
module Herd.Examples.Skew
  ( skewStep
  , skewStates
  ) where

import Foreign.C.Types (CInt (..), CUInt (..))
import GHC.StaticPtr (StaticPtr)
import Herd (Evolver, evolver, named)
import System.IO.Unsafe (unsafePerformIO)

-- | A state is its step's cost in seconds; a step sleeps that long and
-- leaves one child of the same cost, with the cost as its output.
sleepStep :: Double -> () -> [(Double, Double)]
sleepStep cost () = unsafePerformIO (c_usleep (round (cost * 1e6)) >> pure [(cost, cost)])
{-# NOINLINE sleepStep #-}

-- a blocking sleep on the evolving thread's own OS thread: precise, and off
-- GHC's timer manager
foreign import ccall safe "usleep" c_usleep :: CUInt -> IO CInt

-- | 'sleepStep' as an evolve function.
skewStep :: StaticPtr (Evolver Double () Double)
skewStep = static (named "skew sleep" (evolver sleepStep))

-- | @n@ states of @unit@ seconds, one of them (the middle one) @slow@.
skewStates :: Int -> Double -> Double -> [Double]
skewStates n unit slow = [ if k == n `div` 2 then slow else unit | k <- [0 .. n - 1] ]
