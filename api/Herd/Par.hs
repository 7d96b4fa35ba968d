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
-- allocations ("herd bench par" measures it on a worker).
--
-- Across workers, 'spawnTask' spawns a child other workers may steal: a
-- static task and its argument, offered in the worker's pool
-- ("Herd.Task.Pool") while the computation goes on. A 'get' of it runs
-- it here if no idle worker took it first; a taken one's value comes
-- back through the master ("Herd.Core.Steal"), and meanwhile a
-- computation with nothing left to do runs children stolen from others.
-- 'Herd.Skeleton.divideAndConquer' divides at the master instead.
--
-- Promises: 'runPar' gives what the same program gives evaluated
-- sequentially (the result depends on no scheduling order), whatever the
-- depth of spawns and gets; a variable put twice throws 'ParError'; a
-- 'runPar' whose result waits on a value nothing will put throws
-- 'ParError' saying so instead of hanging; an exception in a child
-- propagates out of 'runPar' ('ChildFailed' for one that threw on another
-- worker, or for every child away when the link to the master breaks);
-- a child whose thief was lost runs here instead; children offered and
-- not taken when 'runPar' throws are withdrawn.
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
  , spawnTask
  , ParError (..)
    -- * Combinators
  , parMap
  , parMapM
  , divConquer
  ) where

import Control.DeepSeq (NFData, force)
import Control.Exception (displayException)
import Data.Store (Store, decode, encode)
import GHC.StaticPtr (StaticPtr)
import Herd.Par.Run
import Herd.Task (Task, TaskCodecs (..), taskCodecs, taskRef)

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

-- | Spawn a child another worker may steal: the task applied to this
-- argument, its value fully evaluated. Its worker runs it itself unless
-- an idle worker takes it first (the oldest such child of a worker goes
-- first, the biggest piece of a divide-and-conquer tree); outside a
-- worker it is 'spawn'. Use it for the top levels of a recursion, where
-- a child is worth a message (milliseconds of work); 'spawn' below.
spawnTask :: (Store a, Store b, NFData b) => StaticPtr (Task a b) -> a -> Par (IVar b)
spawnTask ptr a = Par (Spawn (Child (taskRef ptr) (encode a) (force (applyTask (taskCodecs ptr) a)) decodeValue))
  where
    decodeValue bytes = either (\e -> Left ("its value does not decode: " ++ displayException e)) Right (decode bytes)

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
