{-# LANGUAGE MagicHash #-}
{-# LANGUAGE ScopedTypeVariables #-}
{-# LANGUAGE UnboxedTuples #-}
-- | The task farm: apply a static function to every element of a list on
-- the cluster's workers.
--
-- Promises: every task's result is delivered exactly once (in input order
-- for 'farm'); a worker lost mid-run has its unfinished tasks re-run on the
-- others; an exception in the user's function comes back as 'Herd.Error.TaskFailed'
-- naming the task's index; a caller never waits forever (if every worker is
-- lost the call throws 'Herd.Error.AllWorkersLost').
module Herd.Master.Job.Farm
  ( farm
  , farmEither
  , farmMeasured
  , farmAsCompleted
  , FarmStats
    -- * Farms of a function known by reference (for "Herd.Master.Job.Reduce")
  , TaskFn (..)
  , taskFn
  , farmFn
  ) where

import Control.Concurrent.STM
import Control.Concurrent.Async (withAsync, waitCatch)
import Control.Exception
import Data.Primitive.Array
import GHC.StaticPtr (StaticPtr)
import Herd.Settings (Config (..))
import Herd.Master
import qualified Data.ByteString as B
import Herd.Core.Farm (JobStats, Range, rangeIndices)
import Herd.Core.Error (HerdError (..))
import Herd.Task
import Herd.Wire.ArgTable (ArgTable, argBytes, argCount, argsArena, arenaBytesOf, newArena)
import Herd.Wire.InPlace (commitRanges, holdRun, newPending)

-- | Statistics of one farm: elapsed time and, per worker, tasks, busy and
-- waiting time.
type FarmStats = JobStats

-- | A task's function as a farm needs it: its reference for the workers
-- and its codecs for the caller. A static task gives one ('taskFn').
data TaskFn a b = TaskFn !TaskRef (TaskCodecs a b)

-- | The farm's view of a static task.
taskFn :: StaticPtr (Task a b) -> TaskFn a b
taskFn f = TaskFn (taskRef f) (taskCodecs f)

-- | Apply the function to every element; results in input order.
farm :: Cluster -> StaticPtr (Task a b) -> [a] -> IO [b]
farm cluster f xs = fst <$> farmMeasured cluster f xs

-- | 'farm' for a function known by reference.
farmFn :: Cluster -> TaskFn a b -> [a] -> IO [b]
farmFn cluster f xs = fst <$> farmFnWithStats cluster f xs

-- | Like 'farm', also returning the job's statistics.
farmMeasured :: Cluster -> StaticPtr (Task a b) -> [a] -> IO ([b], FarmStats)
farmMeasured cluster = farmFnWithStats cluster . taskFn

farmFnWithStats :: Cluster -> TaskFn a b -> [a] -> IO ([b], FarmStats)
farmFnWithStats cluster f@(TaskFn _ codecs) xs = do
  table <- encodeAll f xs
  let n = argCount table
  case (resultWidth codecs, argsArena table) of
    -- results as wide as arguments of one width are written over them once
    -- final: one table of fresh memory, not two. Not with chunking off:
    -- every result then comes alone, and holding one piece per task until
    -- its batch ends cost the garbage collector more than the memory saved
    (Just width, Just arena)
      | snd (arenaBytesOf arena) == width, n > 0, configChunking (clusterConfig cluster) -> do
      pending <- newPending width
      let hold ranges bytes = do
            checked <- decodeResults codecs (\_ _ -> pure ()) ranges bytes
            either (pure . Left) (\() -> Right () <$ holdRun pending ranges bytes) checked
          commit ranges = commitRanges pending (fst (arenaBytesOf arena)) ranges >>= either throwIO pure
      stats <- runStaged Nothing cluster f table hold commit
      pure (arenaResults codecs arena n, stats)
    -- results of one encoded size stay encoded until the caller's list
    -- reaches them: nothing per task for the garbage collector to copy
    (Just width, _) -> do
      arena <- newArena n width
      stats <- runStaged Nothing cluster f table (stageResults codecs arena) (\_ -> pure ())
      pure (arenaResults codecs arena n, stats)
    (Nothing, _) -> do
      out <- newArray n notDelivered
      -- results go straight into the output array: a task staged twice (its
      -- first worker was lost) gets the same value again, as tasks are pure
      stats <- runFarm Nothing cluster f table (writeArray out) (\_ -> pure ())
      done <- unsafeFreezeArray out
      pure (elementsOf done n, stats)
  where
    notDelivered = error "Herd.Master.Job.Farm: result not delivered"

-- | Like 'farm', but a task that fails gives a 'Left' naming it, and the
-- job goes on: 'Herd.Error.TaskFailed' when the function threw on it,
-- 'Herd.Error.TaskKilledWorkers' when it was running on
-- 'Herd.Settings.configMaxTaskDeaths' workers that died. Every other task
-- gives its result, in input order; the caller keeps the good ones. (A
-- function no worker can run, or results that do not decode, still end
-- the call with an exception: no task could succeed.)
farmEither :: Cluster -> StaticPtr (Task a b) -> [a] -> IO [Either HerdError b]
farmEither cluster ptr xs = do
  let f = taskFn ptr
  table <- encodeAll f xs
  let n = argCount table
  out <- newArray n (Left (AllWorkersLost "herd: a task was neither answered nor failed"))
  _ <- runFarm (Just (\i e -> writeArray out i (Left e))) cluster f table (\i y -> writeArray out i (Right y)) (\_ -> pure ())
  done <- unsafeFreezeArray out
  pure (elementsOf done n)

-- Each element read out when its cell is, not kept as a thunk.
elementsOf :: Array a -> Int -> [a]
elementsOf done n = go 0
  where go i | i >= n = []
             | otherwise = case indexArray## done i of (# x #) -> x : go (i + 1)

-- | Run the tasks and call the function with each task's index and result
-- as results arrive (in batches, in no particular order; each task exactly
-- once). The callback runs on the calling thread; the results of other
-- tasks keep arriving meanwhile.
farmAsCompleted :: Cluster -> StaticPtr (Task a b) -> [a] -> (Int -> b -> IO ()) -> IO FarmStats
farmAsCompleted cluster ptr xs callback = do
  let f = taskFn ptr
  table <- encodeAll f xs
  queue <- newTQueueIO
  staged <- newArray (argCount table) (error "Herd.Master.Job.Farm: result not staged")
  let drain = do
        next <- atomically (readTQueue queue)
        case next of
          Nothing -> pure ()
          Just pairs -> mapM_ (uncurry callback) pairs >> drain
      accept indices = do
        pairs <- mapM (\i -> (,) i <$> readArray staged i) indices
        atomically (writeTQueue queue (Just pairs))
      produce = runFarm Nothing cluster f table (writeArray staged) accept
                  `finally` atomically (writeTQueue queue Nothing)
  withAsync produce $ \producer -> do
    drain
    r <- waitCatch producer
    either throwIO pure r

-- Evaluate and encode every argument before anything is sent: an
-- argument that throws ends the call with 'ArgumentError' naming it.
encodeAll :: TaskFn a b -> [a] -> IO ArgTable
encodeAll (TaskFn ref codecs) xs = do
  built <- encodeArgs codecs xs
  either (\(i, why) -> throwIO (ArgumentError i (refName ref) why)) pure built

-- Run a farm job: stage each decoded result, and report each batch's task
-- indices once its results are final. With a failure callback the job
-- keeps going past failed tasks.
runFarm :: Maybe (Int -> HerdError -> IO ()) -> Cluster -> TaskFn a b -> ArgTable -> (Int -> b -> IO ())
        -> ([Int] -> IO ()) -> IO FarmStats
runFarm failed cluster f@(TaskFn _ codecs) table stage accept =
  runStaged failed cluster f table (decodeResults codecs stage) (accept . rangeIndices)

-- Run a farm job whose runs of results go to the given stage, told which
-- tasks' results are final (an exception from that ends the job).
runStaged :: Maybe (Int -> HerdError -> IO ()) -> Cluster -> TaskFn a b -> ArgTable
          -> ([Range] -> B.ByteString -> IO (Either (Int, String) ())) -> ([Range] -> IO ()) -> IO FarmStats
runStaged failed cluster (TaskFn ref codecs) table stage accept = do
  let spec = JobSpec
        { specTasks = argCount table
        , specRef = ref
        , specArgs = table
        , specKeepGoing = maybe False (const True) failed
        }
      named = withInput codecs table
      callbacks = JobCallbacks stage accept (maybe (\_ _ -> pure ()) (\f i -> f i . named) failed)
  result <- runJob cluster spec callbacks
  either (throwIO . named) pure result

-- The error, ending with the input it is about where the task shows its
-- inputs ('Herd.Task.showingInputs').
withInput :: TaskCodecs a b -> ArgTable -> HerdError -> HerdError
withInput codecs table err = case (showArgument codecs, err) of
  (Just shown, TaskFailed i f m) -> TaskFailed i f (m ++ "; its input: " ++ shown (argBytes table i))
  (Just shown, TaskKilledWorkers i f d w) -> TaskKilledWorkers i f d (w ++ "; its input: " ++ shown (argBytes table i))
  _ -> err
