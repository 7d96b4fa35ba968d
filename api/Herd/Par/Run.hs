{-# LANGUAGE GADTs #-}
-- | The Par monad's machinery ("Herd.Par" is its interface): the
-- computation as a trace of effects, write-once variables, and the
-- scheduler 'runPar' runs a trace with, including the children offered
-- to thieves ("Herd.Task.Pool") and their answers.
--
-- Promises: those of "Herd.Par"; a trace is run by one thread, and only
-- the pool's operations are shared with the worker's watch.
module Herd.Par.Run
  ( Par (..)
  , Trace (..)
  , IVar (..)
  , Child (..)
  , ParError (..)
  , runPar
  ) where

import Control.Concurrent (yield)
import Control.Exception (Exception, evaluate, onException, throwIO)
import Control.Monad (ap, liftM, unless)
import qualified Data.ByteString as B
import Data.IORef
import qualified Data.Map.Strict as M
import Data.Word (Word64)
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

-- | What the scheduler runs: the rest of a computation, as a tree of its
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

-- | A child another worker may steal: its function, its argument's encoding
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
  , envSession :: !P.Session
  , envHeld    :: !(IORef (M.Map Word64 Held))
  , envOwn     :: !(IORef [Word64])
  }

-- | Run a Par computation to its value.
runPar :: Par a -> a
runPar p = unsafePerformIO $ do
  result <- newIORef (Waiting [])
  env <- Env <$> newIORef [] <*> P.newSession <*> newIORef M.empty <*> newIORef []
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
  unless (null held) $ do
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
        -- asked at each spawn, not once per run: a run that never spawns
        -- such a child does not ask ("Herd.Task.Pool" may need a thread)
        stealable <- P.linked
        if stealable
          then offerChild env v c >> go (k v)
          -- nothing can steal it: the child first, as 'spawn' does
          else go (Fork (Run (runHere v c)) (k v))
    next = do
      s <- readIORef stack
      case s of
        t : ts -> writeIORef stack ts >> go t
        [] -> idle
    -- no local work: answers first, then a stolen child given since this
    -- computation last asked (another worker waits for it, so it comes
    -- before this one's own), then the newest child still offered, then
    -- wait for children away, running stolen ones meanwhile
    idle = do
      none <- M.null <$> readIORef (envHeld env)
      answers <- if none then pure [] else P.nextAnswers (envSession env)
      stolen <- if none || not (null answers) then pure Nothing else P.takeStolen
      own <- readIORef (envOwn env)
      case (answers, stolen, own) of
        (_ : _, _, _) -> mapM_ (answer env) answers >> next
        (_, Just c, _) -> P.runStolenHere c >> idle
        (_, _, n : rest) -> do
          writeIORef (envOwn env) rest
          mine <- P.takeBack n
          if mine then runHeld env n >>= go else idle
        _ -> unless none $ do
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
