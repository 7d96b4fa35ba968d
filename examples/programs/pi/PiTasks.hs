{-# LANGUAGE StaticPointers #-}
-- | Monte Carlo pi's task: count the random points of the unit square
-- that fall inside the quarter circle. Each task has its own seed, so a
-- run gives the same answer however the tasks are spread.
module PiTasks (hitsTask) where

import Data.Bits (shiftR, xor)
import Data.Word (Word64)
import GHC.StaticPtr (StaticPtr)
import Herd


hits :: (Word64, Int) -> Int
hits (seed, n) = go n (mix seed) 0
  where
    go :: Int -> Word64 -> Int -> Int
    go 0 _ acc = acc
    go k s acc =
      let s1 = mix s
          s2 = mix s1
          x = toUnit s1
          y = toUnit s2
      in go (k - 1) s2 (if x * x + y * y <= 1 then acc + 1 else acc)
    toUnit w = fromIntegral (w `shiftR` 11) / 9007199254740992 :: Double

-- SplitMix's finaliser over a Weyl sequence: a fast, decent generator.
mix :: Word64 -> Word64
mix s0 =
  let s = s0 + 0x9e3779b97f4a7c15
      z1 = (s `xor` (s `shiftR` 30)) * 0xbf58476d1ce4e5b9
      z2 = (z1 `xor` (z1 `shiftR` 27)) * 0x94d049bb133111eb
  in z2 `xor` (z2 `shiftR` 31)

-- | Points inside the quarter circle, out of a (seed, count).
hitsTask :: StaticPtr (Task (Word64, Int) Int)
hitsTask = static (named "pi hits" (task hits))
