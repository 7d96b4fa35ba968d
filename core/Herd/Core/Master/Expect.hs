-- | What the master's core knows of one link's farm traffic: the batches
-- sent on it whose results are due, oldest first. A worker answers the
-- batches of a link in the order they were sent (INV-ORDER), so each
-- run of 'Herd.Wire.Results' is for the next tasks of the oldest batch.
-- Pure.
module Herd.Core.Master.Expect
  ( Expected
  , Expect (..)
  , noneExpected
  , expectBatch
  , nextResults
  , endOfBatch
  , forgetBatch
  , oldestDue
  ) where

import Data.Foldable (toList)
import Data.Sequence (Seq, ViewL (..), (|>), (<|))
import qualified Data.Sequence as Seq
import Herd.Core.Base (BatchId, JobId, Range (..), rangeSize)

-- | One batch whose results are due.
data Expect = Expect
  { expJob   :: !JobId
  , expBatch :: !BatchId
  , expNext  :: ![Range]  -- ^ tasks whose results are still to come, in order
  , expLeft  :: !Int      -- ^ how many those are
  , expGot   :: !Int      -- ^ results received so far
  }

-- | The batches of one link whose results are due.
newtype Expected = Expected (Seq Expect)

-- | Nothing due.
noneExpected :: Expected
noneExpected = Expected Seq.empty

-- | A batch of these tasks was sent.
expectBatch :: JobId -> BatchId -> [Range] -> Expected -> Expected
expectBatch jid bid tasks (Expected q) = Expected (q |> Expect jid bid tasks (sum (map rangeSize tasks)) 0)

-- | A run of this many results arrived: the job and tasks it is for, or
-- 'Nothing' if the oldest batch was not waiting for that many (or none).
nextResults :: Int -> Expected -> Maybe (JobId, [Range], Expected)
nextResults k (Expected q) = case Seq.viewl q of
  e :< later | k >= 1, k <= expLeft e ->
    let (these, rest) = splitRanges k (expNext e)
    in Just (expJob e, these, Expected (e { expNext = rest, expLeft = expLeft e - k, expGot = expGot e + k } <| later))
  _ -> Nothing

-- The first k tasks of some ranges, and the rest.
splitRanges :: Int -> [Range] -> ([Range], [Range])
splitRanges k rs
  | k <= 0 = ([], rs)
  | otherwise = case rs of
      [] -> ([], [])
      r@(Range lo hi) : rest
        | rangeSize r <= k -> let (a, b) = splitRanges (k - rangeSize r) rest in (r : a, b)
        | otherwise -> ([Range lo (lo + k)], Range (lo + k) hi : rest)

-- | A batch ended: it must be the oldest.
endOfBatch :: BatchId -> Expected -> Maybe (Expect, Expected)
endOfBatch bid (Expected q) = case Seq.viewl q of
  e :< later | expBatch e == bid -> Just (e, Expected later)
  _ -> Nothing

-- | A batch was not sent after all: forget it, with its job.
forgetBatch :: BatchId -> Expected -> (Maybe JobId, Expected)
forgetBatch bid (Expected q) =
  let (gone, kept) = Seq.partition ((== bid) . expBatch) q
  in (expJob <$> headOf (toList gone), Expected kept)
  where headOf xs = case xs of { x : _ -> Just x; [] -> Nothing }

-- | The oldest batch due and how many of its results have arrived.
oldestDue :: Expected -> Maybe (BatchId, Int)
oldestDue (Expected q) = case Seq.viewl q of
  e :< _ -> Just (expBatch e, expGot e)
  EmptyL -> Nothing
