-- | Tracking an object from noisy sightings with a particle filter: the
-- particles stay on the workers between steps ('resetStates',
-- 'evolveMany'); only weights and positions come back, and the master
-- decides how many copies each particle gets next.
-- Try: herd-example-particles --particles 4000 --steps 30
module Main (main) where

import Data.List (foldl')
import qualified Data.Map.Strict as M
import Herd
import Herd.Options (herdMain)
import Options.Applicative
import Particles
import Text.Printf (printf)

main :: IO ()
main = herdMain "A particle filter on the workers" settings $ \(n, steps) cluster -> do
  ids <- resetStates cluster stepFn [ Particle 0 (fromIntegral (i `mod` 9) - 4) (fromIntegral i) | i <- [1 .. n] ]
  let go k copies
        | k > steps = pure ()
        | otherwise = do
            out <- evolveMany cluster stepFn (M.fromList [ (i, Input c k (observe k)) | (i, c) <- copies ])
            let children = concat (M.elems out)
                estimate = weightedMean [ (w, p) | (_, (w, p)) <- children ]
            printf "step %2d: seen %7.3f, estimated %7.3f, truly %7.3f\n" k (observe k) estimate (truth k)
            go (k + 1) (resample n children)
  go 1 [ (i, 1) | i <- ids ]
  where
    settings = (,) <$> option (eitherReader (atLeast 10)) (long "particles" <> metavar "N" <> value 2000 <> showDefault
                                                             <> help "particles to track with")
                   <*> option (eitherReader (atLeast 1)) (long "steps" <> metavar "K" <> value 20 <> showDefault
                                                             <> help "steps to take")
    atLeast lo s = case reads s of
      [(x, "")] | x >= lo, x <= (10000000 :: Int) -> Right x
      _ -> Left ("expected a whole number from " ++ show lo ++ " to 10000000, got " ++ show s)

-- The positions' mean, weighted by exp (log weight).
weightedMean :: [(Double, Double)] -> Double
weightedMean ws =
  let top = maximum (map fst ws)
      (total, acc) = foldl' (\(t, a) (w, p) -> let e = exp (w - top) in (t + e, a + e * p)) (0, 0) ws
  in acc / total

-- Systematic resampling: n copies shared out in proportion to the weights.
resample :: Int -> [(StateId, (Double, Double))] -> [(StateId, Int)]
resample n children =
  let top = maximum [ w | (_, (w, _)) <- children ]
      weights = [ (i, exp (w - top)) | (i, (w, _)) <- children ]
      total = sum (map snd weights)
      step = total / fromIntegral n
      -- the copies of each: how many of the points step/2, 3 step/2, ... fall in its share
      counts = go (step / 2) 0 weights
      go _ _ [] = []
      go next acc ((i, w) : rest) =
        let upper = acc + w
            k = length (takeWhile (< upper) (iterate (+ step) next))
        in (i, k) : go (next + fromIntegral k * step) upper rest
  in [ (i, k) | (i, k) <- counts, k > 0 ]
