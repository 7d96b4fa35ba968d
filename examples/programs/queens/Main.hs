-- | N-queens on every core: the master divides the board's first rows
-- into pieces, each worker counts its pieces with the Par monad.
-- Try: herd-example-queens --size 13
module Main (main) where

import Herd.Options (herdMain)
import Herd.Skeleton (divideAndConquer)
import Options.Applicative
import QueensTasks (countTask, queensDivide)

main :: IO ()
main = herdMain "Count the solutions of the n-queens puzzle on every core" size $ \n cluster -> do
  count <- divideAndConquer cluster queensDivide countTask (n, [])
  putStrLn (show count ++ " solutions of " ++ show n ++ " queens")
  where
    size = option (eitherReader board) (long "size" <> metavar "N" <> value 12 <> showDefault
                                        <> help "the board's side (4 to 16)")
    board s = case reads s of
      [(n, "")] | n >= 4 && n <= 16 -> Right n
      _ -> Left ("expected a board size from 4 to 16, got " ++ show s)
