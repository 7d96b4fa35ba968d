-- | What the scheduler does with a lost worker's batches of one job: the
-- tasks known to have finished before the loss go back to the front of
-- the job's queue; the tasks that may have been running when the worker
-- died are charged with the death and come back as suspects, each to be
-- run alone; a task charged with the job's limit of deaths ends the job.
-- Pure.
--
-- A worker runs its batches in the order they were sent and its results
-- may sit in its send buffer when it dies, so the tasks that may have
-- been running are all of its tasks after the last result that arrived:
-- the rest of its oldest batch and every later batch. Once a suspect runs
-- alone on a worker that holds nothing else, a death is its own; only such
-- a death ends a job, so a task is named only after it killed a worker on
-- its own. With a limit of one and a first death shared with other tasks,
-- that makes two deaths.
module Herd.Core.Farm.Loss
  ( Returned (..)
  , returnBatches
  , splitAtTask
  ) where

import qualified Data.IntMap.Strict as IM
import Data.List (foldl', sort)
import Data.Sequence ((<|))
import qualified Data.Sequence as Seq
import Herd.Core.Base (BatchId, Range (..), rangeIndices, rangeSize)
import Herd.Core.Farm.State

-- | A job after a loss.
data Returned
  = Requeued !Job
    -- ^ its tasks are back in its queue
  | Poisoned !Int !Int !Job
    -- ^ this task has now been running on this many workers that died:
    -- the job's limit; the job with its other tasks back in its queue

-- | Give back a lost worker's batches of one job (in the order they were
-- sent), given how it died ('Nothing': it was dropped, not killed, and
-- nothing is charged). The batches whose copy runs on elsewhere (a
-- straggler's twin) are charged too but not given back: the death counts
-- against their tasks, so a task that kills every worker it is copied to
-- is not copied again ("Herd.Core.Farm.Straggle").
returnBatches :: Maybe Death -> [(BatchId, Batch)] -> [(BatchId, Batch)] -> Job -> Returned
returnBatches death batches copied j =
  let split = map (splitBatch death) batches
      kept = concatMap fst split
      suspects = sort (concatMap snd split)
      running = suspects ++ concatMap (snd . splitBatch death) copied
      deaths = case death of
        Just _ -> foldl' (\m i -> IM.insertWith (+) i 1 m) (jobDeaths j) running
        Nothing -> jobDeaths j
      -- only a death that can have been one task's alone condemns it: a
      -- task charged by the deaths of workers that ran others beside it
      -- first runs alone (one whose copy runs on waits for that copy)
      worst = [ (i, d) | Just _ <- [death], [i] <- [running], i `elem` suspects, Just d <- [IM.lookup i deaths], d >= jobMaxDeaths j ]
      n = sum (map rangeSize kept) + length suspects
      requeued = j { jobPending = foldr (<|) (jobPending j) kept
                   , jobSuspects = Seq.fromList suspects <> jobSuspects j
                   , jobPendingN = jobPendingN j + n
                   , jobDeaths = deaths }
  in case worst of
       (i, d) : _ -> Poisoned i d requeued { jobSuspects = Seq.filter (/= i) (jobSuspects requeued)
                                           , jobPendingN = jobPendingN requeued - 1 }
       [] -> Requeued requeued

-- One batch's tasks: those that go back to the queue, and the suspects.
splitBatch :: Maybe Death -> (BatchId, Batch) -> ([Range], [Int])
splitBatch death (bid, b)
  -- a suspect stays one, whatever ended its worker
  | batchSuspect b = ([], rangeIndices (batchRanges b))
  | otherwise = case death of
      Nothing -> (batchRanges b, [])
      Just d
        | bid < deathBatch d -> (batchRanges b, [])
        | bid == deathBatch d -> let (done, rest) = splitAtTask (deathGot d) (batchRanges b)
                                 in (done, rangeIndices rest)
        | otherwise -> ([], rangeIndices (batchRanges b))

-- | The first k tasks of some ranges, and the rest.
splitAtTask :: Int -> [Range] -> ([Range], [Range])
splitAtTask k rs = case rs of
  [] -> ([], [])
  r@(Range lo hi) : more
    | k <= 0 -> ([], rs)
    | rangeSize r <= k -> let (a, b) = splitAtTask (k - rangeSize r) more in (r : a, b)
    | otherwise -> ([Range lo (lo + k)], Range (lo + k) hi : more)

