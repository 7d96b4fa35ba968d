-- | Handing out a farm's work and the bookkeeping around it, for the
-- scheduler's step ("Herd.Core.Farm"): which batch goes to which worker
-- ('assign', INV-BUSY and INV-FAIR), a job ended with its batches
-- cancelled ('endJob'), and a batch taken back or requeued. Pure.
module Herd.Core.Farm.Assign
  ( assign
  , endJob
  , requeue
  , takeBatch
  , credit
  , statsOf
  ) where

import Data.List (sortOn)
import qualified Data.Map.Strict as M
import qualified Data.Set as S
import Data.Sequence (ViewL (..), (<|))
import qualified Data.Sequence as Seq
import Herd.Core.Base (BatchId, JobId, Range (..), WorkerId, takeTasks)
import Herd.Core.Farm.Presence
import Herd.Core.Farm.Sizing
import Herd.Core.Farm.State
import Herd.Core.Farm.Straggle (cancelOn)

-- | Forget a job: no more of its tasks are handed out, and each of its
-- outstanding batches is cancelled on its worker (its results, if they
-- come, are dropped; the worker is free once it answers).
endJob :: JobId -> Sched -> (Sched, [Command])
endJob jid s =
  let forgotten = s { schedJobs = M.delete jid (schedJobs s), schedTurn = filter (/= jid) (schedTurn s) }
      doomed = [ (w, bid) | (w, wk) <- M.toList (schedWorkers s), (bid, b) <- M.toList (workerOutstanding wk)
                          , batchJob b == jid, not (batchCancelled b) ]
  in foldl (\(st, out) (w, bid) -> let (st', c) = cancelOn w bid st in (st', out ++ c)) (forgotten, []) doomed

-- | A batch's tasks back at the front of its job's queue.
requeue :: Batch -> Job -> Job
requeue b j = j { jobPending = foldr (<|) (jobPending j) (batchRanges b), jobPendingN = jobPendingN j + batchTasks b }

-- | Remove an outstanding batch from a worker.
takeBatch :: WorkerId -> BatchId -> Sched -> Maybe (Batch, Sched)
takeBatch w bid s = do
  worker <- M.lookup w (schedWorkers s)
  b <- M.lookup bid (workerOutstanding worker)
  let worker' = worker { workerOutstanding = M.delete bid (workerOutstanding worker) }
  pure (b, putWorker w worker' s)

-- | Credit a worker with a batch it finished.
credit :: WorkerId -> Batch -> Double -> Job -> Job
credit w b busy j = j { jobPresence = credited w (batchTasks b) busy (jobPresence j) }

-- | A job's statistics as of now.
statsOf :: Double -> Job -> JobStats
statsOf now j = jobStatsOf now (jobStart j) (jobTotal j) (jobPresence j)

-- The next batch's size for this job, with this many live workers.
sizeOf :: Int -> Job -> Int
sizeOf live j = batchSize (jobBatching j) (jobEstimate j) (jobTarget j) (jobPendingN j) live

-- Whether a worker with these outstanding batches should get another of
-- this job now: never while it runs a suspect, and no prefetch while
-- suspects wait (they go to workers with nothing outstanding, and would
-- otherwise wait behind every other task) (INV-POISON).
wantsWork :: Job -> Worker -> Bool
wantsWork j worker =
  not (any batchSuspect (workerOutstanding worker))
  && (if M.null (workerOutstanding worker) then jobPendingN j > 0
      else Seq.null (jobSuspects j) && jobPendingN j > 0)
  && wantsBatch (jobBatching j) (jobEstimate j) (jobTarget j) (M.size (workerOutstanding worker))

-- The next batch of a job for a worker: a suspect alone to a worker with
-- nothing outstanding, else tasks from the queue.
nextBatch :: Double -> Int -> Worker -> Job -> (Batch, Job)
nextBatch now live worker j = case Seq.viewl (jobSuspects j) of
  i :< rest | M.null (workerOutstanding worker) ->
    (Batch (jobId j) [Range i (i + 1)] 1 True now Nothing False False, j { jobSuspects = rest, jobPendingN = jobPendingN j - 1 })
  _ -> let (ranges, n, pending') = takeTasks (sizeOf live j) (jobPending j)
       in (Batch (jobId j) ranges n False now Nothing False False, j { jobPending = pending', jobPendingN = jobPendingN j - n })

-- | Hand out pending tasks: first to workers with nothing outstanding (fewest
-- first), then a prefetch to those that want one. Each batch comes from the
-- first job in turn that has pending tasks this worker should take; that
-- job then goes to the back of the turn (INV-FAIR: concurrent jobs take
-- workers in turn).
--
-- Workers near their memory limit ('WorkerHeld') are passed over while any
-- other live worker remains; when every one is held, all take work again,
-- so that a job never waits on memory that may not be given back.
assign :: Double -> Sched -> [Command] -> (Sched, [Command])
assign now s acc
  | M.null (schedJobs s) = (s, acc)
  | otherwise = go s (sortOn (M.size . workerOutstanding . snd) hungry) acc
  where
    -- a worker with two batches outstanding takes no more ('wantsBatch'):
    -- only the others ('schedHungry', in worker order) are looked at,
    -- which changes nothing but the cost: looking at every worker on every
    -- completion cost the master O(workers log workers) per batch, 170 us
    -- at 1024 workers
    -- and while no job with tasks left takes a prefetch, only those with
    -- nothing outstanding
    prefetching = or [ jobPendingN j > 0 && wantsBatch (jobBatching j) (jobEstimate j) (jobTarget j) 1
                     | j <- M.elems (schedJobs s) ]
    candidates = if prefetching then schedHungry s else schedIdle s
    hungryAll = [ (w, wk) | w <- S.toAscList candidates, Just wk <- [M.lookup w (schedWorkers s)] ]
    hungry
      | S.null (schedHeld s) = hungryAll
      | otherwise = case [ x | x@(w, _) <- hungryAll, not (S.member w (schedHeld s)) ] of
          -- every worker held: all take work again
          [] | all (`S.member` schedHeld s) (M.keys (schedWorkers s)) -> hungryAll
          [] -> []
          free -> free
    go st [] out = (st, out)
    go st ((w, _) : rest) out = case M.lookup w (schedWorkers st) of
      Nothing -> go st rest out
      Just worker -> case [ j | jid <- schedTurn st, Just j <- [M.lookup jid (schedJobs st)], wantsWork j worker ] of
        [] -> go st rest out
        j : _ ->
          let (batch, j') = nextBatch now (M.size (schedWorkers st)) worker j
              bid = schedNextBatch st
              worker' = Worker (M.insert bid batch (workerOutstanding worker))
              st' = (putWorker w worker' st)
                       { schedJobs = M.insert (jobId j) j' (schedJobs st)
                       , schedTurn = filter (/= jobId j) (schedTurn st) ++ [jobId j]
                       , schedNextBatch = bid + 1 }
              -- a worker that can take a prefetch stays in line for one more
              again = [ (w, worker') | M.size (workerOutstanding worker') < 2 ]
          in go st' (rest ++ again) (out ++ [SendBatch w bid (batchRanges batch)])
