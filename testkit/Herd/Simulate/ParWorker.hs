-- | The thread of one simulated worker ("Herd.Simulate.Host"), for what
-- cannot run in the host's one loop: a "Herd.Par" computation whose
-- children other workers may steal ('Herd.Par.spawnTask') waits for
-- thieves' answers in the middle of a pure call, and a stolen child is
-- such a call too. Each simulated worker has a thread of its own, its own
-- pool ("Herd.Task.Pool") and its own account of simulated cost
-- ("Herd.Task.WorkCost"), slept off before anything it does can be seen:
-- the real Par scheduler and the master's real broker run, and only the
-- leaves' work is a sleep.
--
-- The thread runs what the loop hands it (a farm run the loop found to
-- need a thread) and the stolen children the master gives its worker,
-- one at a time, and asks the master for work whenever it has none, as a
-- worker's loop does. What it says goes to the loop ('Outbox'), which
-- alone touches the host's state.
--
-- Promise: every message the thread would send reaches the outbox in the
-- order it was made, after the simulated cost that came before it.
module Herd.Simulate.ParWorker
  ( Outbox
  , newOutbox
  , outboxFd
  , takePosted
  , Posted (..)
  , ParWorker
  , startParWorker
  , stopParWorker
  , handRun
  , parPool
  , needsOwnThread
  ) where

import Control.Concurrent (ThreadId, forkFinally, killThread)
import Control.Concurrent.STM
import Control.Exception (AsyncException (..), displayException, fromException)
import Control.Monad (forever, when)
import qualified Data.ByteString as B
import Data.IORef
import qualified Data.Map.Strict as M
import Foreign.C.Types (CInt (..))
import Herd.Core.Wire (FromWorker)
import Herd.Sys.Log (logToStderr)
import Herd.Node.Worker.Steal (stealLink)
import qualified Herd.Task.Pool as P
import Herd.Task (Runner (..), TaskRef)
import Herd.Task.WorkCost (payOwnCost, withOwnCost)
import Herd.Wire.Scratch (ChunkOutcome, Scratch, newScratch)

foreign import ccall unsafe "herd_eventfd" c_eventfd :: IO CInt
foreign import ccall unsafe "herd_eventfd_signal" c_signal :: CInt -> IO ()
foreign import ccall unsafe "herd_eventfd_drain" c_drain :: CInt -> IO ()

-- | What the workers' threads give the host's loop (newest first), and
-- the eventfd that wakes the loop when they do: signalled once until the
-- loop takes what was posted, not once a message.
data Outbox = Outbox !(TVar [Posted]) !(TVar Bool) !CInt

-- | What a worker's thread gives the loop.
data Posted
  = Said !Int !FromWorker
    -- ^ a message of this worker's to the master
  | RunEnded !Int !Scratch !ChunkOutcome
    -- ^ a farm run this worker's thread made: its results are in the scratch

-- | A new outbox (its eventfd is for the loop's epoll set).
newOutbox :: IO Outbox
newOutbox = do
  fd <- c_eventfd
  when (fd < 0) $ ioError (userError "herd simulated host: no eventfd for the workers' threads")
  Outbox <$> newTVarIO [] <*> newTVarIO False <*> pure fd

-- | The eventfd that is readable when something was posted.
outboxFd :: Outbox -> CInt
outboxFd (Outbox _ _ fd) = fd

-- | Everything posted so far, oldest first.
takePosted :: Outbox -> IO [Posted]
takePosted (Outbox q signalled fd) = do
  c_drain fd
  reverse <$> atomically (writeTVar signalled False >> swapTVar q [])

post :: Outbox -> Posted -> IO ()
post (Outbox q signalled fd) p = do
  first <- atomically $ do
    modifyTVar' q (p :)
    not <$> swapTVar signalled True
  when first (c_signal fd)

-- | A simulated worker's thread.
data ParWorker = ParWorker
  { pwPool   :: !P.OwnPool
  , pwRuns   :: !(TQueue (Runner, B.ByteString, Int))
  , pwThread :: !ThreadId
  }

-- | The worker's pool, for the loop to answer the master's steal messages
-- from ('P.usingPool').
parPool :: ParWorker -> P.OwnPool
parPool = pwPool

-- | Whether a farm run threw because its computation needs a thread of
-- its own (the loop then hands it to 'handRun').
needsOwnThread :: String -> Bool
needsOwnThread why = why == displayException P.NeedsOwnThread

-- | Start the thread of worker @tag@.
startParWorker :: Outbox -> Int -> IO ParWorker
startParWorker box tag = do
  runners <- newIORef M.empty
  runs <- newTQueueIO
  scratch <- newIORef Nothing
  -- what the thread says leaves after the cost it owes (the loop's own
  -- sends, a steal's answer, owe nothing)
  let send m = payOwnCost >> post box (Said tag m)
  pool <- P.newOwnPool (stealLink (runners :: IORef (M.Map TaskRef (Either String Runner))) send)
  let next = atomically ((Left <$> readTQueue runs) `orElse` (Right <$> P.stolenReady pool))
      idle = do
        none <- atomically (isEmptyTQueue runs)
        when none P.nothingToDo
      serve = do
        idle
        forever $ do
          w <- next
          case w of
            Left (r, bytes, count) -> do
              sc <- readIORef scratch >>= maybe (newScratch >>= \n -> n <$ writeIORef scratch (Just n)) pure
              outcome <- runnerChunk r sc bytes count
              payOwnCost
              post box (RunEnded tag sc outcome)
            Right c -> P.runStolenHere c
          idle
  -- a thread that stops for any reason but its worker's drop says why
  tid <- forkFinally (P.usingPool pool (withOwnCost serve)) $ \r -> case r of
    Left e | Just ThreadKilled <- fromException e -> pure ()
           | otherwise -> logToStderr ("herd simulated worker " ++ show tag ++ ": its thread stopped: " ++ displayException e)
    Right () -> pure ()
  pure (ParWorker pool runs tid)

-- | Hand the thread a farm run (the loop holds the worker's later
-- messages until 'RunEnded').
handRun :: ParWorker -> Runner -> B.ByteString -> Int -> IO ()
handRun pw r bytes count = atomically (writeTQueue (pwRuns pw) (r, bytes, count))

-- | Stop the thread (its worker was dropped).
stopParWorker :: ParWorker -> IO ()
stopParWorker = killThread . pwThread
