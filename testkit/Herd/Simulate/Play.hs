{-# LANGUAGE ScopedTypeVariables #-}
-- | The simulated host's workers ("Herd.Simulate.Host"): what one
-- simulated worker does with a message from the master or a timer that
-- fired. It runs the worker's own steps (the farm's "Herd.Core.Worker.Step",
-- the evolve holder's "Herd.Core.Worker.Evolve") with the real functions, and
-- turns a declared simulated cost into a timer instead of a sleep.
-- Answers are queued per worker, for the host's loop to send at the end
-- of its round.
--
-- Promise: while a farm run's timer is pending, that worker's later
-- messages wait in order, as behind a real computation; a worker that
-- breaks the protocol is dropped with a line on standard error.
module Herd.Simulate.Play
  ( Host (..)
  , Sim (..)
  , Farm (..)
  , Due
  , fireDue
  , deliver
  , dropSim
  , hostControl
  , withSim
  , agentStep
  , posted
  ) where

import Control.Exception
import Control.Monad (forM_, unless)
import qualified Data.ByteString as B
import Data.IORef
import qualified Data.IntMap.Strict as IM
import qualified Data.IntSet as IS
import Data.Sequence ((|>))
import qualified Data.Sequence as Seq
import qualified Data.Text as T
import Herd.Wire.Writer (Encoder (..), encodeBytes, encoderBytes)
import Herd.Sys.Clock (monotonicSeconds)
import Herd.Task.Closure (cachedLookup)
import Herd.Task.Evolver (lookupEvolver)
import Herd.Core.Worker.Evolve
import Herd.Node.Worker.Evolve (runJob)
import Herd.Sys.Log (logToStderr)
import Herd.Packet (sendMessageHeld)
import Herd.Core.Packet.Policy (PacketPolicy (..), Urgency (..))
import Herd.Task.WorkCost (takeSimulatedCost)
import Herd.Simulate.Wheel
import Herd.Node.Store (dropShared, receivePiece)
import Herd.Task (Runner (..), TaskRef (..), lookupRunner)
import Herd.Core.Wire
import Herd.Core.Wire.Host
import Herd.Wire.HostEntry (controlEncoder, hostCallEncoder)
import Herd.Core.Agent.Evolve (HostEvent (..), HostOut (..), hostClaims, isEvolveAnswer, stepHost)
import Herd.Wire.Encode
import Herd.Wire.Scratch (ChunkOutcome (..), Scratch, chunkOutcome, resultsEncoder, resultsFitting, scratchCount)
import Herd.Node.Join
import Herd.Core.Worker.Step
import Herd.Simulate.State
import Herd.Simulate.ParWorker
import Herd.Node.Worker.Steal (isStealMessage, stealMessage)
import Herd.Core.Agent.Steal (HostStealOut (..), hostWorkerGone, hostWorkerSaid)
import Herd.Core.Steal (stealReport)
import qualified Herd.Task.Pool as P

-- | One step of the host's agent scheduler, carried out: its messages to
-- the workers delivered, its reports queued on the host link.
agentStep :: Host -> HostEvent -> IO ()
agentStep host ev = do
  now <- monotonicSeconds
  outs <- stateRef (hPopulation host) (stepHost now ev)
  forM_ outs $ \o -> case o of
    ToLocal w m -> withSim host (fromIntegral w) $ \s -> deliver host (fromIntegral w) s m
    ToMasterCall m -> do
      r <- try (sendMessageHeld (hSender host) Bulk (hostCallEncoder m) B.empty)
      case r of
        Left (e :: SomeException) -> logToStderr ("herd simulated host: cannot send to the master: " ++ displayException e)
        Right () -> pure ()
    DropLocal w why -> dropSim host (fromIntegral w) why


-- | Handle every timer whose tick has come.
fireDue :: Host -> IO ()
fireDue host = do
  now <- monotonicSeconds
  due <- atomicModifyIORef' (hWheel host) (\w -> let (ds, w') = expire now w in (w', ds))
  forM_ due $ \d -> case d of
    EvolveDue tag at fin -> withSim host tag $ \s -> do
      resumeAt host s at
      stateRef (sHeld s) (heldFinish fin) >>= mapM_ (say host tag s)
      pumpEvolve host tag s
    FarmDue tag at results outcome -> withSim host tag $ \s -> do
      resumeAt host s at
      farmEnded host tag s now results outcome

-- A farm run's results leave; what waited behind it is delivered.
farmEnded :: Host -> Int -> Sim -> Double -> [Encoder] -> Outcome -> IO ()
farmEnded host tag s now results outcome = do
  mapM_ (out host tag) results
  verdicts <- stateRef (sBatches s) (applied now outcome)
  Farm _ inbox <- readIORef (sFarm s)
  writeIORef (sFarm s) (Farm False Seq.empty)
  mapM_ (verdict host tag s) verdicts
  -- what waited behind the run, in order (a new run queues the rest again)
  mapM_ (deliver host tag s) inbox

-- | What a worker's thread gave the loop: its message queued, or its farm
-- run's end.
posted :: Host -> Posted -> IO ()
posted host p = do
  now <- monotonicSeconds
  writeIORef (hClock host) now
  case p of
    Said tag m -> withSim host tag $ \s -> say host tag s m
    RunEnded tag sc ran -> withSim host tag $ \s -> do
      results <- resultsOf s sc
      farmEnded host tag s now results (chunkOutcome ran)

-- A worker's timer fired: what it does next starts when the timer was
-- due, or when its next message came if that was later.
resumeAt :: Host -> Sim -> Double -> IO ()
resumeAt host s at = do
  fed <- readIORef (sFedAt s)
  writeIORef (hClock host) (max at fed)

-- | One message from the master to a simulated worker.
deliver :: Host -> Int -> Sim -> ToWorker -> IO ()
deliver host tag s msg
  -- a thief's ask and a child's answer do not wait behind a run, as a
  -- worker's watch reads them while it computes
  | isStealMessage msg = P.usingPool (parPool (sPar s)) (stealMessage (say host tag s) msg)
  | otherwise = do
  Farm computing inbox <- readIORef (sFarm s)
  if computing then writeIORef (sFarm s) (Farm True (inbox |> msg)) else case msg of
    Ping n _ -> say host tag s (Pong n)
    RunBatch bid ref count -> do
      runner <- cachedLookup (hRunners host) lookupRunner ref
      now <- monotonicSeconds
      stateRef (sBatches s) (startBatch now bid runner (fromIntegral count) (refName ref)) >>= mapM_ (verdict host tag s)
    Args k bytes -> do
      now <- monotonicSeconds
      verdicts <- stateRef (sBatches s) (arguments now (fromIntegral k))
      forM_ verdicts $ \v -> case v of
        Apply r _ count -> runFarm host tag s r bytes count
        _ -> verdict host tag s v
    -- a run's cost is its simulated time, which a cancel does not cut short
    BatchCancel bid -> stateRef (sBatches s) (cancel bid) >>= mapM_ (verdict host tag s)
    TaskDeadline _ -> pure ()   -- a simulated task's cost is declared, not run: it cannot overrun
    StreamOpen sid _ -> say host tag s (StreamAborted sid (T.pack "simulated workers do not run stream processes"))
    StreamIn {} -> pure ()
    StreamEnd _ -> pure ()
    StreamCredit _ _ -> pure ()
    StreamClose _ -> pure ()
    SharePart n total piece -> do
      whole <- receivePiece (sShares s) n total piece
      case whole of
        Left why -> dropSim host tag why
        Right True -> say host tag s (ShareHeld n)
        Right False -> pure ()
    ShareDrop n -> dropShared (sShares s) n >> say host tag s (ShareDropped n)
    HoldBudget _ -> pure ()   -- simulated workers share one process: nothing is spilled
    _ -> do
      found <- case msg of
        EvolveWith ref -> Just <$> cachedLookup (hEvolvers host) lookupEvolver ref
        _ -> pure Nothing
      stateRef (sHeld s) (heldMessage msg found) >>= mapM_ (say host tag s)
      pumpEvolve host tag s

-- Run a farm run's calls now; their results leave when its simulated
-- cost has passed (at once if it declared none).
runFarm :: Host -> Int -> Sim -> Runner -> B.ByteString -> Int -> IO ()
runFarm host tag s r bytes count = do
  _ <- takeSimulatedCost
  ran <- runnerChunk r (hScratch host) bytes count
  cost <- takeSimulatedCost
  case ran of
    -- a computation that may wait for thieves: its worker's thread runs it
    ChunkThrew _ why | needsOwnThread why -> do
      writeIORef (sFarm s) (Farm True Seq.empty)
      handRun (sPar s) r (B.copy bytes) count
    _ -> ranHere host tag s cost ran

-- A run's results in messages, copied out of the scratch (which the next
-- run reuses).
resultsOf :: Sim -> Scratch -> IO [Encoder]
resultsOf s sc = do
  n <- scratchCount sc
  let room = max 64 (policyCapacity (joinedPolicy (sJoined s)) - 64)
      cut lo | lo >= n = pure []
             | otherwise = do
                 k <- resultsFitting sc lo room
                 enc <- resultsEncoder sc lo (lo + k) >>= encoderBytes
                 (encodeBytes enc :) <$> cut (lo + k)
  cut 0

