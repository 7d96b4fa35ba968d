-- | Futures from the caller: a task submitted returns at once, its value
-- awaited later, and a future given to another submission makes that
-- task wait for its input, as Ray's and Dask's futures do.
--
-- > a <- submit cluster squareTask 3
-- > b <- submit cluster squareTask 4
-- > c <- submitWith cluster sumTask [a, b]      -- runs once a and b are in
-- > await c                                     -- 25
--
-- Each submission is a farm job of one task (the farm's promises hold: a
-- worker lost mid-task runs it elsewhere, a task that keeps killing its
-- workers fails naming it, a caller never waits forever); the value comes
-- back to this process when the task ends and waits there until
-- 'await'ed. Jobs run side by side, taking the workers in turn, so many
-- futures keep every worker busy. A future whose input failed fails with
-- the input's error, and is not run.
--
-- A held future keeps its value on the worker that made it: 'submitHeld'
-- runs a Ref task ('refTask') and the future gives the value's 'Ref';
-- 'submitOn' runs a Ref task on a held future's value on the worker that
-- holds it, once it is in, so a chain of them moves no value through the
-- caller. 'fetch' brings a value back, 'release' frees it. A held value
-- lost with its worker is made again from its task and input (and those
-- from theirs), as every 'Ref' is.
--
-- > a <- submitHeld cluster squareRef 3
-- > b <- submitOn cluster squareRef a     -- where a's value is
-- > await b >>= fetch cluster              -- 81
-- > c <- submitOnWith cluster addAllRef b [a]  -- where b's value is, a's sent along
-- > await c >>= fetch cluster              -- 90
--
-- 'submitOnWith' takes several held futures: the first stays where it is
-- held and the task runs there, the others' values are brought to it.
--
-- Promises: 'await' gives the task's value or throws its 'HerdError'
-- (the same each time it is awaited); 'cancel' stops a future that has
-- not ended (its task is stopped on its worker) and makes 'await' throw;
-- the futures of a graph give what evaluating it in order gives.
module Herd.Future
  ( Future
  , submit
  , submitAfter
  , submitWith
  , await
  , poll
  , cancel
    -- * Values that stay on the workers
  , submitHeld
  , submitOn
  , submitOnWith
  ) where

import Control.Concurrent.Async (Async, async, wait)
import qualified Control.Concurrent.Async as A
import Control.Exception (SomeException, throwIO)
import Data.Store (Store)
import GHC.StaticPtr (StaticPtr)
import Herd

-- | A value being computed on the cluster.
newtype Future a = Future (Async a)

-- One task as a farm job of its own; its value, or its error thrown.
runOne :: Cluster -> StaticPtr (Task a b) -> a -> IO b
runOne cluster t x = do
  out <- farmEither cluster t [x]
  case out of
    [Right v] -> pure v
    [Left err] -> throwIO err
    _ -> ioError (userError "herd: a one-task farm gave other than one answer (a bug in herd)")

-- | Run a task on this input; returns at once.
submit :: Cluster -> StaticPtr (Task a b) -> a -> IO (Future b)
submit cluster t x = Future <$> async (runOne cluster t x)

-- | Run a task on a future's value once it is in.
submitAfter :: Cluster -> StaticPtr (Task a b) -> Future a -> IO (Future b)
submitAfter cluster t input = Future <$> async (await input >>= runOne cluster t)

-- | Run a task on the values of these futures, in order, once all are in.
submitWith :: Cluster -> StaticPtr (Task [a] b) -> [Future a] -> IO (Future b)
submitWith cluster t inputs = Future <$> async (mapM await inputs >>= runOne cluster t)

-- | The future's value, waiting for it; its error, thrown.
await :: Future a -> IO a
await (Future a) = wait a

-- | The future's outcome if it has ended.
poll :: Future a -> IO (Maybe (Either SomeException a))
poll (Future a) = A.poll a

-- | Stop a future that has not ended; 'await' then throws.
cancel :: Future a -> IO ()
cancel (Future a) = A.cancel a

-- | Run a Ref task on this input; returns at once. The value stays on
-- the worker that made it: the future gives its 'Ref'.
submitHeld :: Cluster -> StaticPtr (RefTask a b) -> a -> IO (Future (Ref b))
submitHeld cluster t x = Future <$> async (one "submitHeld" =<< farmRefs cluster t [x])

-- | Run a Ref task on a held future's value, on the worker that holds it,
-- once it is in; returns at once. The input stays held; the new value
-- stays where it was made.
submitOn :: Cluster -> StaticPtr (RefTask a b) -> Future (Ref a) -> IO (Future (Ref b))
submitOn cluster t input = Future <$> async (await input >>= \r -> one "submitOn" =<< mapRefs cluster t [r])

-- | Run a Ref task with an argument ('refTaskWith') on a held future's
-- value, on the worker that holds it, once it and the other held futures
-- are in: the others' values are fetched and given as the argument, in
-- order. Give the largest input first: it stays where it is, and only
-- the others travel (through the caller). The inputs stay held; the new
-- value stays where it was made.
submitOnWith :: Store c => Cluster -> StaticPtr (RefTaskWith a [c] b) -> Future (Ref a) -> [Future (Ref c)] -> IO (Future (Ref b))
submitOnWith cluster t input others = Future <$> async (do
  r <- await input
  values <- mapM await others >>= fetchMany cluster
  one "submitOnWith" =<< mapRefsWith cluster t [(r, values)])

one :: String -> [x] -> IO x
one _ [x] = pure x
one what _ = ioError (userError ("herd: " ++ what ++ " gave other than one value (a bug in herd)"))
