-- | What the master's core knows of one link's farm traffic: the batches
-- sent on it whose results are due, oldest first. A worker answers the
-- batches of a link in the order they were sent (INV-ORDER), so each
-- 'Herd.Wire.Result' is for the next task of the oldest batch. Pure.
module Herd.Master.Expect
  ( Expected
  , Expect (..)
  , noneExpected
  , expectBatch
  , nextResult
  , endOfBatch
  , forgetBatch
  ) where

import Data.Foldable (toList)
import Data.Sequence (Seq, ViewL (..), (|>), (<|))
import qualified Data.Sequence as Seq
import Herd.Base (BatchId, JobId)

-- | One batch whose results are due.
data Expect = Expect
  { expJob   :: !JobId
  , expBatch :: !BatchId
  , expNext  :: ![Int]   -- ^ tasks whose results are still to come, in order
  , expGot   :: !Int     -- ^ results received so far
  }

-- | The batches of one link whose results are due.
newtype Expected = Expected (Seq Expect)

-- | Nothing due.
noneExpected :: Expected
noneExpected = Expected Seq.empty

-- | A batch of these tasks was sent.
expectBatch :: JobId -> BatchId -> [Int] -> Expected -> Expected
expectBatch jid bid tasks (Expected q) = Expected (q |> Expect jid bid tasks 0)

-- | A result arrived: the job and task it is for, or 'Nothing' if no
-- batch was waiting for one.
nextResult :: Expected -> Maybe (JobId, Int, Expected)
nextResult (Expected q) = case Seq.viewl q of
  e :< later | (i : next) <- expNext e ->
    Just (expJob e, i, Expected (e { expNext = next, expGot = expGot e + 1 } <| later))
  _ -> Nothing

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
