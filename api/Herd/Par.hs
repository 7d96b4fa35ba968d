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
import Control.Exception (Exception, displayException, evaluate, onException, throwIO)
import Control.Concurrent (yield)
import Control.Monad (ap, liftM, unless)
import qualified Data.ByteString as B
import Data.IORef
import qualified Data.Map.Strict as M
import Data.Store (Store, decode, encode)
import Data.Word (Word64)
import GHC.StaticPtr (StaticPtr)
import Herd.Task (Task, TaskCodecs (..), taskCodecs, taskRef)
import Herd.Core.Base (TaskRef)
import qualified Herd.Task.Pool as P
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
  Spawn :: Child b -> (IVar b -> Trace) -> Trace
  Run :: IO Trace -> Trace

-- | A variable written once: the future of a spawned child.
newtype IVar a = IVar (IORef (Slot a))

-- A variable's value, or the continuations parked on it.
data Slot a = Full a | Waiting [a -> Trace]

-- A child another worker may steal: its function, its argument's encoding
-- (made only if it is stolen), its value computed here, and how to read
-- the value a thief sends back.
data Child b = Child
  { childRef    :: !TaskRef
  , childArg    :: B.ByteString
  , childHere   :: b
  , childDecode :: B.ByteString -> Either String b
  }

-- A child offered to the pool, with the variable its value goes to.
data Held where
  Held :: IVar b -> Child b -> Held

-- | What went wrong in a Par computation.
data ParError
  = PutTwice          -- ^ a variable was put a second time
  | WaitsForever      -- ^ the result waits on a variable nothing will put
  | ChildFailed String  -- ^ a child run on another worker threw this (or its value did not decode)
  deriving (Eq, Show)

instance Exception ParError

-- One run's scheduler: its stack of work, and the children it offered
-- to thieves (all, and those not yet taken back or found stolen, newest
-- first).
data Env = Env
  { envStack   :: !(IORef [Trace])
  , envLinked  :: !Bool
  , envSession :: !P.Session
  , envHeld    :: !(IORef (M.Map Word64 Held))
  , envOwn     :: !(IORef [Word64])
  }

-- | Run a Par computation to its value.
runPar :: Par a -> a
runPar p = unsafePerformIO $ do
  result <- newIORef (Waiting [])
  env <- Env <$> newIORef [] <*> P.linked <*> P.newSession <*> newIORef M.empty <*> newIORef []
  schedule env (unPar p (\a -> Put (IVar result) a Done))
    `onException` giveUp env
  final <- readIORef result
  case final of
    Full a -> pure a
    Waiting _ -> throwIO WaitsForever
{-# NOINLINE runPar #-}

-- A computation that throws: its children offered are withdrawn, and
-- those a thief took are stopped there.
giveUp :: Env -> IO ()
giveUp env = do
  held <- M.keys <$> readIORef (envHeld env)
  offered <- P.withdraw held
  P.abandon (filter (`notElem` offered) held)

-- Run a trace, then the rest of the work, until none is left (children
-- taken by thieves included).
schedule :: Env -> Trace -> IO ()
schedule env = go
  where
    stack = envStack env
    go t = case t of
      Done -> next
      Fork child rest -> modifyIORef' stack (rest :) >> go child
      New k -> newIORef (Waiting []) >>= go . k . IVar
      Get (IVar r) k -> do
        slot <- readIORef r
        case slot of
          Full a -> go (k a)
          Waiting ks -> writeIORef r (Waiting (k : ks)) >> next
      Put v a rest -> fill env v a >> go rest
      Run act -> act >>= go
      Spawn c k -> do
        v <- IVar <$> newIORef (Waiting [])
        if envLinked env
          then offerChild env v c >> go (k v)
          -- nothing can steal it: the child first, as 'spawn' does
          else go (Fork (Run (runHere v c)) (k v))
    next = do
      s <- readIORef stack
      case s of
        t : ts -> writeIORef stack ts >> go t
        [] -> idle
    -- no local work: answers first, then the newest child still offered,
    -- then wait for children away, running stolen ones meanwhile
    idle = do
      answers <- if envLinked env then P.nextAnswers (envSession env) else pure []
      if not (null answers) then mapM_ (answer env) answers >> next else do
        own <- readIORef (envOwn env)
        case own of
          n : rest -> do
            writeIORef (envOwn env) rest
            mine <- P.takeBack n
            if mine then runHeld env n >>= go else idle
          [] -> do
            held <- readIORef (envHeld env)
            unless (M.null held) $ do
              P.askForWork
              w <- P.awaitWork (envSession env)
              case w of
                P.Answers as -> mapM_ (answer env) as >> next
                P.Steal c -> P.runStolenHere c >> idle
                P.Broken -> throwIO (ChildFailed "the link to the master broke while children ran on other workers")

-- Offer a child to thieves, keeping it to run here.
offerChild :: Env -> IVar b -> Child b -> IO ()
offerChild env v c = do
  n <- P.offer (envSession env) (childRef c) (childArg c)
  modifyIORef' (envHeld env) (M.insert n (Held v c))
  modifyIORef' (envOwn env) (n :)
  -- a thief's ask waits for the watch thread, which runs only when this
  -- one lets it: here, a spawn apart
  yield

-- A child's value computed here, as the trace that puts it.
runHere :: IVar b -> Child b -> IO Trace
runHere v c = do
  x <- evaluate (childHere c)
  pure (Put v x Done)

-- A child offered, taken back (or come home): run here.
runHeld :: Env -> Word64 -> IO Trace
runHeld env n = do
  held <- readIORef (envHeld env)
  case M.lookup n held of
    Just (Held v c) -> writeIORef (envHeld env) (M.delete n held) >> runHere v c
    Nothing -> pure Done

-- What came back for a child a thief took: its value put, or it runs here.
answer :: Env -> P.Answer -> IO ()
answer env a = case a of
  P.Lost n -> modifyIORef' (envStack env) (Run (runHeld env n) :)
  P.Answered n r -> do
    held <- readIORef (envHeld env)
    case M.lookup n held of
      Nothing -> pure ()
      Just (Held v c) -> do
        writeIORef (envHeld env) (M.delete n held)
        case r >>= childDecode c of
          Right x -> modifyIORef' (envStack env) (Put v x Done :)
          Left why -> throwIO (ChildFailed why)

-- Put a value, waking whoever waits on it.
fill :: Env -> IVar x -> x -> IO ()
fill env (IVar r) a = do
  slot <- readIORef r
  case slot of
    Full _ -> throwIO PutTwice
    Waiting ks -> do
      writeIORef r (Full a)
      modifyIORef' (envStack env) (\s -> foldr (\k acc -> k a : acc) s ks)

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
