{-# LANGUAGE ScopedTypeVariables #-}
-- | The thread-per-worker reader, as in FP Complete's first master: each
-- link has its own Haskell thread, which waits through GHC's IO manager,
-- reads a frame and steps the shared core under its lock. Simple, and the
-- design whose wake-ups and lock hand-offs stop scaling at around a hundred
-- workers ("Herd.Reader.Epoll" is the other design).
module Herd.Reader.Threaded
  ( newThreadedReader
  ) where

import Control.Concurrent (ThreadId, forkIO, killThread, threadDelay)
import Control.Concurrent.STM
import Control.Exception
import Control.Monad (forever, unless)
import Data.IORef
import qualified Data.Map.Strict as M
import Herd.Settings (MasterLoop (..))
import Herd.Reader
import Herd.Core.Farm (WorkerId)
import Herd.Transport (awaitReadable, recvFrame)

-- | A reader for frames of at most this size; the action runs after each
-- frame delivered.
newThreadedReader :: Int -> IO () -> IO Reader
newThreadedReader cap afterRound = do
  threads <- newIORef (M.empty :: M.Map WorkerId (TVar Bool, ThreadId))
  visits <- newIORef (0 :: Int)
  let add wid conn onPacket onLost = do
        stop <- newTVarIO False
        tid <- forkIO (perLink conn stop onPacket onLost)
        atomicModifyIORef' threads (\m -> (M.insert wid (stop, tid) m, ()))
      remove wid _ = do
        found <- atomicModifyIORef' threads (\m -> (M.delete wid m, M.lookup wid m))
        -- the thread may be waiting for the core's lock, held by the caller:
        -- tell it to stop, and let it see that at its next wait
        mapM_ (\(stop, _) -> atomically (writeTVar stop True)) found
      perLink conn stop onPacket onLost = do
        outcome <- try (readLoop conn stop onPacket)
        stopped <- readTVarIO stop
        unless stopped $ case outcome of
          Right (Just why) -> onLost why
          Right Nothing -> pure ()
          Left (e :: SomeException)
            | Just (_ :: SomeAsyncException) <- fromException e -> pure ()
            | otherwise -> onLost (displayException e)
      readLoop conn stop onPacket = do
        stopped <- awaitReadable conn (readTVar stop >>= check)
        if stopped then pure Nothing else do
          atomicModifyIORef' visits (\n -> (n + 1, ()))
          frame <- recvFrame cap conn
          case frame of
            Nothing -> pure (Just "connection closed")
            Just packet -> do
              ok <- onPacket packet
              afterRound
              either (pure . Just) (const (readLoop conn stop onPacket)) ok
      -- the threads end with their links; at the cluster's end, with it
      run = do
        forever (threadDelay 1000000000) `finally` do
          ts <- readIORef threads
          mapM_ (killThread . snd) (M.elems ts)
  pure Reader { readerLoop = ThreadedLoop, readerAdd = add, readerRemove = remove, readerRun = run
                , readerVisits = readIORef visits }
