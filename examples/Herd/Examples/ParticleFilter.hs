{-# LANGUAGE BangPatterns #-}
{-# LANGUAGE StaticPointers #-}
{-# LANGUAGE DeriveGeneric #-}
-- | A particle filter on the evolve API: tracking an object that moves
-- along a line, from noisy observations of its position.
--
-- Each particle is a guess of position and velocity. A step moves each of
-- a particle's copies by the motion model, with its own noise, integrated
-- in sub-steps whose number grows with the particle's speed (so the cost of
-- a step varies between particles), and weighs it by how well it explains
-- the step's observation. The caller then resamples: every particle gets
-- 0..k copies for the next step in proportion to its weight (systematic
-- resampling), which is why a state has any number of children.
--
-- All randomness comes from seeds carried in the particles and the step
-- number, so a run is a pure function of its 'FilterSetup': the same on one
-- core ('runSequential') and on a cluster ('runFilter' with
-- 'Herd.Master.Job.Evolve.evolveMany').
--
-- With 'setupSimulate' above zero the step's computation is replaced by
-- that many seconds of 'Herd.simulatedWork' per particle (a sleep in a
-- worker process, a timer in a simulated host), so that hundreds of
-- workers fit on a small machine while the master's work stays real.
module Herd.Examples.ParticleFilter
  ( -- * The model
    Particle (..)
  , FilterInput (..)
  , FilterOutput (..)
  , stepParticle
  , particleStep
    -- * Runs
  , FilterSetup (..)
  , defaultSetup
  , FilterRun (..)
  , runFilter
  , runSequential
  , observations
  , initialParticles
  ) where

import Data.Bits (shiftR, xor)
import Data.List (foldl')
import qualified Data.Map.Strict as M
import Data.Store (Store)
import Data.Word (Word64)
import GHC.Generics (Generic)
import GHC.StaticPtr (StaticPtr)
import Herd (Evolver, evolver, named, simulatedWork)

-- | One hypothesis: where the object is, how fast it goes, and the seed of
-- its own noise.
data Particle = Particle
  { partPos  :: !Double
  , partVel  :: !Double
  , partSeed :: !Word64
  } deriving (Eq, Show, Generic)

instance Store Particle

-- | What a particle needs for one step.
data FilterInput = FilterInput
  { inCopies      :: !Int     -- ^ children to make (0: the particle dies)
  , inObservation :: !Double  -- ^ the observed position after this step
  , inStep        :: !Int
  , inSimulate    :: !Double  -- ^ above 0: sleep this long instead of integrating
  , inWork        :: !Int     -- ^ integration sub-steps per unit of speed (the cost of a step)
  } deriving (Eq, Show, Generic)

instance Store FilterInput

-- | What a child reports: its log-likelihood weight and its position.
data FilterOutput = FilterOutput
  { outLogWeight :: !Double
  , outPos       :: !Double
  } deriving (Eq, Show, Generic)

instance Store FilterOutput

-- Model constants.
dt, motionNoise, observationNoise :: Double
dt = 0.1
motionNoise = 0.5
observationNoise = 1.0

-- | One step of one particle: its copies, moved and weighed.
stepParticle :: Particle -> FilterInput -> [(Particle, FilterOutput)]
stepParticle p input
  | inSimulate input > 0 = simulatedWork (inSimulate input) children
  | otherwise = children
  where
    children = [ child j | j <- [0 .. inCopies input - 1] ]
    child j =
      let seed = mix64 (partSeed p `xor` mix64 (fromIntegral (inStep input) * 0x9e3779b97f4a7c15 + fromIntegral j))
          (n1, s1) = gaussian seed
          (n2, s2) = gaussian s1
          vel = partVel p + motionNoise * n1
          -- faster particles need finer steps: the cost varies between particles
          work = max 1 (inWork input)
          subSteps = if inSimulate input > 0 then 1 else work + min (20 * work) (round (abs vel * fromIntegral work))
          pos = integrate subSteps (partPos p) vel
          z = inObservation input
          logW = negate ((z - pos) * (z - pos)) / (2 * observationNoise * observationNoise)
      in (Particle (pos + 0.01 * n2) vel s2, FilterOutput logW pos)

-- Move with a little drag, in many small steps: the real work of a step.
integrate :: Int -> Double -> Double -> Double
integrate n x0 v0 = go n x0 v0
  where
    h = dt / fromIntegral n
    go 0 !x _ = x
    go k !x !v = go (k - 1) (x + h * v) (v - h * 0.01 * v * abs v)

-- | 'stepParticle' as an evolve function workers can run.
particleStep :: StaticPtr (Evolver Particle FilterInput FilterOutput)
particleStep = static (named "particle filter step" (evolver stepParticle))

-- | A run's parameters.
data FilterSetup = FilterSetup
  { setupParticles :: !Int
  , setupSteps     :: !Int
  , setupSeed      :: !Word64
  , setupSimulate  :: !Double  -- ^ seconds a step sleeps instead of computing (0: compute)
  , setupWork      :: !Int     -- ^ integration sub-steps per unit of speed
  } deriving (Eq, Show)

-- | 2000 particles, 5 steps, computing, 200 000 sub-steps per unit of
-- speed (about 1 to 5 ms a particle here).
defaultSetup :: FilterSetup
defaultSetup = FilterSetup 2000 5 42 0 200000

-- | What a run gives: the filter's estimate of the position after each
-- step, the true positions, and the number of particles each step evolved.
data FilterRun = FilterRun
  { runEstimates :: ![Double]
  , runTruth     :: ![Double]
  , runEvolved   :: ![Int]
  } deriving (Eq, Show)

-- | The true trajectory and its noisy observations, one per step.
observations :: FilterSetup -> [(Double, Double)]
observations setup = take (setupSteps setup) (go 1 0 1.5 (mix64 (setupSeed setup)))
  where
    go :: Int -> Double -> Double -> Word64 -> [(Double, Double)]
    go t x v s =
      let (n1, s1) = gaussian s
          (n2, s2) = gaussian s1
          v' = v + 0.2 * n1
          x' = x + dt * v'
      in (x', x' + observationNoise * n2) : go (t + 1) x' v' s2

-- | The starting particles: spread around the origin.
initialParticles :: FilterSetup -> [Particle]
initialParticles setup =
  [ let s = mix64 (setupSeed setup + fromIntegral k)
        (a, s1) = gaussian s
        (b, s2) = gaussian s1
    in Particle (2 * a) (1 + b) s2
  | k <- [1 .. setupParticles setup] ]

-- | Run the filter given a way to evolve many states at once and the
-- initial states' keys in order. The same code runs on one core and on a
-- cluster, so their results can be compared exactly.
runFilter :: (Monad m, Ord k) => FilterSetup -> (M.Map k FilterInput -> m (M.Map k [(k, FilterOutput)]))
          -> [k] -> m FilterRun
runFilter setup evolveAll keys0 = go 0 (map (\k -> (k, 1)) keys0) (observations setup) [] []
  where
    go _ _ [] estimates evolved =
      pure (FilterRun (reverse estimates) (map fst (observations setup)) (reverse evolved))
    go t current ((_, z) : later) estimates evolved = do
      let inputs = M.fromList [ (k, FilterInput c z t (setupSimulate setup) (setupWork setup)) | (k, c) <- current ]
      outs <- evolveAll inputs
      -- strict passes over the children: this runs on the master between
      -- two calls, so its time is the whole cluster's idle time
      let children = concatMap (\(k, _) -> M.findWithDefault [] k outs) current
          top = foldl' (\m (_, o) -> max m (outLogWeight o)) (-1 / 0) children
          weights = [ exp (outLogWeight o - top) | (_, o) <- children ]
          (total, weighted) = foldl' (\(!s, !p) (w, (_, o)) -> (s + w, p + w * outPos o)) (0, 0) (zip weights children)
          !estimate = weighted / total
          u0 = uniform (mix64 (setupSeed setup `xor` fromIntegral (t + 1000)))
          counts = systematic (setupParticles setup) u0 total weights
          !size = M.size inputs
      go (t + 1) (zip (map fst children) counts) later (estimate : estimates) (size : evolved)

-- | Run the filter on this core alone.
runSequential :: FilterSetup -> FilterRun
runSequential setup = fst (runLocal (runFilter setup evolveLocal [0 .. length start - 1]))
  where
    start = initialParticles setup
    -- a tiny state monad over the local population
    evolveLocal inputs = Local $ \(pop, next) ->
      let (pop', next', outs) = foldl' one (pop, next, M.empty) (M.toList inputs)
          one (pm, n, acc) (k, i) =
            let kids = stepParticle (pm M.! k) i
                ids = [n .. n + length kids - 1]
                pm' = foldl' (\m (c, (s, _)) -> M.insert c s m) (M.delete k pm) (zip ids kids)
            in (pm', n + length kids, M.insert k (zip ids (map snd kids)) acc)
      in (outs, (pop', next'))
    runLocal (Local f) = f (M.fromList (zip [0 ..] start), length start)

newtype Local a = Local ((M.Map Int Particle, Int) -> (a, (M.Map Int Particle, Int)))

instance Functor Local where
  fmap f (Local g) = Local (\s -> let (a, s') = g s in (f a, s'))
instance Applicative Local where
  pure a = Local (\s -> (a, s))
  Local f <*> Local g = Local (\s -> let (h, s1) = f s; (a, s2) = g s1 in (h a, s2))
instance Monad Local where
  Local g >>= k = Local (\s -> let (a, s1) = g s; Local h = k a in h s1)

-- Systematic resampling: n equally spaced points from u0/n, counted per
-- weight interval (the weights sum to the given total).
systematic :: Int -> Double -> Double -> [Double] -> [Int]
systematic n u0 total ws = go 0 0 ws
  where
    step = 1 / fromIntegral n
    go _ _ [] = []
    go !cum !taken (w : rest) =
      let cum' = cum + w / total
          upto = min n (ceiling ((cum' - u0 * step) / step))
          !here = max 0 (upto - taken)
      in here : go cum' (taken + here) rest

-- SplitMix64's mixer.
mix64 :: Word64 -> Word64
mix64 z0 =
  let z1 = (z0 `xor` (z0 `shiftR` 30)) * 0xbf58476d1ce4e5b9
      z2 = (z1 `xor` (z1 `shiftR` 27)) * 0x94d049bb133111eb
  in z2 `xor` (z2 `shiftR` 31)

-- A uniform number in (0, 1).
uniform :: Word64 -> Double
uniform s = (fromIntegral (s `shiftR` 11) + 0.5) / 9007199254740992

-- A standard normal number (Box-Muller) and the next seed.
gaussian :: Word64 -> (Double, Word64)
gaussian s =
  let a = mix64 (s + 0x9e3779b97f4a7c15)
      b = mix64 (a + 0x9e3779b97f4a7c15)
  in (sqrt (-2 * log (uniform a)) * cos (2 * pi * uniform b), b)
