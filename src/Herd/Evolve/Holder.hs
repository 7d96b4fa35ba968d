{-# LANGUAGE ScopedTypeVariables #-}
-- | The worker's side of the evolve API: the states this worker holds, the
-- queue of states the master asked it to evolve, and the thread that
-- evolves them.
--
-- States are kept encoded, as the master sent them or as the evolve
-- function left them, so moving one costs no re-encoding. The worker's
-- message loop answers a request to give a state back at once, even while
-- the evolve thread is computing: that is what lets an idle worker take
-- over states that have not started yet. Children get ids this worker
-- makes up itself, its worker number in the high 24 bits and a counter
-- below, so ids never collide across workers and no round trip is needed.
--
-- A state lost with another worker can be recomputed here from its lineage
-- ('StateReplay'): evolve functions are pure, so replaying the steps that
-- made it, keeping the right child each time, gives it back exactly.
--
-- Promise: every 'EvolveState' is answered once, by 'StateEvolved',
-- 'EvolveThrew', 'StateMissing' or (when its state was given back first)
-- not at all; every 'StateRelease' by 'StateReleased', 'StateKept' or
-- 'StateMissing'; every 'StateReplay' by 'StateReplayed' or 'EvolveThrew';
-- 'StatesReset' by 'StatesCleared' after anything in progress has been
-- answered.
module Herd.Evolve.Holder
  ( Holder
  , newHolder
  , holderMessage
  , stopHolder
  , stateIdBits
  ) where

import Herd.Trace (traceHerd)
import Control.Concurrent (ThreadId, forkIO, killThread)
import Control.Concurrent.STM
import Control.Monad (forM, when)
import Data.Bits (shiftL, (.|.))
import qualified Data.ByteString as B
import Data.IORef
import qualified Data.Map.Strict as M
import Data.Sequence (Seq, ViewL (..), viewl, (|>))
import qualified Data.Sequence as Seq
import qualified Data.Text as T
import Data.Word (Word64)
import Herd.Clock (monotonicSeconds)
import Herd.Closure (describeClosureError)
import Herd.Evolve.Function (EvolveRunner (..), lookupEvolver)
import Herd.Evolve.Registry (stateIdBits)
import Herd.Task (TaskRef, tryUser)
import Herd.Wire


-- One queued piece of work: evolve a held state (its id, input and
-- function), or recompute a lost state along its lineage.
data Job
  = Job !Word64 !B.ByteString !EvolveRunner
  | Replay !Word64 !B.ByteString ![(TaskRef, B.ByteString, Int)]

-- | The evolve states of one worker and the thread evolving them.
data Holder = Holder
  { hStates  :: !(TVar (M.Map Word64 B.ByteString))
  , hQueue   :: !(TVar (Seq Job))
  , hCurrent :: !(TVar (Maybe Word64))   -- ^ the state being evolved now
  , hRunner  :: !(IORef (Maybe (Either String EvolveRunner)))
  , hCache   :: !(IORef (M.Map TaskRef (Either String EvolveRunner)))
  , hNext    :: !(IORef Word64)
  , hPrefix  :: !Word64
  , hSend    :: FromWorker -> IO ()
  , hThread  :: !(IORef (Maybe ThreadId))
  }

-- | A holder for the worker with this number, answering through this
-- function (which must be safe to call from two threads).
newHolder :: Word64 -> (FromWorker -> IO ()) -> IO Holder
newHolder wid send =
  Holder <$> newTVarIO M.empty <*> newTVarIO Seq.empty <*> newTVarIO Nothing <*> newIORef Nothing
         <*> newIORef M.empty <*> newIORef 0 <*> pure (wid `shiftL` stateIdBits) <*> pure send
         <*> newIORef Nothing

-- | Stop the evolve thread, if one was started.
stopHolder :: Holder -> IO ()
stopHolder h = readIORef (hThread h) >>= mapM_ killThread

-- | Handle one evolve message from the master (others are ignored).
holderMessage :: Holder -> ToWorker -> IO ()
holderMessage h msg = case msg of
  StatesReset -> do
    atomically $ writeTVar (hQueue h) Seq.empty
    -- the evolution in progress finishes and is answered first
    atomically $ readTVar (hCurrent h) >>= maybe (pure ()) (const retry)
    atomically $ writeTVar (hStates h) M.empty
    hSend h StatesCleared
  StateAdd sid bytes -> atomically $ modifyTVar' (hStates h) (M.insert sid bytes)
  EvolveWith ref -> do
    known <- M.lookup ref <$> readIORef (hCache h)
    runner <- maybe (lookupEvolver ref) pure known
    modifyIORef' (hCache h) (M.insert ref runner)
    writeIORef (hRunner h) (Just runner)
    case runner of
      Left why -> hSend h (EvolveRejected (T.pack why))
      Right _ -> ensureThread h
  EvolveState sid input -> do
    runner <- readIORef (hRunner h)
    case runner of
      Just (Right r) -> do
        held <- atomically $ do
          states <- readTVar (hStates h)
          if M.member sid states then modifyTVar' (hQueue h) (|> Job sid input r) >> pure True
                                 else pure False
        when (not held) $ hSend h (StateMissing sid)
      Just (Left _) -> pure ()   -- refused already; the master gives up the call
      Nothing -> hSend h (EvolveRejected (T.pack "an evolve request came before its function"))
  StateReplay sid root path -> do
    ensureThread h
    atomically $ modifyTVar' (hQueue h) (|> Replay sid root [ (ref, input, fromIntegral k) | (ref, input, k) <- path ])
  StateRelease sid -> do
    answer <- atomically $ do
      current <- readTVar (hCurrent h)
      states <- readTVar (hStates h)
      queue <- readTVar (hQueue h)
      case M.lookup sid states of
        _ | current == Just sid -> pure (StateKept sid)
        Nothing -> pure (StateMissing sid)
        Just bytes -> do
              writeTVar (hQueue h) (Seq.filter (\j -> jobState j /= sid) queue)
              writeTVar (hStates h) (M.delete sid states)
              pure (StateReleased sid bytes)
    hSend h answer
  _ -> pure ()

ensureThread :: Holder -> IO ()
ensureThread h = do
  running <- readIORef (hThread h)
  case running of
    Just _ -> pure ()
    Nothing -> forkIO (evolveLoop h) >>= writeIORef (hThread h) . Just

jobState :: Job -> Word64
jobState (Job sid _ _) = sid
jobState (Replay sid _ _) = sid

-- Evolve queued states one at a time, for ever.
evolveLoop :: Holder -> IO ()
evolveLoop h = do
  job <- atomically $ do
    queue <- readTVar (hQueue h)
    case viewl queue of
      EmptyL -> retry
      job :< rest -> do
        writeTVar (hQueue h) rest
        writeTVar (hCurrent h) (Just (jobState job))
        pure job
  answer <- case job of
    Job sid input runner -> evolveOne h sid input runner
    Replay sid root path -> replay h sid root path
  hSend h answer
  atomically $ writeTVar (hCurrent h) Nothing
  evolveLoop h

evolveOne :: Holder -> Word64 -> B.ByteString -> EvolveRunner -> IO FromWorker
evolveOne h sid input runner = do
  state <- M.lookup sid <$> readTVarIO (hStates h)
  case state of
    Nothing -> pure (StateMissing sid)
    Just bytes -> do
      start <- monotonicSeconds
      traceHerd ("herd worker evolve " ++ show sid)
      outcome <- tryUser (erApply runner bytes input)
      end <- monotonicSeconds
      traceHerd ("herd worker evolved " ++ show sid ++ " in " ++ show (round ((end - start) * 1e6) :: Int) ++ " us")
      case outcome of
        Left why -> pure (EvolveThrew sid (T.pack why))
        Right (Left why) -> pure (EvolveThrew sid (T.pack ("state or input does not decode: " ++ describeClosureError why)))
        Right (Right children) -> do
          named <- forM children $ \(s, o) -> do
            n <- atomicModifyIORef' (hNext h) (\k -> (k + 1, k))
            pure (hPrefix h .|. n, s, o)
          atomically $ modifyTVar' (hStates h) $ \m ->
            foldr (\(c, s, _) -> M.insert c s) (M.delete sid m) named
          pure (StateEvolved sid (round (max 0 (end - start) * 1e9)) [ (c, o) | (c, _, o) <- named ])

-- Recompute a state: from the root, each step's child at its position.
-- Evolve functions are pure, so this gives back exactly the state lost.
replay :: Holder -> Word64 -> B.ByteString -> [(TaskRef, B.ByteString, Int)] -> IO FromWorker
replay h sid root path = go root (0 :: Int) path
  where
    go bytes _ [] = do
      atomically $ modifyTVar' (hStates h) (M.insert sid bytes)
      pure (StateReplayed sid)
    go bytes depth ((ref, input, k) : rest) = do
      known <- M.lookup ref <$> readIORef (hCache h)
      runner <- maybe (lookupEvolver ref) pure known
      modifyIORef' (hCache h) (M.insert ref runner)
      case runner of
        Left why -> pure (EvolveThrew sid (T.pack ("cannot recompute it: " ++ why)))
        Right r -> do
          outcome <- tryUser (erApply r bytes input)
          case outcome of
            Right (Right children) | k >= 0, k < length children -> go (fst (children !! k)) (depth + 1) rest
            Right (Right children) ->
              pure (EvolveThrew sid (T.pack ("recomputing it, step " ++ show depth ++ " gave " ++ show (length children)
                                             ++ " children where child " ++ show k ++ " was expected: "
                                             ++ "is the evolve function deterministic?")))
            Right (Left why) -> pure (EvolveThrew sid (T.pack ("recomputing it: " ++ describeClosureError why)))
            Left why -> pure (EvolveThrew sid (T.pack ("recomputing it: " ++ why)))
