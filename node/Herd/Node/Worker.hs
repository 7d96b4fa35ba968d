{-# LANGUAGE ScopedTypeVariables #-}
-- | A worker's loop once it has joined: read the master's packets, answer
-- farm batches through the pure step ("Herd.Core.Worker.Step"), run each stream
-- process in its own thread, and hand evolve messages to the state holder
-- ("Herd.Node.Worker.Evolve"). The buffer to the master is flushed whenever
-- nothing is left to do (no whole frame waiting and no stream thread
-- computing).
--
-- Promise: the loop ends when the master closes the link or says stop; a
-- message that breaks the protocol ends the process with a message naming
-- it (exit code 4); stream threads and the holder stop with the loop.
module Herd.Node.Worker
  ( serve
  ) where

import Herd.Sys.Log (logToStderr)
import Herd.Sys.Trace (traceHerd)
import Control.Concurrent (forkIO, killThread)
import Control.Concurrent.MVar
import Control.Concurrent.STM
import Control.Exception
import Control.Monad (forM_, unless, when)
import qualified Data.ByteString as B
import Data.IORef
import qualified Data.Map.Strict as M
import qualified Data.Text as T
import Data.Word (Word64)
import Herd.Sys.Clock (monotonicSeconds)
import Herd.Task.Closure (cachedLookup)
import Herd.Node.Worker.Evolve (Holder, holderMessage, newHolder, stopHolder)
import Herd.Node.Worker.Exchange (ExchangeTable, exchangeMessage, isExchangeMessage, newExchangeTable)
import Herd.Node.Worker.Datasets (DatasetStore, datasetMessage, isDatasetMessage, newDatasetStore)
import Herd.Node.Store (Assembly, dropShared, newAssembly, receivePiece, removeSpills, setHoldBudget, takeSpilled)
import Herd.Packet
import Herd.Core.Packet.Policy (PacketPolicy (..), Urgency (..))
import Herd.Task.Process (ProcessRunner (..), lookupProcess)
import Herd.Task (Runner (..), TaskRef (..), lookupRunner)
import Herd.Wire.Scratch (Scratch, chunkOutcome, newScratch, resultsEncoder, resultsFitting, scratchCount)
import Herd.Transport
import Herd.Core.Wire
import Herd.Wire.Encode
import Herd.Node.Worker.Streams (Slot (..), StreamHost (..), runStream)
import Herd.Node.Worker.Cancel (Canceller, Stop (..), Watcher (..), computing, deadlineOf, hasQueued, newCanceller, setDeadline, takeCancelled, takeQueued)
import Herd.Node.Worker.Steal (isStealMessage, runStolenInLoop, stealLink, stealMessage)
import qualified Herd.Task.Pool as P
import Herd.Core.Worker.Step
import System.Exit
import System.IO.Unsafe (unsafeInterleaveIO)

type RunnerCache = IORef (M.Map TaskRef (Either String Runner))

data Serving = Serving
  { svSender  :: !Sender
  , svRunners :: !RunnerCache
  , svProcs   :: !(IORef (M.Map TaskRef (Either String ProcessRunner)))
  , svBatches :: !(IORef (Batches Runner))  -- ^ the farm's pure step ("Herd.Core.Worker.Step")
  , svSlots   :: !(IORef (M.Map Word64 Slot))
  , svBusy    :: !(IORef Int)  -- ^ stream threads computing (not waiting)
  , svWindow  :: !Int
  , svHolder  :: !Holder  -- ^ evolve states ("Herd.Node.Worker.Evolve")
  , svScratch :: !Scratch -- ^ the results of the run of arguments in progress
  , svShares  :: !Assembly -- ^ shared values arriving ("Herd.Node.Store")
  , svExchange :: !ExchangeTable -- ^ keyed reductions' parts ("Herd.Node.Worker.Exchange")
  , svDatasets :: !DatasetStore  -- ^ held partitions of datasets ("Herd.Node.Worker.Datasets")
  , svCancel  :: !Canceller -- ^ the watch that stops a cancelled batch as it runs ("Herd.Node.Worker.Cancel")
  }

-- | Serve the master's packets on a joined link (this worker's number,
-- the frame cap, the packet policy and the stream window the master sent)
-- until it says stop or goes away. Farm tasks run here, a run of
-- arguments at a time; each stream process runs in its own thread. The buffer to the
-- master is flushed whenever nothing is left to do (no whole frame
-- waiting and no stream thread computing).
serve :: Connection -> Word64 -> Int -> PacketPolicy -> Int -> IO ()
serve conn wid maxFrame policy window = do
 scratch <- newScratch
 sender <- newSender policy (sendRawParts conn)
 let urgentReply m = sendMessage sender Urgent (encodeFromWorker m)
     intercept m
       | isStealMessage m = stealMessage urgentReply m >> pure True
       | otherwise = pure False
 newCanceller conn maxFrame (maxFrame `div` 5) (scratchCount scratch) (Watcher intercept P.busyPool P.linkBroken) $ \cancels -> do
  holder <- newHolder wid (\m -> sendMessage sender (fromWorkerUrgency m) (encodeFromWorker m))
  datasets <- newDatasetStore
  sv <- Serving sender <$> newIORef M.empty <*> newIORef M.empty <*> newIORef noBatch
                       <*> newIORef M.empty <*> newIORef 0 <*> pure window <*> pure holder <*> pure scratch
                       <*> newAssembly <*> newExchangeTable wid datasets <*> pure datasets <*> pure cancels
  P.setLink (stealLink (svRunners sv) urgentReply)
  let loop = P.takeStolen >>= maybe readNext (\c -> runStolenInLoop (svRunners sv) cancels urgentReply c >> whenIdle >> loop)
      -- nothing left to do: a thief for "Herd.Par" children (unless one
      -- waits to run here), and the buffer to the master flushed
      whenIdle = do
        ready <- (||) <$> hasBufferedFrame conn <*> hasQueued cancels
        busy <- readIORef (svBusy sv)
        when (not ready && busy == 0) $ do
          P.nothingToDo
          flushIdle sender
      readNext = do
        -- frames the watch read while a run computed come first
        frame <- (takeQueued cancels >>= maybe (fmap (fmap (\f -> (f, False))) (recvFrame maxFrame conn)) (pure . Just)) `catch` \(e :: SomeException) ->
          failWith 4 ("connection to master broke: " ++ displayException e)
        case frame of
          Nothing -> pure ()  -- the master is gone: stop quietly
          Just (packet, stealsTaken) -> case splitPacket (maxFrame `div` 5) packet of
            Left why -> failWith 4 ("bad packet from master: " ++ why)
            Right msgs -> do
              pending <- newIORef M.empty
              (go, kept) <- processAll sv pending stealsTaken msgs
              pushPending sv pending
              -- nothing refers to a packet whose messages were all
              -- handled here and now: its buffer may take the next one
              unless kept $ recycleFrame conn packet
              when go $ whenIdle >> loop
  loop `finally` do
    stopHolder holder
    removeSpills
    readIORef (svSlots sv) >>= mapM_ (\sl -> tryReadMVar (slotThread sl) >>= mapM_ killThread)

