-- | A pipeline of two stream processes: the numbers go to one worker to
-- be squared, the squares on to another to be summed, and the sums come
-- back; all three run at once, element by element.
-- Try: herd-example-pipeline --upto 100000
module Main (main) where

import Herd
import Herd.Options (herdMain)
import Options.Applicative
import PipelineTasks (runningSums, squares)

main :: IO ()
main = herdMain "The sum of the squares from 1 to N, through two stream processes" upto $ \n cluster -> do
  squared <- instantiate cluster squares [1 .. n]
  sums <- instantiate cluster runningSums squared
  putStrLn ("the sum of the squares from 1 to " ++ show n ++ " is " ++ show (last sums))
  where
    upto = option (eitherReader atLeastOne) (long "upto" <> metavar "N" <> value 10000 <> showDefault
                                             <> help "the last number")
    atLeastOne s = case reads s of
      [(n, "")] | n >= 1 -> Right n
      _ -> Left ("expected a whole number of at least 1, got " ++ show s)
