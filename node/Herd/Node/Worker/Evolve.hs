{-# LANGUAGE ScopedTypeVariables #-}
-- | The worker's side of the evolve API in a real worker: the pure machine
-- of "Herd.Core.Worker.Evolve" under one 'TVar', and a thread that evolves the
-- states it hands out, one at a time.
--
-- States are kept encoded, as the master sent them or as the evolve
-- function left them, so moving one costs no re-encoding. The worker's
-- message loop answers a request to give a state back at once, even while
-- the evolve thread is computing: that is what lets an idle worker take
-- over states that have not started yet. A state lost with another worker
-- can be recomputed here from its lineage ('StateReplay'): evolve
-- functions are pure, so replaying the steps that made it, keeping the
-- right child each time, gives it back exactly.
--
-- Promise: the answers of "Herd.Core.Worker.Evolve", each sent once, in the
-- order the machine gives them.
module Herd.Node.Worker.Evolve
  ( Holder
  , newHolder
  , holderMessage
  , stopHolder
  , stateIdBits
  , runJob
  ) where

import Herd.Sys.Trace (traceHerd)
import Control.Concurrent (ThreadId, forkIO, killThread)
import Control.Concurrent.STM
import Data.IORef
import qualified Data.Map.Strict as M
import qualified Data.Text as T
import Data.Word (Word64)
import Herd.Sys.Clock (monotonicSeconds)
import Herd.Task.Closure (cachedLookup, describeClosureError)
import Herd.Task.Evolver (EvolveRunner (..), lookupEvolver)
import Herd.Core.Worker.Evolve
import Herd.Core.Evolve.Registry (stateIdBits)
import Herd.Task (TaskRef, tryUser)
import Herd.Core.Wire

-- | The evolve states of one worker and the thread evolving them.
data Holder = Holder
  { hHeld    :: !(TVar (Held EvolveRunner))
  , hCache   :: !(IORef (M.Map TaskRef (Either String EvolveRunner)))
  , hSend    :: FromWorker -> IO ()
  , hThread  :: !(IORef (Maybe ThreadId))
  }

-- | A holder for the worker with this number, answering through this
-- function (which must be safe to call from two threads).
newHolder :: Word64 -> (FromWorker -> IO ()) -> IO Holder
newHolder wid send = Holder <$> newTVarIO (newHeld wid) <*> newIORef M.empty <*> pure send <*> newIORef Nothing

-- | Stop the evolve thread, if one was started.
stopHolder :: Holder -> IO ()
stopHolder h = readIORef (hThread h) >>= mapM_ killThread

-- | Handle one evolve message from the master (others are ignored).
holderMessage :: Holder -> ToWorker -> IO ()
holderMessage h msg = do
  found <- case msg of
    EvolveWith ref -> Just <$> cachedLookup (hCache h) lookupEvolver ref
    _ -> pure Nothing
  answers <- atomically $ stateTVar (hHeld h) (swap . heldMessage msg found)
  mapM_ (hSend h) answers
  case msg of
    EvolveWith _ -> ensureThread h
    StateReplay {} -> ensureThread h
    _ -> pure ()
  where swap (a, b) = (b, a)

ensureThread :: Holder -> IO ()
ensureThread h = do
  running <- readIORef (hThread h)
  case running of
    Just _ -> pure ()
    Nothing -> forkIO (evolveLoop h) >>= writeIORef (hThread h) . Just

-- Evolve the jobs the machine hands out, one at a time, for ever.
evolveLoop :: Holder -> IO ()
evolveLoop h = do
  next <- atomically $ do
    held <- readTVar (hHeld h)
    case heldTake held of
      Nothing -> retry
      Just (job, held') -> writeTVar (hHeld h) held' >> pure job
  case next of
    Left answer -> hSend h answer
    Right job -> do
      outcome <- runJob (hCache h) job
      answers <- atomically $ stateTVar (hHeld h) (\held -> let (held', as) = heldFinish outcome held in (as, held'))
      mapM_ (hSend h) answers
  evolveLoop h

-- | Run one job of the machine: evolve a state (timed) or recompute one.
-- Shared by the real holder and the simulated host.
runJob :: IORef (M.Map TaskRef (Either String EvolveRunner)) -> Job EvolveRunner -> IO Finished
runJob _ (Evolve sid bytes input runner) = do
  start <- monotonicSeconds
  traceHerd ("herd worker evolve " ++ show sid)
  outcome <- tryUser (erApply runner bytes input)
  end <- monotonicSeconds
  traceHerd ("herd worker evolved " ++ show sid ++ " in " ++ show (round ((end - start) * 1e6) :: Int) ++ " us")
  pure $ case outcome of
    Left why -> Failed (T.pack why)
    Right (Left why) -> Failed (T.pack ("state or input does not decode: " ++ describeClosureError why))
    Right (Right children) -> Children (round (max 0 (end - start) * 1e9)) children
runJob cache (Replay _ root path) = go root (0 :: Int) path
  where
    -- from the root, each step's child at its position: evolve functions
    -- are pure, so this gives back exactly the state lost
    go bytes _ [] = pure (Replayed bytes)
    go bytes depth ((ref, input, k) : rest) = do
      runner <- cachedLookup cache lookupEvolver ref
      case runner of
        Left why -> pure (Failed (T.pack ("cannot recompute it: " ++ why)))
        Right r -> do
          outcome <- tryUser (erApply r bytes input)
          case outcome of
            Right (Right children) | k >= 0, k < length children -> go (fst (children !! k)) (depth + 1) rest
            Right (Right children) ->
              pure (Failed (T.pack ("recomputing it, step " ++ show depth ++ " gave " ++ show (length children)
                                    ++ " children where child " ++ show k ++ " was expected: "
                                    ++ "is the evolve function deterministic?")))
            Right (Left why) -> pure (Failed (T.pack ("recomputing it: " ++ describeClosureError why)))
            Left why -> pure (Failed (T.pack ("recomputing it: " ++ why)))