-- Input runs of each stream gathered from one packet, newest first.
type Pending = IORef (M.Map Word64 [(Int, B.ByteString)])

-- Handle a packet's messages in order (but those about stolen children
-- if the watch handled them already): whether to go on (no 'Shutdown'),
-- and whether a message may have kept a slice of the packet ('keepsBytes').
processAll :: Serving -> Pending -> Bool -> [B.ByteString] -> IO (Bool, Bool)
processAll sv pending stealsTaken = go False
  where
    go kept [] = pure (True, kept)
    go kept (m : ms) = case decodeToWorker m of
      Left why -> failWith 4 ("bad message from master: " ++ why)
      Right Shutdown -> pure (False, kept)
      Right msg
        | stealsTaken && isStealMessage msg -> go kept ms
        | otherwise -> handleMessage sv pending msg >> go (kept || keepsBytes msg) ms

-- Whether handling a message may leave something referring to its bytes
-- after the handler returns. Stream input waits in its stream's queue, and
-- the evolve holder keeps states encoded; everything else is decoded into
-- values of its own (task references copy their text, and a run of
-- arguments is read through a pointer that lives only while it runs). A
-- message type added later keeps its bytes until it is listed here.
keepsBytes :: ToWorker -> Bool
keepsBytes msg = case msg of
  Ping {} -> False
  RunBatch {} -> False
  Args {} -> False
  Shutdown -> False
  StreamOpen {} -> False
  StreamEnd {} -> False
  StreamCredit {} -> False
  StreamClose {} -> False
  SharePart {} -> False   -- its piece is copied
  ShareDrop {} -> False
  HoldBudget {} -> False
  GroupRun {} -> False    -- its inputs are decoded and its parts encoded before it returns
  PartIn {} -> False      -- its part is copied
  PartitionCombine {} -> False
  PartRun {} -> False     -- a put copies its argument; other functions decode theirs
  PartsDrop {} -> False
  GroupRunHeld {} -> False
  PartitionKeep {} -> False
  PartsDirectory {} -> False
  PartInFile {} -> False
  ExchangeEnd {} -> False
  StatesDrop {} -> False
  BatchCancel {} -> False
  TaskDeadline {} -> False
  StealAsk {} -> False
  StolenRun {} -> False   -- its argument is copied
  ChildDone {} -> False   -- its value is copied
  ChildThrew {} -> False
  ChildLost {} -> False
  StolenCancel {} -> False
  _ -> True

