-- | A parameter sweep that survives its failures: Newton's method from
-- many starting points, with 'farmEither' so that a start that fails is
-- reported by name and every other start still gives its answer.
-- Try: herd-example-sweep --starts 200
module Main (main) where

import Control.Exception (displayException)
import Data.List (nub)
import Herd
import Herd.Options (herdMain)
import Options.Applicative
import SweepTasks (newtonTask)
import Text.Printf (printf)

main :: IO ()
main = herdMain "Newton's method for x^3 - 2x + 2 from many starting points" starts $ \n cluster -> do
  -- n starts spread over [-3, 3], and 0, where the method cycles
  let xs = 0 : [ -3 + 6 * fromIntegral i / fromIntegral (n - 1) | i <- [0 .. n - 1] ]
  answers <- farmEither cluster newtonTask xs
  let roots = nub [ fromIntegral (round (r * 1e6) :: Int) / 1e6 :: Double | Right r <- answers ]
      failed = [ (x, e) | (x, Left e) <- zip xs answers ]
  printf "%d of %d starts converged, to %s\n" (length xs - length failed) (length xs) (unwords (map (printf "%.6f") roots))
  printf "%d did not:\n" (length failed)
  mapM_ (\(x, e) -> printf "  from %.4f: %s\n" x (displayException e)) (take 5 failed)
  where
    starts = option (eitherReader atLeastTwo) (long "starts" <> metavar "N" <> value 100 <> showDefault
                                                <> help "starting points spread over [-3, 3]")
    atLeastTwo s = case reads s of
      [(n, "")] | n >= 2, n <= (1000000 :: Int) -> Right n
      _ -> Left ("expected a whole number from 2 to 1000000, got " ++ show s)
