{-# LANGUAGE GADTs #-}
-- | The Par monad inside a task: futures a computation spawns and waits
-- for, run on the worker that runs the task.
--
-- > nfib :: Int -> Int -> Par Int
-- > nfib t n
-- >   | n <= t = pure (nfibSeq n)
-- >   | otherwise = do
-- >       a <- spawn (nfib t (n - 1))
-- >       b <- nfib t (n - 2)
-- >       x <- get a
-- >       pure (x + b + 1)
-- >
-- > nfibTask = static (task (\n -> runPar (nfib 20 n)))   -- a task like any other
--
-- 'spawn' puts the child on the worker's own stack of work and goes on
-- with the child first (work first, as Cilk does, so a deep recursion
-- holds one path of the tree, not the whole tree); a 'get' of a value not
-- yet put does not block: the waiting continuation is parked on the
-- variable and the worker runs other work until the value arrives. No
-- thread, lock or message is involved: a spawn and get costs a few
-- allocations ("herd bench par" measures it on a worker). Across workers,
-- 'Herd.Skeleton.divideAndConquer' divides a problem into pieces at the
-- master and runs each piece as a task, which may use this monad.
--
-- Promises: 'runPar' gives what the same program gives evaluated
-- sequentially (the result depends on no scheduling order), whatever the
-- depth of spawns and gets; a variable put twice throws 'ParError'; a
-- 'runPar' whose result waits on a value nothing will put throws
-- 'ParError' saying so instead of hanging; an exception in a child
-- propagates out of 'runPar'.
module Herd.Par
  ( -- * Futures
    Par
  , runPar
  , IVar
  , new
  , put
  , put_
  , get
  , fork
  , spawn
  , spawn_
  , ParError (..)
    -- * Combinators
  , parMap
  , parMapM
  , divConquer
  ) where

import Control.DeepSeq (NFData, force)
import Control.Exception (Exception, throwIO)
import Control.Monad (ap, liftM)
import Data.IORef
import System.IO.Unsafe (unsafePerformIO)

-- | A computation that may spawn children and wait for their values.
newtype Par a = Par { unPar :: (a -> Trace) -> Trace }

instance Functor Par where
  fmap = liftM

instance Applicative Par where
  pure a = Par ($ a)
  (<*>) = ap

instance Monad Par where
  Par m >>= k = Par (\c -> m (\a -> unPar (k a) c))

-- What the scheduler runs: the rest of a computation, as a tree of its
-- next effect.
data Trace where
  Done :: Trace
  Fork :: Trace -> Trace -> Trace
  New :: (IVar a -> Trace) -> Trace
  Get :: IVar a -> (a -> Trace) -> Trace
  Put :: IVar a -> a -> Trace -> Trace

-- | A variable written once: the future of a spawned child.
newtype IVar a = IVar (IORef (Slot a))

-- A variable's value, or the continuations parked on it.
data Slot a = Full a | Waiting [a -> Trace]

-- | What went wrong in a Par computation.
data ParError
  = PutTwice          -- ^ a variable was put a second time
  | WaitsForever      -- ^ the result waits on a variable nothing will put
  deriving (Eq, Show)

instance Exception ParError

-- | Run a Par computation to its value.
runPar :: Par a -> a
runPar p = unsafePerformIO $ do
  result <- newIORef (Waiting [])
  stack <- newIORef []
  schedule stack (unPar p (\a -> Put (IVar result) a Done))
  final <- readIORef result
  case final of
    Full a -> pure a
    Waiting _ -> throwIO WaitsForever
{-# NOINLINE runPar #-}

-- Run a trace, then the rest of the work, until none is left.
schedule :: IORef [Trace] -> Trace -> IO ()
schedule stack = go
  where
    go t = case t of
      Done -> next
      Fork child rest -> modifyIORef' stack (rest :) >> go child
      New k -> newIORef (Waiting []) >>= go . k . IVar
      Get (IVar r) k -> do
        slot <- readIORef r
        case slot of
          Full a -> go (k a)
          Waiting ks -> writeIORef r (Waiting (k : ks)) >> next
      Put (IVar r) a rest -> do
        slot <- readIORef r
        case slot of
          Full _ -> throwIO PutTwice
          Waiting ks -> do
            writeIORef r (Full a)
            modifyIORef' stack (\s -> foldr (\k acc -> k a : acc) s ks)
            go rest
    next = do
      s <- readIORef stack
      case s of
        [] -> pure ()
        t : ts -> writeIORef stack ts >> go t

-- | A fresh, empty variable.
new :: Par (IVar a)
new = Par New

-- | Put a value, fully evaluated first, waking whoever waits for it.
put :: NFData a => IVar a -> a -> Par ()
put v a = Par (\c -> let a' = force a in a' `seq` Put v a' (c ()))

-- | Put a value evaluated to weak head normal form only.
put_ :: IVar a -> a -> Par ()
put_ v a = Par (\c -> a `seq` Put v a (c ()))

-- | The variable's value, waiting (without blocking the worker) until it
-- is put.
get :: IVar a -> Par a
get v = Par (Get v)

-- | Run a child beside the rest of this computation: the child first, the
-- rest when the child waits or ends.
fork :: Par () -> Par ()
fork child = Par (\c -> Fork (unPar child (const Done)) (c ()))

-- | Run a child computation; its value, fully evaluated, is the future's.
spawn :: NFData a => Par a -> Par (IVar a)
spawn p = do
  v <- new
  fork (p >>= put v)
  pure v

-- | 'spawn' evaluating the value to weak head normal form only.
spawn_ :: Par a -> Par (IVar a)
spawn_ p = do
  v <- new
  fork (p >>= put_ v)
  pure v

-- | Apply a function to every element, each as its own child.
parMap :: NFData b => (a -> b) -> [a] -> Par [b]
parMap f = parMapM (pure . f)

-- | Run a Par function on every element, each as its own child.
parMapM :: NFData b => (a -> Par b) -> [a] -> Par [b]
parMapM f xs = mapM (spawn . f) xs >>= mapM get

-- | Divide and conquer: a trivial problem is solved at once, another is
-- divided, its parts solved as children and their answers combined.
divConquer :: NFData b => (a -> Bool) -> (a -> b) -> (a -> [a]) -> (a -> [b] -> b) -> a -> Par b
divConquer trivial solve divide combine = go
  where
    go a
      | trivial a = pure (solve a)
      | otherwise = combine a <$> parMapM go (divide a)
