-- | nfib on every core with work stealing: one task, whose children the
-- idle workers steal from each other.
-- Try: herd-example-fib --n 34
module Main (main) where

import FibTasks (fibTask)
import Herd
import Herd.Options (herdMain)
import Options.Applicative

main :: IO ()
main = herdMain "Count nfib's calls on every core, the workers stealing each other's children" size $ \n cluster -> do
  [count] <- farm cluster fibTask [(n, max 1 (n - 12))]
  putStrLn ("nfib " ++ show n ++ " makes " ++ show count ++ " calls")
  where
    size = option (eitherReader nfibArgument) (long "n" <> metavar "N" <> value 30 <> showDefault
                                           <> help "nfib's argument (1 to 45)")
    nfibArgument s = case reads s of
      [(n, "")] | n >= 1 && n <= 45 -> Right n
      _ -> Left ("expected an nfib argument from 1 to 45, got " ++ show s)
