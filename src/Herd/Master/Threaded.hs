{-# LANGUAGE ScopedTypeVariables #-}
{-# LANGUAGE RankNTypes #-}
-- | The evolve API's first master loop, as in FP Complete's first version:
-- one thread per worker, each reading its link through GHC's IO manager
-- and stepping the shared session state under an 'Control.Concurrent.MVar.MVar'.
--
-- Promise: returns once the session is done or failed, after every thread
-- has stopped between two frames (so the links can be handed back to the
-- cluster with nothing half read).
module Herd.Master.Threaded
  ( runThreaded
  ) where

import Control.Concurrent.Async (async, wait)
import Control.Concurrent.MVar (readMVar)
import Control.Concurrent.STM
import Control.Exception (SomeAsyncException, SomeException, catch, displayException, fromException, throwIO, try)
import Control.Monad (forM, unless, when)
import Data.IORef
import qualified Data.Map.Strict as M
import Herd.Master (LentLink (..))
import Herd.Master.Session
import Herd.Transport (awaitReadable, recvFrame)

-- | Run a session with a thread per worker.
runThreaded :: Driver
runThreaded cap links forward machine st0 initial = do
  f <- newFeeder cap links forward machine st0
  done0 <- feedInitial f initial
  over <- newTVarIO done0
  let stop = readTVar over >>= check
      finishIfOver = do
        sessionOver <- readIORef (feedFinished f)
        when sessionOver $ atomically (writeTVar over True)
      -- the cluster may drop the link meanwhile (a failed send)
      dropped l = readTVar (lentGone l) >>= maybe retry (const (pure ()))
      perLink l = do
        stopped <- awaitReadable (lentConn l) (stop `orElse` dropped l)
        gone <- readTVarIO (lentGone l)
        case gone of
          Just why -> feedLost f (lentWorker l) why >> finishIfOver
          Nothing | stopped -> pure ()
                  | otherwise -> do
            frame <- try (recvFrame cap (lentConn l))
            ended <- case frame of
              Left (e :: SomeException) -> feedLost f (lentWorker l) (displayException e) >> pure True
              Right Nothing -> feedLost f (lentWorker l) "connection closed" >> pure True
              Right (Just packet) -> do
                _ <- feedPacket f (lentWorker l) packet
                flushTouched f
                M.member (lentWorker l) <$> readIORef (feedLostSet f)
            finishIfOver
            unless ended (perLink l)
  threads <- forM links $ \l -> async $ perLink l `catch` \(e :: SomeException) ->
    -- e.g. the cluster closed the socket under the wait: the worker is lost
    case fromException e of
      Just (a :: SomeAsyncException) -> throwIO a
      Nothing -> feedLost f (lentWorker l) (displayException e) >> finishIfOver
  atomically stop
  mapM_ wait threads
  SessionEnd <$> readMVar (feedState f) <*> readIORef (feedError f) <*> (M.toList <$> readIORef (feedLostSet f))
