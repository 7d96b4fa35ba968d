{-# LANGUAGE ScopedTypeVariables #-}
-- | Stopping a farm batch on a worker while it computes: because the
-- master cancelled it, or because a task ran past its deadline. The worker's loop
-- ("Herd.Node.Worker") reads its link and computes on one thread, so a
-- 'Herd.Core.Wire.BatchCancel' sent while a long task runs would wait for
-- the task's end. A watch thread looks at the link every 20 ms while a run
-- of the loop's computes (never otherwise): it reads what has come without
-- waiting, keeps those frames (copied) for the loop to handle next, in
-- order, notes every cancel in them, and interrupts the run when its own
-- batch is cancelled, or when the run's task has computed longer than the
-- deadline the master set ('setDeadline'; the watch sees a task end as
-- the run's count of results grows). The watch also hands the messages
-- that cannot wait for the run's end (a thief's ask for a "Herd.Par"
-- child, a child's answer) to the handler it was given, at once, and
-- marks their frames so the loop does not handle them again; while the
-- handler says its work is afoot, it looks every millisecond; and it tells
-- the handler when the link broke (a computation waiting on the link
-- would otherwise wait for ever).
--
-- Promises: the loop's reads and the watch's never overlap (the watch
-- reads only while a run computes, and the run waits for a read in
-- progress to end before it returns); frames reach the loop in
-- the order they came; an interrupt reaches the run it was meant for and
-- no later code ('computing' answers 'Nothing' for it). A run costs the
-- loop one write and one atomic change, no lock. A task is stopped
-- at its next allocation: a loop that allocates nothing runs to its end.
module Herd.Node.Worker.Cancel
  ( Canceller
  , Stop (..)
  , Watcher (..)
  , newCanceller
  , computing
  , setDeadline
  , deadlineOf
  , takeCancelled
  , stolenRun
  , takeQueued
  , hasQueued
  ) where

import Control.Concurrent (ThreadId, forkIO, killThread, myThreadId, threadDelay, yield)
import Control.Exception
import Control.Monad (forever, when)
import qualified Data.ByteString as B
import Data.IORef
import Data.Sequence (Seq, ViewL (..), (|>))
import qualified Data.Sequence as Seq
import qualified Data.Set as S
import Data.Word (Word64)
import Herd.Core.Wire (ToWorker (..), decodeToWorker)
import Herd.Packet (splitPacket)
import Herd.Sys.Clock (monotonicSeconds)
import Herd.Transport (Connection, recvAvailable, takeBufferedFrame)

-- | Why a run was stopped.
data Stop
  = Cancelled  -- ^ the master cancelled its batch
  | Overran    -- ^ its task computed longer than the deadline
  deriving (Eq, Show)

-- The interrupt a run is stopped with: asynchronous, so the task runners
-- pass it on instead of reporting it as the task's failure.
newtype BatchInterrupted = BatchInterrupted Stop
  deriving (Show)

instance Exception BatchInterrupted where
  toException = asyncExceptionToException
  fromException = asyncExceptionFromException

-- What the loop is doing, as the watch sees it: the watch reads the link
-- only in 'Reading', which it enters from 'Computing' and leaves back to
-- it, and the loop leaves 'Computing' only by one atomic change, so the
-- two never read the link at once (and no lock is taken per run).
data Run = Idle | Computing !Word64 | Reading !Word64 | Interrupting !Stop

-- | The watch over one link.
data Canceller = Canceller
  { cnConn      :: !Connection
  , cnCap       :: !Int                        -- ^ the frame cap
  , cnSplit     :: !Int                        -- ^ the packet's message cap
  , cnRun       :: !(IORef Run)
  , cnCancelled :: !(IORef (S.Set Word64))     -- ^ batches cancelled in frames read ahead
  , cnQueued    :: !(IORef (Seq (B.ByteString, Bool))) -- ^ frames read ahead, for the loop (and whether the handler took some of their messages)
  , cnLoop      :: !ThreadId                   -- ^ the loop's thread
  , cnProgress  :: !(IO Int)                   -- ^ results the run in progress has made
  , cnRuns      :: !(IORef Int)                -- ^ runs started, so the watch sees a new one
  , cnDeadline  :: !(IORef Double)             -- ^ seconds a task may compute (0: no deadline)
  , cnWatcher   :: !Watcher
  }

-- | What the watch hands on while a run computes.
data Watcher = Watcher
  { watchMessage :: ToWorker -> IO Bool   -- ^ handle a message now ('True'), or leave it to the loop
  , watchEager   :: IO Bool               -- ^ whether to look every millisecond
  , watchBroken  :: IO ()                 -- ^ the link broke
  }

-- | Start the watch for this link (its frame cap, its packets' message
-- cap, how many results the run in progress has made, and what to hand
-- on), run the body with it, and stop the watch after.
newCanceller :: Connection -> Int -> Int -> IO Int -> Watcher -> (Canceller -> IO a) -> IO a
newCanceller conn cap split progress watcher body = do
  me <- myThreadId
  cn <- Canceller conn cap split <$> newIORef Idle <*> newIORef S.empty <*> newIORef Seq.empty <*> pure me
                                 <*> pure progress <*> newIORef 0 <*> newIORef 0 <*> pure watcher
  bracket (forkIO (watch cn)) killThread (const (body cn))

-- | The deadline per task, in seconds (0: none).
setDeadline :: Canceller -> Double -> IO ()
setDeadline cn secs = writeIORef (cnDeadline cn) $! max 0 secs

-- | The deadline per task, in seconds (0: none).
deadlineOf :: Canceller -> IO Double
deadlineOf cn = readIORef (cnDeadline cn)

-- | Run a computation of this batch, lending the link to the watch
-- meanwhile: 'Left' why, if the run was stopped.
computing :: Canceller -> Word64 -> IO a -> IO (Either Stop a)
computing cn bid act = mask $ \restore -> do
  modifyIORef' (cnRuns cn) (+ 1)
  writeIORef (cnRun cn) (Computing bid)
  r <- try (restore act)
  was <- leave
  case (r, was) of
    (Left e, _) | Just (BatchInterrupted why) <- fromException e -> pure (Left why)
    (Left e, _) -> throwIO e
    -- the watch is throwing: take its interrupt here, not later
    (Right _, Interrupting why) ->
      (restore (forever (threadDelay 1000000)) `catch` \(BatchInterrupted _) -> pure ()) >> pure (Left why)
    (Right x, _) -> pure (Right x)
  where
    -- back to idle, once a read of the watch's in progress has ended
    leave = do
      was <- atomicModifyIORef' (cnRun cn) $ \st -> case st of
        Reading _ -> (st, st)
        _ -> (Idle, st)
      case was of
        Reading _ -> yield >> leave
        _ -> pure was

-- | The run number a stolen child of steal @n@ runs under, so that its
-- cancel ('Herd.Core.Wire.StolenCancel') stops it as a batch's stops a
-- batch: counted down from the top, where no farm batch's number is.
stolenRun :: Word64 -> Word64
stolenRun n = maxBound - n

-- | Whether a batch was cancelled in a frame read ahead (its start may
-- be read later: it is then stopped before it runs); the note is used up.
takeCancelled :: Canceller -> Word64 -> IO Bool
takeCancelled cn bid = atomicModifyIORef' (cnCancelled cn) (\s -> (S.delete bid s, S.member bid s))

-- | The oldest frame read ahead, if any, and whether the watch's handler
-- took some of its messages (the loop skips those).
takeQueued :: Canceller -> IO (Maybe (B.ByteString, Bool))
takeQueued cn = do
  q <- readIORef (cnQueued cn)
  case Seq.viewl q of
    f :< rest -> writeIORef (cnQueued cn) rest >> pure (Just f)
    EmptyL -> pure Nothing

-- | Whether frames read ahead wait.
hasQueued :: Canceller -> IO Bool
hasQueued cn = not . Seq.null <$> readIORef (cnQueued cn)

-- Every 20 ms: while a run computes, read what came, and interrupt the
-- run if its batch is cancelled or its task is past the deadline (a task
-- counts from when the watch first saw it: within 20 ms of its start).
watch :: Canceller -> IO ()
watch cn = go (-1, -1) 0
  where
    go seen since = do
      quick <- watchEager (cnWatcher cn)
      threadDelay (if quick then 1000 else 20000)
      st <- readIORef (cnRun cn)
      case st of
        Computing bid -> do
          lent <- atomicModifyIORef' (cnRun cn) $ \s -> case s of
            Computing b | b == bid -> (Reading bid, True)
            _ -> (s, False)
          when lent $ readAhead cn `finally` atomicModifyIORef' (cnRun cn) (\_ -> (Computing bid, ()))
          now <- monotonicSeconds
          task <- (,) <$> readIORef (cnRuns cn) <*> cnProgress cn
          let since' = if task == seen then since else now
          deadline <- readIORef (cnDeadline cn)
          hit <- S.member bid <$> readIORef (cnCancelled cn)
          if hit then interrupt bid Cancelled
            else when (deadline > 0 && now - since' > deadline) (interrupt bid Overran)
          go task since'
        _ -> go seen since
    interrupt bid why = do
      ok <- atomicModifyIORef' (cnRun cn) $ \s -> case s of
        Computing b | b == bid -> (Interrupting why, True)
        _ -> (s, False)
      when ok $ throwTo (cnLoop cn) (BatchInterrupted why)

-- Read without waiting, keep each whole frame (copied) and note its
-- cancels. A failure of the link is left for the loop to meet, once told
-- to the handler.
readAhead :: Canceller -> IO ()
readAhead cn = do
  r <- try (recvAvailable (cnConn cn) >>= \got -> (,) got <$> frames)
  case r of
    Left (_ :: SomeException) -> watchBroken (cnWatcher cn)
    Right (got, fs) -> mapM_ keep fs >> when (got == 0) (watchBroken (cnWatcher cn))
  where
    frames = do
      f <- takeBufferedFrame (cnCap cn) (cnConn cn)
      case f of
        Just frame -> (B.copy frame :) <$> frames
        Nothing -> pure []
    keep frame = case splitPacket (cnSplit cn) frame of
      Right msgs -> do
        let decoded = [ m | Right m <- map decodeToWorker msgs ]
        modifyIORef' (cnCancelled cn) (S.union (S.fromList ([ bid | BatchCancel bid <- decoded ]
                                                            ++ [ stolenRun n | StolenCancel n <- decoded ])))
        taken <- or <$> mapM (watchMessage (cnWatcher cn)) decoded
        modifyIORef' (cnQueued cn) (|> (frame, taken))
      Left _ -> modifyIORef' (cnQueued cn) (|> (frame, False))
