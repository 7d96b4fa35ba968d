-- | Stragglers: a batch that has run far longer than its job's estimate
-- (its worker stopped, thrashing, or on a slow host) is run a second time
-- on an idle worker, as MapReduce and Spark run backup tasks; whichever
-- copy ends first is accepted and the other's results are dropped. Pure.
--
-- Only idle workers take copies, and only once a job has no task left to
-- hand out, so a copy never delays work that has not started; each batch
-- is copied at most once at a time. A batch is never copied from a worker
-- held for its memory (above its soft share, or growing fast: a task
-- filling its memory would take as much again where it is copied), nor
-- when one of its tasks was running on a worker that died (it runs alone
-- until cleared, "Herd.Core.Farm.Loss"), nor for a job that asked for no
-- copies.
module Herd.Core.Farm.Straggle
  ( speculate
  , supersede
  , forgetTwin
  , cancelOn
  , slowAfter
  ) where

import Data.List (sortOn)
import qualified Data.IntMap.Strict as IM
import qualified Data.Map.Strict as M
import qualified Data.Set as S
import Herd.Core.Base (BatchId, Range (..), WorkerId)
import Herd.Core.Farm.State

-- | How long a batch may run before a copy is run elsewhere: four times
-- what the job's estimate says the worker needs to reach its end (its
-- earlier batches included), and at least a quarter of a second; ten
-- seconds while the job has no estimate yet.
slowAfter :: Maybe Double -> Int -> Double
slowAfter estimate tasksUpTo = case estimate of
  Just e -> max 0.25 (4 * e * fromIntegral tasksUpTo)
  Nothing -> 10

-- | Copy the slowest overdue batches to idle workers, one each.
speculate :: Double -> Sched -> (Sched, [Command])
speculate now s
  -- copies are only made for a job with no task left to hand out that
  -- allows them, to idle workers: with none such, nothing to look at
  | not (any (\j -> jobPendingN j == 0 && jobCopies j) (M.elems (schedJobs s))) || S.null (schedIdle s) = (s, [])
  | otherwise =
  let idle = [ w | w <- S.toAscList (schedIdle s), not (S.member w (schedHeld s)) ]
      overdue = sortOn (\(_, _, _, late) -> negate late)
        [ (w, bid, b, now - batchSent b)
        | (w, wk) <- M.toList (schedWorkers s)
        , not (S.member w (schedHeld s))
        , (bid, b, upTo) <- withQueued (M.toAscList (workerOutstanding wk))
        , not (batchSuspect b), not (batchSuperseded b), batchTwin b == Nothing
        , Just j <- [M.lookup (batchJob b) (schedJobs s)], jobPendingN j == 0, jobCopies j
        , now - batchSent b > slowAfter (jobEstimate j) upTo
        , not (charged j b) ]
  in foldl copy (s, []) (zip idle overdue)
  where
    -- a task of the batch was running on a worker that died
    charged j b = not (IM.null (jobDeaths j))
                  && or [ lo <= i && i < hi | i <- IM.keys (jobDeaths j), Range lo hi <- batchRanges b ]
    -- each batch with the tasks its worker must run to reach its end
    withQueued bs = zipWith (\(bid, b) upTo -> (bid, b, upTo)) bs (scanl1 (+) (map (batchTasks . snd) bs))
    copy (st, out) (to, (from, bid, b, late)) =
      let fresh = schedNextBatch st
          twin = b { batchSent = now, batchTwin = Just bid }
          est = maybe 0 (\j -> maybe 0 (* fromIntegral (batchTasks b)) (jobEstimate j)) (M.lookup (batchJob b) (schedJobs st))
          st1 = onBatch from bid (\x -> x { batchTwin = Just fresh }) st
          st2 = (maybe st1 (\wk -> putWorker to (Worker (M.insert fresh twin (workerOutstanding wk))) st1)
                       (M.lookup to (schedWorkers st1)))
                    { schedNextBatch = fresh + 1, schedCopies = schedCopies st1 + 1 }
      in (st2, out ++ [SlowBatch from bid (batchTasks b) late est to, SendBatch to fresh (batchRanges b)])

-- | A batch's twin ended first: the batch's results, when they come, are
-- dropped, and its tasks are not run again if its worker is lost; its
-- worker is told to stop it.
supersede :: BatchId -> Sched -> (Sched, [Command])
supersede t s = case holderOf t s of
  Just w -> cancelOn w t (onBatch w t (\x -> x { batchSuperseded = True, batchTwin = Nothing }) s)
  Nothing -> (s, [])

-- | Tell a batch's worker to stop it (once).
cancelOn :: WorkerId -> BatchId -> Sched -> (Sched, [Command])
cancelOn w bid s = case M.lookup w (schedWorkers s) >>= M.lookup bid . workerOutstanding of
  Just b | not (batchCancelled b) -> (onBatch w bid (\x -> x { batchCancelled = True }) s, [CancelBatch w bid])
  _ -> (s, [])

-- | A batch's twin was lost: it is a single copy again.
forgetTwin :: BatchId -> Sched -> Sched
forgetTwin t = onAnyBatch t (\x -> x { batchTwin = Nothing })

onBatch :: WorkerId -> BatchId -> (Batch -> Batch) -> Sched -> Sched
onBatch w bid f s = s { schedWorkers = M.adjust (\wk -> Worker (M.adjust f bid (workerOutstanding wk))) w (schedWorkers s) }

onAnyBatch :: BatchId -> (Batch -> Batch) -> Sched -> Sched
onAnyBatch bid f s = maybe s (\w -> onBatch w bid f s) (holderOf bid s)

-- The worker an outstanding batch is on.
holderOf :: BatchId -> Sched -> Maybe WorkerId
holderOf bid s = case [ w | (w, wk) <- M.toList (schedWorkers s), M.member bid (workerOutstanding wk) ] of
  w : _ -> Just w
  [] -> Nothing
