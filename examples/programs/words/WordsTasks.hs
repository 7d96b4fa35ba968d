{-# LANGUAGE StaticPointers #-}
-- | Word counts of a text, combined on the workers: each task is a chunk
-- of lines, the stop words are one shared value every task reads, and the
-- counts are summed per word where they are made.
module WordsTasks (countTask) where

import Data.Char (isAlpha)
import qualified Data.Set as S
import qualified Data.Text as T
import GHC.StaticPtr (StaticPtr)
import Herd

-- | A chunk's words, in lower case, without the stop words, each with a
-- count of one.
chunkWords :: (Shared (S.Set T.Text), T.Text) -> [(T.Text, Int)]
chunkWords (stop, chunk) =
  [ (w, 1) | w <- T.words (T.map (\c -> if isAlpha c then c else ' ') (T.toLower chunk))
           , not (S.member w (sharedValue stop)) ]

-- | The counts per word, summed on the workers.
countTask :: StaticPtr (KeyedReducer (Shared (S.Set T.Text), T.Text) T.Text Int)
countTask = static (keyedReducer chunkWords (+))