-- A run made in the loop: its results leave when its cost has passed.
ranHere :: Host -> Int -> Sim -> Double -> ChunkOutcome -> IO ()
ranHere host tag s cost ran = do
  results <- resultsOf s (hScratch host)
  let outcome = chunkOutcome ran
  now <- monotonicSeconds
  start <- readIORef (hClock host)
  if cost <= 0
    then do
      mapM_ (out host tag) results
      stateRef (sBatches s) (applied now outcome) >>= mapM_ (verdict host tag s)
    else do
      writeIORef (sFarm s) (Farm True Seq.empty)
      modifyIORef' (hWheel host) (setTimer (start + cost) (FarmDue tag (start + cost) results outcome))

-- Start the worker's next evolve job if it has none in progress.
pumpEvolve :: Host -> Int -> Sim -> IO ()
pumpEvolve host tag s = do
  held <- readIORef (sHeld s)
  case heldTake held of
    Nothing -> pure ()
    Just (Left answer, held') -> writeIORef (sHeld s) held' >> say host tag s answer >> pumpEvolve host tag s
    Just (Right job, held') -> do
      writeIORef (sHeld s) held'
      _ <- takeSimulatedCost
      fin <- runJob (hEvolvers host) job
      cost <- takeSimulatedCost
      if cost <= 0
        then do
          stateRef (sHeld s) (heldFinish fin) >>= mapM_ (say host tag s)
          pumpEvolve host tag s
        else do
          start <- readIORef (hClock host)
          -- the master's estimates are of the simulated time
          let fin' = case fin of
                Children ns cs -> Children (ns + round (cost * 1e9)) cs
                other -> other
          modifyIORef' (hWheel host) (setTimer (start + cost) (EvolveDue tag (start + cost) fin'))

