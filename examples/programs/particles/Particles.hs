{-# LANGUAGE DeriveGeneric #-}
{-# LANGUAGE StaticPointers #-}
-- | A particle filter's step, for the evolve API: the particles live on
-- the workers, and each step moves a particle's copies by the motion
-- model and weighs each by how well it explains the observation. The
-- master resamples: it gives each particle as many copies (0 or more) as
-- its weight earns, which is why a step may have any number of children.
--
-- All randomness comes from seeds in the particles and the step number,
-- so a run gives the same answer however its particles are spread.
module Particles
  ( Particle (..)
  , Input (..)
  , stepFn
  , observe
  , truth
  ) where

import Data.Bits (shiftR, xor)
import Data.Store (Store)
import Data.Word (Word64)
import GHC.Generics (Generic)
import GHC.StaticPtr (StaticPtr)
import Herd

-- | A guess of where the object is and how fast it goes, with its seed.
data Particle = Particle !Double !Double !Word64
  deriving (Show, Generic)

instance Store Particle

-- | A step's input for one particle: its copies, the step and what was seen.
data Input = Input !Int !Int !Double
  deriving (Show, Generic)

instance Store Input

-- | Each copy moved (position, speed, noise) and weighed: (log weight, position).
step :: Particle -> Input -> [(Particle, (Double, Double))]
step (Particle pos vel seed) (Input copies k seen) =
  [ let s1 = mix (seed `xor` mix (fromIntegral (k * 1000003 + j)))
        s2 = mix s1
        vel' = vel + 0.3 * noise s1
        pos' = pos + 0.1 * vel'
    in (Particle pos' vel' s2, (negate ((seen - pos') * (seen - pos')) / (2 * 0.25), pos'))
  | j <- [1 .. copies] ]

-- | 'step' as an evolve function the workers run.
stepFn :: StaticPtr (Evolver Particle Input (Double, Double))
stepFn = static (named "particle step" (evolver step))

-- | Where the object truly is at step k: it moves at speed 2.
truth :: Int -> Double
truth k = 2 * 0.1 * fromIntegral k

-- | What is seen at step k: the truth, with noise (a standard deviation of 0.5).
observe :: Int -> Double
observe k = truth k + 0.5 * noise (mix (fromIntegral k))

-- Roughly a standard normal number (a sum of twelve uniforms, less six).
noise :: Word64 -> Double
noise s = sum [ fromIntegral (mix (s + i) `shiftR` 11) / 9007199254740992 | i <- [1 .. 12] ] - 6

-- SplitMix's finaliser.
mix :: Word64 -> Word64
mix s0 =
  let s = s0 + 0x9e3779b97f4a7c15
      z1 = (s `xor` (s `shiftR` 30)) * 0xbf58476d1ce4e5b9
      z2 = (z1 `xor` (z1 `shiftR` 27)) * 0x94d049bb133111eb
  in z2 `xor` (z2 `shiftR` 31)
