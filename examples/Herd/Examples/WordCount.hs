{-# LANGUAGE BangPatterns, DeriveGeneric, StaticPointers #-}
-- | Word counts, the two-stage job of @herd bench wordcount@: each
-- document (made from its number, the same on every run) gives a (word,
-- 1) pair per word, and the counts are summed per word. 'countReducer'
-- sums on the workers ("Herd.Master.Job.Reduce"); 'countShuffler' sums
-- them as a dataset's shuffle ("Herd.Dataset"); 'pairsTask' hands every
-- pair to the caller, to sum at the master.
module Herd.Examples.WordCount
  ( Doc (..)
  , docPairs
  , countReducer
  , pairsTask
  , countShuffler
  ) where

import qualified Data.ByteString.Char8 as BC
import Data.Store (Store)
import GHC.Generics (Generic)
import GHC.StaticPtr (StaticPtr)
import Herd
import Herd.Dataset (Shuffler, keyedShuffler)
import qualified Data.Map.Strict as M

-- | A document: its number, its length in words and the vocabulary's size.
data Doc = Doc !Int !Int !Int
  deriving (Eq, Show, Generic)

instance Store Doc

-- | A document's words, each with a count of one. Word ranks are skewed
-- (a word of rank r comes about 1/r as often), as in text.
docPairs :: Doc -> [(BC.ByteString, Int)]
docPairs (Doc d n vocabulary) = [ (word (rank i), 1) | i <- [0 .. n - 1] ]
  where
    rank i = let h = mix (d * 1000003 + i) `mod` (vocabulary * vocabulary)
             in vocabulary * vocabulary `div` (h + vocabulary) - 1
    word r = BC.pack ('w' : show r)
    mix :: Int -> Int
    mix x = let !a = (x * 2654435761) `mod` 4294967291 in (a * 40503 + 12345) `mod` 2147483647

-- | Counts per word, summed on the workers a group of documents at a time.
countReducer :: StaticPtr (KeyedReducer Doc BC.ByteString Int)
countReducer = static (keyedReducer docPairs (+))

-- | A document's pairs, every one, for the caller to sum.
pairsTask :: StaticPtr (Task Doc [(BC.ByteString, Int)])
pairsTask = static (named "docPairs" (task docPairs))

-- | Counts per word as a dataset's shuffle: each partition of documents
-- summed where it is held, each word's counts then summed in its output
-- partition, which stays on its worker.
countShuffler :: StaticPtr (Shuffler [Doc] [(BC.ByteString, Int)] (M.Map BC.ByteString Int))
countShuffler = static (keyedShuffler docPairs (+))