verdict :: Host -> Int -> Sim -> Verdict Runner -> IO ()
verdict host tag s v = case v of
  Reply _ m -> say host tag s m
  Broken why -> dropSim host tag why
  Apply {} -> dropSim host tag "a function call asked for outside a run of arguments"

-- Queue a message to the master; under two-level evolve, an evolve
-- answer goes to the host's agent scheduler instead.
say :: Host -> Int -> Sim -> FromWorker -> IO ()
say host tag _ m
  | stealReport m = do
      (hs, o) <- hostWorkerSaid (fromIntegral tag) m <$> readIORef (hSteals host)
      writeIORef (hSteals host) hs
      unless (hsConsumed o) $ out host tag (encodeFromWorker m)
      stealsDecided host o
  | otherwise = do
  hosted <- readIORef (hHosted host)
  claimed <- if hosted && isEvolveAnswer m then (\pop -> hostClaims pop (fromIntegral tag) m) <$> readIORef (hPopulation host) else pure False
  if claimed then agentStep host (LocalSaid (fromIntegral tag) m) else out host tag (encodeFromWorker m)

-- What the host's broker decided: messages to its workers, and to the
-- master as a worker's own.
stealsDecided :: Host -> HostStealOut -> IO ()
stealsDecided host o = do
  forM_ (hsToMaster o) $ \(w, m) -> out host (fromIntegral w) (encodeFromWorker m)
  forM_ (hsToWorkers o) $ \(w, m) -> withSim host (fromIntegral w) $ \s -> deliver host (fromIntegral w) s m

-- Into the worker's packet buffer, as a real worker's messages go; the
-- host's loop flushes it at the end of the round ('flushIdle'), so no
-- timer is started. A full buffer is sent at once, and a link that fails
-- then drops the worker.
out :: Host -> Int -> Encoder -> IO ()
out host tag enc = withSim host tag $ \s -> do
  r <- try (sendMessageHeld (sSender s) Bulk enc B.empty)
  case r of
    Left (e :: SomeException) -> dropSim host tag ("cannot send to the master: " ++ displayException e)
    Right () -> modifyIORef' (hDirty host) (IS.insert tag)

-- | Drop a worker, telling the master why (an empty reason: the master
-- stopped it, and knows).
dropSim :: Host -> Int -> String -> IO ()
dropSim host tag why = withSim host tag $ \s -> do
  modifyIORef' (hSims host) (IM.delete tag)
  stopParWorker (sPar s)
  (hs, o) <- hostWorkerGone (fromIntegral tag) <$> readIORef (hSteals host)
  writeIORef (hSteals host) hs
  stealsDecided host o
  agentStep host (LocalLost (fromIntegral tag) (if null why then "stopped by the master" else why))
  unless' (null why) $ do
    logToStderr ("herd simulated worker " ++ show tag ++ ": " ++ why)
    hostControl host (WorkerGone (fromIntegral tag) (GoneDied (T.pack why)))
  where unless' c act = if c then pure () else act

-- | Queue a control message to the master on the host link.
hostControl :: Host -> HostControl -> IO ()
hostControl host c = do
  r <- try (sendMessageHeld (hSender host) Bulk (controlEncoder c) B.empty)
  case r of
    Left (e :: SomeException) -> logToStderr ("herd simulated host: cannot send to the master: " ++ displayException e)
    Right () -> pure ()

-- | Act on a simulated worker, if it is still there.
withSim :: Host -> Int -> (Sim -> IO ()) -> IO ()
withSim host tag act = IM.lookup tag <$> readIORef (hSims host) >>= mapM_ act
