{-# LANGUAGE ScopedTypeVariables #-}
-- | The task farm: apply a static function to every element of a list on
-- the cluster's workers.
--
-- Promises: every task's result is delivered exactly once (in input order
-- for 'farm'); a worker lost mid-run has its unfinished tasks re-run on the
-- others; an exception in the user's function comes back as 'Herd.Error.TaskFailed'
-- naming the task's index; a caller never waits forever (if every worker is
-- lost the call throws 'Herd.Error.AllWorkersLost').
module Herd.Farm
  ( farm
  , farmWithStats
  , farmAsCompleted
  , FarmStats
  ) where

import Control.Concurrent.STM
import Control.Concurrent.Async (withAsync, waitCatch)
import Control.Exception
import Data.Primitive.Array
import GHC.StaticPtr (StaticPtr)
import Herd.Master
import Herd.Scheduler (JobStats, rangeIndices)
import Herd.Packet (Encoder (..))
import Herd.Task

-- | Statistics of one farm: elapsed time and, per worker, tasks, busy and
-- waiting time.
type FarmStats = JobStats

-- | Apply the function to every element; results in input order.
farm :: Cluster -> StaticPtr (Task a b) -> [a] -> IO [b]
farm cluster f xs = fst <$> farmWithStats cluster f xs

-- | Like 'farm', also returning the job's statistics.
farmWithStats :: Cluster -> StaticPtr (Task a b) -> [a] -> IO ([b], FarmStats)
farmWithStats cluster f xs = do
  let n = length xs
  out <- newArray n (error "Herd.Farm: result not delivered")
  -- results go straight into the output array: a task staged twice (its
  -- first worker was lost) gets the same value again, as tasks are pure
  stats <- runFarm cluster f xs (writeArray out) (\_ -> pure ())
  done <- unsafeFreezeArray out
  pure ([ indexArray done i | i <- [0 .. n - 1] ], stats)

-- | Run the tasks and call the function with each task's index and result
-- as results arrive (in batches, in no particular order; each task exactly
-- once). The callback runs on the calling thread; the results of other
-- tasks keep arriving meanwhile.
farmAsCompleted :: Cluster -> StaticPtr (Task a b) -> [a] -> (Int -> b -> IO ()) -> IO FarmStats
farmAsCompleted cluster f xs callback = do
  queue <- newTQueueIO
  staged <- newArray (length xs) (error "Herd.Farm: result not staged")
  let drain = do
        next <- atomically (readTQueue queue)
        case next of
          Nothing -> pure ()
          Just pairs -> mapM_ (uncurry callback) pairs >> drain
      accept indices = do
        pairs <- mapM (\i -> (,) i <$> readArray staged i) indices
        atomically (writeTQueue queue (Just pairs))
      produce = runFarm cluster f xs (writeArray staged) accept
                  `finally` atomically (writeTQueue queue Nothing)
  withAsync produce $ \producer -> do
    drain
    r <- waitCatch producer
    either throwIO pure r

-- Run a farm job: stage each decoded result, and report each batch's task
-- indices once its results are final.
runFarm :: Cluster -> StaticPtr (Task a b) -> [a] -> (Int -> b -> IO ()) -> ([Int] -> IO ())
        -> IO FarmStats
runFarm cluster f xs stage accept = do
  let n = length xs
      args = arrayFromListN n xs
      encodeArg = taskArgEncoder f
      decodeResult = taskResultDecoder f
      spec = JobSpec
        { specTasks = n
        , specRef = taskRef f
        , specCheck = \i -> do
            x <- evaluate (indexArray args i)
            Encoder _ _ <- evaluate (encodeArg x)
            pure ()
        , specArg = encodeArg . indexArray args
        , specStage = \i bytes -> decodeResult bytes >>= stage i
        , specAccept = accept . rangeIndices
        }
  result <- runJob cluster spec
  either throwIO pure result