handleMessage :: Serving -> Pending -> ToWorker -> IO ()
handleMessage sv pending msg = case msg of
  Ping n _ -> reply sv Urgent (Pong n)
  RunBatch {} -> farmMessage sv msg
  Args {} -> farmMessage sv msg
  BatchCancel {} -> farmMessage sv msg
  Shutdown -> pure ()   -- stops the loop in processAll before it gets here
  StreamOpen {} -> streamMessage sv pending msg
  StreamIn {} -> streamMessage sv pending msg
  StreamEnd {} -> streamMessage sv pending msg
  StreamCredit {} -> streamMessage sv pending msg
  StreamClose {} -> streamMessage sv pending msg
  SharePart n total piece -> do
    whole <- receivePiece (svShares sv) n total piece
    case whole of
      Left why -> failWith 4 why
      Right True -> reply sv Bulk (ShareHeld n) >> tellSpilled sv
      Right False -> pure ()
  ShareDrop n -> dropShared (svShares sv) n >> reply sv Urgent (ShareDropped n)
  HoldBudget b -> setHoldBudget (fromIntegral b) >> tellSpilled sv
  TaskDeadline ms -> setDeadline (svCancel sv) (fromIntegral ms / 1000)
  _ | isStealMessage msg -> stealMessage (reply sv Urgent) msg
    | isExchangeMessage msg -> exchangeMessage (svExchange sv) (reply sv) msg
    | isDatasetMessage msg -> datasetMessage (svDatasets sv) (reply sv) msg
    | otherwise -> holderMessage (svHolder sv) msg

