-- | The longest Collatz sequence that starts below a bound, computed on
-- every core. Try: my-herd-program --below 1000000 --workers 2
module Main (main) where

import Herd
import Herd.Options (herdMain)
import Options.Applicative
import Work (collatzTask)

main :: IO ()
main = herdMain "The longest Collatz sequence below a bound" below $ \n cluster -> do
  steps <- farm cluster collatzTask [1 .. n - 1]
  let (most, start) = maximum (zip steps [1 :: Int ..])
  putStrLn ("below " ++ show n ++ ", " ++ show start ++ " takes the most steps: " ++ show most)
  where
    below = option (eitherReader atLeastTwo) (long "below" <> metavar "N" <> value 100000 <> showDefault
                                               <> help "look at the starts from 1 to N - 1")
    atLeastTwo s = case reads s of
      [(n, "")] | n >= 2 -> Right n
      _ -> Left ("expected a whole number of at least 2, got " ++ show s)
