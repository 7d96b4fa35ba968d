-- | How big the scheduler's batches are and when a worker gets a second
-- one: the task farm's batch-sizing rules, as pure functions of a job's
-- batching policy, its measured seconds per task and how much is left.
--
-- With no estimate yet a worker gets one task; after that a batch holds
-- about the job's target seconds of work at the measured rate, but never
-- more than the pending tasks divided by twice the live workers
-- (factoring), so the tail is shared out in ever smaller pieces. Short
-- tasks get one batch prefetched per worker, so a worker does not sit idle
-- during a round trip.
module Herd.Core.Farm.Sizing
  ( estimate
  , batchSize
  , wantsBatch
  ) where

import Herd.Core.Base (Batching (..))

-- | The new seconds-per-task estimate after a batch of this many tasks took
-- this many busy seconds: a moving average with the old one, if any.
estimate :: Maybe Double -> Double -> Int -> Double
estimate old busy n =
  let sample = max 1e-9 (busy / fromIntegral (max 1 n))
  in maybe sample (\e -> 0.5 * e + 0.5 * sample) old

-- | Tasks in the next batch, given the batching policy, the estimate, the
-- target seconds per batch, the pending tasks and the live workers.
batchSize :: Batching -> Maybe Double -> Double -> Int -> Int -> Int
batchSize batching est target pending live = case batching of
  FixedBatch n -> n
  Adaptive -> case est of
    Nothing -> 1
    Just e ->
      let byTime = floor (min 1e9 (target / e)) :: Int
          factoring = (pending + 2 * live - 1) `div` (2 * max 1 live)
      in max 1 (min byTime factoring)

-- | Whether a worker with this many batches outstanding should get another
-- now, given the policy, the estimate and the target seconds per batch.
wantsBatch :: Batching -> Maybe Double -> Double -> Int -> Bool
wantsBatch batching est target outstanding = case outstanding of
  0 -> True
  1 -> case (batching, est) of
         (FixedBatch _, _) -> True
         (Adaptive, Just e) -> e <= target / 2
         (Adaptive, Nothing) -> False
  _ -> False