-- Answer the master.
reply :: Serving -> Urgency -> FromWorker -> IO ()
reply sv u m = sendMessage (svSender sv) u (encodeFromWorker m)
{-# INLINE reply #-}

-- Values that went to disk: the master shows them on the worker's row.
tellSpilled :: Serving -> IO ()
tellSpilled sv = takeSpilled >>= mapM_ (reply sv Bulk . ShareSpilled)

-- A farm's batch and its arguments, through the pure step
-- ("Herd.Core.Worker.Step").
farmMessage :: Serving -> ToWorker -> IO ()
farmMessage sv msg = case msg of
  RunBatch bid ref count -> do
    runner <- cachedLookup (svRunners sv) lookupRunner ref
    traceHerd ("herd worker batch " ++ show bid ++ " of " ++ refName ref ++ ": " ++ show count ++ " tasks")
    now <- lazyClock
    stepBatches (startBatch now bid runner (fromIntegral count) (refName ref)) >>= mapM_ plain
    -- cancelled before it started: stopped at once
    gone <- takeCancelled (svCancel sv) bid
    when gone $ stepBatches (cancel bid) >>= mapM_ plain
  BatchCancel bid -> stepBatches (cancel bid) >>= mapM_ plain
  Args k bytes -> do
    now <- lazyClock
    verdicts <- stepBatches (arguments now (fromIntegral k))
    forM_ verdicts $ \v -> case v of
      Apply r _ count -> do
        bid <- maybe 0 id . currentBatch <$> readIORef (svBatches sv)
        ran <- computing (svCancel sv) bid (runnerChunk r (svScratch sv) bytes count)
        sendResults sv
        -- a task past its deadline is the one after the results it sent
        overran <- scratchCount (svScratch sv)
        deadline <- deadlineOf (svCancel sv)
        end <- lazyClock
        let outcome = case ran of
              Right c -> chunkOutcome c
              Left Cancelled -> Stopped
              Left Overran -> Threw overran ("it ran past its deadline of " ++ show deadline ++ " s (configTaskDeadline) and was stopped")
        stepBatches (applied end outcome) >>= mapM_ plain
      _ -> plain v
  _ -> pure ()
  where
    -- the new state is forced before its verdicts are carried out, so a
    -- batch's start is read before its first task runs
    stepBatches f = do
      (b', verdicts) <- f <$> readIORef (svBatches sv)
      writeIORef (svBatches sv) $! b'
      pure verdicts
    plain v = case v of
      Reply u m@(BatchDone bid ns) -> do
        traceHerd ("herd worker batch " ++ show bid ++ " done, busy " ++ show (ns `div` 1000) ++ " us")
        reply sv u m
      Reply u m -> reply sv u m
      Broken why -> failWith 4 why
      Apply {} -> failWith 4 "a function call asked for outside a run of arguments"
    -- the step reads the time only at a batch's first argument and its
    -- end: the clock is read only if it does
    lazyClock = unsafeInterleaveIO monotonicSeconds

-- A stream process's opening, input, credit and end.
streamMessage :: Serving -> Pending -> ToWorker -> IO ()
streamMessage sv pending msg = case msg of
  StreamOpen sid ref -> do
    known <- M.member sid <$> readIORef (svSlots sv)
    when known $ failWith 4 ("master opened stream " ++ show sid ++ " twice")
    runner <- cachedLookup (svProcs sv) lookupProcess ref
    case runner of
      Left why -> reply sv Urgent (StreamAborted sid (T.pack why))
      Right pr -> do
        slot <- Slot <$> newTQueueIO <*> newTVarIO 0 <*> newEmptyMVar
        modifyIORef' (svSlots sv) (M.insert sid slot)
        modifyIORef' (svBusy sv) (+ 1)
        tid <- forkIO (runStream (StreamHost (svSender sv) (svBusy sv) (svWindow sv) (svSlots sv)) sid pr slot)
        putMVar (slotThread slot) tid
  StreamIn sid k bytes -> modifyIORef' pending (M.insertWith (++) sid [(fromIntegral k, bytes)])
  StreamEnd sid -> do
    pushOne sv pending sid
    withSlot sid $ \slot -> atomically (writeTQueue (slotInput slot) Nothing)
  StreamCredit sid n -> withSlot sid $ \slot -> atomically (modifyTVar' (slotCredit slot) (+ fromIntegral n))
  StreamClose sid -> withSlot sid $ \slot -> do
    modifyIORef' (svSlots sv) (M.delete sid)
    tryReadMVar (slotThread slot) >>= mapM_ killThread
  _ -> pure ()
  where
    -- a stream that already ended or was closed: late messages are dropped
    withSlot sid act = M.lookup sid <$> readIORef (svSlots sv) >>= mapM_ act

-- Send the results of the last run, as many to a message as the packet
-- layer has room for (one each with chunking off).
sendResults :: Serving -> IO ()
sendResults sv = scratchCount sc >>= go 0
  where
    sc = svScratch sv
    go lo n
      | lo >= n = pure ()
      | otherwise = do
          room <- senderRoom (svSender sv)
          k <- resultsFitting sc lo room
          resultsEncoder sc lo (lo + k) >>= sendValues (svSender sv) Bulk k
          go (lo + k) n

-- Hand the input runs gathered from one packet to their streams.
pushPending :: Serving -> Pending -> IO ()
pushPending sv pending = readIORef pending >>= mapM_ (pushOne sv pending) . M.keys

pushOne :: Serving -> Pending -> Word64 -> IO ()
pushOne sv pending sid = do
  elems <- M.lookup sid <$> readIORef pending
  modifyIORef' pending (M.delete sid)
  case elems of
    Just xs@(_ : _) -> do
      slots <- readIORef (svSlots sv)
      mapM_ (\slot -> atomically (writeTQueue (slotInput slot) (Just (reverse xs)))) (M.lookup sid slots)
    _ -> pure ()

failWith :: Int -> String -> IO a
failWith code msg = logToStderr ("herd worker: " ++ msg) >> exitWith (ExitFailure code)

