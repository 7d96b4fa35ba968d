{-# LANGUAGE ScopedTypeVariables #-}
{-# LANGUAGE RankNTypes #-}
-- | The evolve API's second master loop, as in FP Complete's second
-- version: one thread waits on every worker's socket with @epoll@ directly
-- (a safe foreign call, so the rest of the runtime runs meanwhile), reads
-- what is ready without blocking, and steps the session. GHC's IO manager
-- is not on the receiving path, and no thread hand-off happens per
-- message.
--
-- Linux only; 'epollAvailable' says whether it can run here, and
-- "Herd.Evolve" falls back to "Herd.Master.Threaded" when not.
--
-- Promise: returns once the session is done or failed, having read only
-- whole frames out of each link's buffer, so the links can be handed back
-- to the cluster with nothing lost.
module Herd.Master.Epoll
  ( runEpoll
  , epollAvailable
  ) where

import Control.Exception (SomeException, bracket, try, displayException)
import Control.Monad (forM, forM_, when)
import Data.IORef
import qualified Data.Map.Strict as M
import Foreign.Marshal.Array (allocaArray, peekArray)
import Control.Concurrent.MVar (readMVar)
import Control.Concurrent.STM (readTVarIO)
import Herd.Master (LentLink (..))
import Herd.Master.Session
import Herd.Transport (connWaitFds, connEdgeTriggered, armConnection, recvAvailable, takeBufferedFrame)
import Herd.Epoll

-- | Run a session from one thread over epoll.
runEpoll :: Driver
runEpoll cap links forward machine st0 initial = do
  f <- newFeeder cap links forward machine st0
  let byTag = M.fromList (zip [0 :: Int ..] links)
  bracket epollCreate epollClose $ \ep -> do
    forM_ (M.toList byTag) $ \(tag, l) -> do
      fds <- connWaitFds (lentConn l)
      forM_ fds $ \fd -> do
        rc <- epollAdd ep fd tag (connEdgeTriggered (lentConn l))
        when (rc /= 0) $ () <$ feedLost f (lentWorker l) ("epoll_ctl failed (errno " ++ show rc ++ ")")
    -- shared-memory links signal only a reader that said it waits, and
    -- their descriptors are edge-triggered: arm them before blocking, and
    -- read at once any that already has bytes
    let armed = filter (connEdgeTriggered . lentConn) links
        armAll = fmap or $ forM armed $ \l -> do
          lost <- M.member (lentWorker l) <$> readIORef (feedLostSet f)
          if lost then pure False else do
            armed' <- try (armConnection (lentConn l))
            case armed' of
              Left (e :: SomeException) -> False <$ feedLost f (lentWorker l) (displayException e)
              Right ready -> do
                when ready $ readLink f l
                pure ready
        forget l = do
          fds <- try (connWaitFds (lentConn l))
          either (\(_ :: SomeException) -> pure ()) (mapM_ (epollDel ep)) fds
    _ <- feedInitial f initial
    -- frames the paused reading thread had already buffered are not announced by epoll
    forM_ links $ \l -> drainFrames f l
    flushTouched f
    -- -1: look at every link once first, in case one was dropped before
    seenLosses <- newIORef (-1 :: Int)
    allocaArray 256 $ \tags -> do
      let -- links the cluster dropped meanwhile (a failed send): their
          -- sockets are closed, so epoll will never report them
          checkDropped = case links of
            [] -> pure ()
            (l0 : _) -> do
              now <- readTVarIO (lentLosses l0)
              seen <- readIORef seenLosses
              when (now /= seen) $ do
                writeIORef seenLosses now
                forM_ links $ \l -> do
                  gone <- readTVarIO (lentGone l)
                  forM_ gone $ \why -> feedLost f (lentWorker l) why
          loop = do
            checkDropped
            over <- readIORef (feedFinished f)
            live <- (\lost -> M.size lost < M.size byTag) <$> readIORef (feedLostSet f)
            when (not over && live) $ do
              -- under load something is usually ready: look first without
              -- blocking, and block (releasing the runtime) only when not
              ready0 <- epollPoll ep tags 256
              n <- if ready0 /= 0 then pure ready0 else do
                     anyReady <- armAll
                     if anyReady then pure 0 else epollWait ep tags 256 200
              when (n < 0) $ ioError (userError ("epoll_wait failed (errno " ++ show (negate n) ++ ")"))
              ready <- peekArray (max 0 n) tags
              forM_ ready $ \tag -> forM_ (M.lookup (fromIntegral tag) byTag) $ \l -> do
                readLink f l
                -- a lost link's socket stays readable: stop hearing of it
                lost <- M.member (lentWorker l) <$> readIORef (feedLostSet f)
                when lost $ forget l
              flushTouched f
              loop
      loop
  SessionEnd <$> readMVar (feedState f) <*> readIORef (feedError f) <*> (M.toList <$> readIORef (feedLostSet f))

-- Read what one ready link has and handle its whole frames.
readLink :: Feeder st -> LentLink -> IO ()
readLink f l = do
  lost <- M.member (lentWorker l) <$> readIORef (feedLostSet f)
  when (not lost) $ do
    -- on a shared ring the report may be the control socket's end, which
    -- the ring looks at only when armed (an empty ring is otherwise no news)
    when (connEdgeTriggered (lentConn l)) $
      () <$ (try (armConnection (lentConn l)) :: IO (Either SomeException Bool))
    got <- try (recvAvailable (lentConn l))
    case got of
      Left (e :: SomeException) -> () <$ feedLost f (lentWorker l) (displayException e)
      Right 0 -> () <$ feedLost f (lentWorker l) "connection closed"
      Right _ -> drainFrames f l

drainFrames :: Feeder st -> LentLink -> IO ()
drainFrames f l = do
  frame <- try (takeBufferedFrame (feedCap f) (lentConn l))
  case frame of
    Left (e :: SomeException) -> () <$ feedLost f (lentWorker l) (displayException e)
    Right Nothing -> pure ()
    Right (Just packet) -> do
      _ <- feedPacket f (lentWorker l) packet
      drainFrames f l
