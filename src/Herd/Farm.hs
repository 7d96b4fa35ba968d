{-# LANGUAGE ScopedTypeVariables #-}
-- | The task farm: apply a static function to every element of a list on
-- the cluster's workers.
--
-- Promises: every task's result is delivered exactly once (in input order
-- for 'farm'); a worker lost mid-run has its unfinished tasks re-run on the
-- others; an exception in the user's function comes back as 'TaskFailed'
-- naming the task's index; a caller never waits forever (if every worker is
-- lost the call throws 'AllWorkersLost').
module Herd.Farm
  ( farm
  , farmWithStats
  , farmAsCompleted
  , FarmStats
  ) where

import Control.Concurrent.STM
import Control.Concurrent.Async (withAsync, waitCatch)
import Control.Exception
import Control.Monad (forM_)
import Data.Primitive.Array
import GHC.StaticPtr (StaticPtr)
import Herd.Error
import Herd.Master
import Herd.Scheduler (JobStats, rangeIndices)
import Herd.Task

-- | Statistics of one farm: elapsed time and, per worker, tasks, busy and
-- waiting time.
type FarmStats = JobStats

-- | Apply the function to every element; results in input order.
farm :: Cluster -> StaticPtr (Task a b) -> [a] -> IO [b]
farm cluster f xs = fst <$> farmWithStats cluster f xs

-- | 'farm', also returning the run's statistics.
farmWithStats :: Cluster -> StaticPtr (Task a b) -> [a] -> IO ([b], FarmStats)
farmWithStats cluster f xs = do
  let n = length xs
  out <- newArray n (error "Herd.Farm: result not delivered")
  stats <- runFarm cluster f xs $ \pairs -> forM_ pairs (uncurry (writeArray out))
  done <- unsafeFreezeArray out
  pure ([ indexArray done i | i <- [0 .. n - 1] ], stats)

-- | Apply the function to every element, handing each result to the
-- callback (with its index in the input) as soon as its batch arrives.
-- The callback runs in the calling thread, so a slow callback slows only
-- the caller, never the master loop.
farmAsCompleted :: Cluster -> StaticPtr (Task a b) -> [a] -> (Int -> b -> IO ()) -> IO FarmStats
farmAsCompleted cluster f xs callback = do
  queue <- newTQueueIO
  let drain = do
        next <- atomically (readTQueue queue)
        case next of
          Nothing -> pure ()
          Just pairs -> mapM_ (uncurry callback) pairs >> drain
      produce = runFarm cluster f xs (atomically . writeTQueue queue . Just)
                  `finally` atomically (writeTQueue queue Nothing)
  withAsync produce $ \producer -> do
    drain
    r <- waitCatch producer
    either throwIO pure r

-- Run a farm job, giving each accepted batch's decoded results to the sink
-- (which must be quick: it runs in the master loop).
runFarm :: Cluster -> StaticPtr (Task a b) -> [a] -> ([(Int, b)] -> IO ()) -> IO FarmStats
runFarm cluster f xs sink = do
  let n = length xs
      args = arrayFromListN n xs
      encodeArgs = taskEncodeArgs f
      decodeResults = taskDecodeResults f
      ref = taskRef f
      spec = JobSpec
        { specTasks = n
        , specRef = ref
        , specEncode = \ranges -> encodeArgs [ indexArray args i | i <- rangeIndices ranges ]
        , specDeliver = \ranges blob -> do
            let indices = rangeIndices ranges
                firstIndex = case indices of { (i : _) -> i; [] -> 0 }
            case decodeResults (length indices) blob of
              Left why -> pure (Just (ResultDecodeError firstIndex (refName ref) why))
              Right ys -> sink (zip indices ys) >> pure Nothing
        }
  result <- runJob cluster spec
  either throwIO pure result

