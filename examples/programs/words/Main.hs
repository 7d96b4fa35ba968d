-- | The most frequent words of text files, counted on every core: the
-- files are cut into chunks of lines, the stop words are shared once with
-- every worker ('withShared'), and the counts are summed on the workers
-- ('reduceByKey'), so only one map per group of chunks comes back.
-- Try: herd-example-words --top 20 /usr/share/common-licenses/GPL-3
module Main (main) where

import Data.List (sortOn)
import qualified Data.Map.Strict as M
import Data.Ord (Down (..))
import qualified Data.Set as S
import qualified Data.Text as T
import qualified Data.Text.IO as TIO
import Herd
import Herd.Options (herdMain)
import Options.Applicative
import Text.Printf (printf)
import WordsTasks (countTask)

data Args = Args Int [FilePath]

main :: IO ()
main = herdMain "Count the words of text files on every core" args $ \(Args top paths) cluster -> do
  texts <- mapM TIO.readFile paths
  let chunks = concatMap (chunksOf 200 . T.lines) texts
  counts <- withShared cluster stopWords $ \stop ->
    reduceByKey cluster countTask [ (stop, T.unlines c) | c <- chunks ]
  printf "%d words, %d different\n" (sum (M.elems counts)) (M.size counts)
  mapM_ (\(w, n) -> printf "%7d %s\n" n (T.unpack w)) (take top (sortOn (\(w, n) -> (Down n, w)) (M.toList counts)))
  where
    args = Args <$> option (eitherReader positive) (long "top" <> metavar "N" <> value 10 <> showDefault
                                                    <> help "how many of the most frequent words to print")
                <*> some (argument str (metavar "FILE..." <> help "text files to count"))
    positive s = case reads s of
      [(n, "")] | n >= 1 -> Right n
      _ -> Left ("expected a positive whole number of words to print, got " ++ show s)

-- Words too common to count.
stopWords :: S.Set T.Text
stopWords = S.fromList (map T.pack (words "a an and are as at be by for from in is it of on or that the this to was with"))

chunksOf :: Int -> [a] -> [[a]]
chunksOf _ [] = []
chunksOf k xs = let (h, t) = splitAt k xs in h : chunksOf k t
