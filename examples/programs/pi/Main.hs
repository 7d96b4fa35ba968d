-- | Monte Carlo pi on every core: a farm of independent batches of samples.
-- Try: herd-example-pi --samples 10000000
module Main (main) where

import Herd
import Herd.Options (herdMain)
import Options.Applicative
import PiTasks (hitsTask)
import Text.Printf (printf)

main :: IO ()
main = herdMain "Estimate pi by Monte Carlo on every core" samples $ \n cluster -> do
  let perTask = 100000
      tasks = max 1 (n `div` perTask)
  inside <- farm cluster hitsTask [ (fromIntegral seed, perTask) | seed <- [1 .. tasks] ]
  let total = tasks * perTask
  printf "pi is about %.4f (%d samples in %d tasks)\n" (4 * fromIntegral (sum inside) / fromIntegral total :: Double) total tasks
  where
    samples = option (eitherReader atLeast) (long "samples" <> metavar "N" <> value 4000000 <> showDefault
                                             <> help "points to draw (in tasks of 100000)")
    atLeast s = case reads s of
      [(n, "")] | n >= 100000 -> Right n
      _ -> Left ("expected a whole number of samples, at least 100000, got " ++ show s)
