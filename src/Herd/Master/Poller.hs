{-# LANGUAGE ScopedTypeVariables #-}
-- | The master's reading side: one thread waits on every worker's link
-- with epoll and hands each whole frame to the master loop. It replaces a
-- reader thread per link, which had to wait either through GHC's IO
-- manager (a slow wake-up per message) or in a blocking call of its own
-- (an OS thread per worker, and a hand-over of the runtime to each of them
-- whenever all were woken at once, as for every evolve call: 30 ms at 128
-- workers).
--
-- Promises: frames of one link are delivered in order, whole; a link is
-- reported lost once (by the callback it was added with) and is not read
-- again; while paused ('pausePoller') the thread reads nothing, so another
-- loop can own the links, and on resuming it reads what that loop left.
module Herd.Master.Poller
  ( Poller
  , newPoller
  , closePoller
  , runPoller
  , addLink
  , removeLink
  , pausePoller
  , resumePoller
  ) where

import Control.Concurrent.STM
import Control.Exception
import Control.Monad (forM_, forever, void, when)
import qualified Data.ByteString as B
import Data.IORef
import qualified Data.Map.Strict as M
import Foreign.C.Types (CInt (..))
import Foreign.Marshal.Array (allocaArray, peekArray)
import Herd.Epoll
import Herd.Transport
import System.Timeout (timeout)

foreign import ccall unsafe "herd_eventfd" c_eventfd :: IO CInt
foreign import ccall unsafe "herd_eventfd_signal" c_signal :: CInt -> IO ()
foreign import ccall unsafe "herd_eventfd_drain" c_drain :: CInt -> IO ()
foreign import ccall unsafe "close" c_close :: CInt -> IO CInt

-- One link as the poller reads it.
data Polled = Polled
  { polConn   :: !Connection
  , polPacket :: B.ByteString -> IO (Either String ())
    -- ^ hand over one frame; 'Left' means it was bad and the link is lost
  , polLost   :: String -> IO ()
  }

-- | The reading thread's state.
data Poller = Poller
  { pEpoll  :: !Epoll
  , pWake   :: !CInt                          -- ^ an eventfd in the set: look at 'pAsked'
  , pLinks  :: !(IORef (M.Map Int Polled))    -- ^ by tag
  , pCap    :: !Int                           -- ^ the frame cap
  , pAsked  :: !(TVar Bool)                   -- ^ set: pause at the next round
  , pPaused :: !(TVar Bool)
  }

wakeTag :: Int
wakeTag = -1

-- | A poller for frames of at most this size (not yet running).
newPoller :: Int -> IO Poller
newPoller cap = do
  ep <- epollCreate
  wake <- c_eventfd
  when (wake < 0) $ epollClose ep >> ioError (userError ("eventfd failed (errno " ++ show (negate wake) ++ ")"))
  rc <- epollAdd ep wake wakeTag False
  when (rc /= 0) $ ioError (userError ("epoll_ctl failed (errno " ++ show rc ++ ")"))
  Poller ep wake <$> newIORef M.empty <*> pure cap <*> newTVarIO False <*> newTVarIO False

-- | Release the poller's descriptors (after its thread has stopped).
closePoller :: Poller -> IO ()
closePoller p = do
  _ <- c_close (pWake p)
  epollClose (pEpoll p)

-- | Start reading a link under this tag (unique among live links). The
-- callbacks run on the poller's thread.
addLink :: Poller -> Int -> Connection -> (B.ByteString -> IO (Either String ())) -> (String -> IO ()) -> IO ()
addLink p tag conn onPacket onLost = do
  atomicModifyIORef' (pLinks p) (\m -> (M.insert tag (Polled conn onPacket onLost) m, ()))
  -- a shared ring signals only a reader that said it waits
  _ <- try (armConnection conn) :: IO (Either SomeException Bool)
  fds <- connWaitFds conn
  forM_ fds $ \fd -> do
    rc <- epollAdd (pEpoll p) fd tag (connEdgeTriggered conn)
    when (rc /= 0) $ onLost ("epoll_ctl failed (errno " ++ show rc ++ ")")
  -- bytes that came before it was watched (edge-triggered links say nothing of them)
  c_signal (pWake p)

-- | Stop reading a link (before it is closed).
removeLink :: Poller -> Int -> Connection -> IO ()
removeLink p tag conn = do
  atomicModifyIORef' (pLinks p) (\m -> (M.delete tag m, ()))
  fds <- try (connWaitFds conn)
  either (\(_ :: SomeException) -> pure ()) (mapM_ (epollDel (pEpoll p))) fds

-- | Ask the thread to stop reading and wait until it has (up to five
-- seconds; 'False' if it did not).
pausePoller :: Poller -> IO Bool
pausePoller p = do
  atomically $ writeTVar (pAsked p) True
  c_signal (pWake p)
  r <- timeout 5000000 $ atomically $ readTVar (pPaused p) >>= check
  pure (r == Just ())

-- | Let the thread read again.
resumePoller :: Poller -> IO ()
resumePoller p = atomically $ writeTVar (pAsked p) False

-- | The thread's loop: runs until killed.
runPoller :: Poller -> IO ()
runPoller p = allocaArray 256 $ \tags -> forever $ do
  asked <- readTVarIO (pAsked p)
  if asked then pauseHere else do
    -- under load something is usually ready: look first without blocking,
    -- and block (releasing the runtime) only when nothing is
    n0 <- epollPoll (pEpoll p) tags 256
    n <- if n0 /= 0 then pure n0 else do
      ready <- armAll
      if ready then pure 0 else epollWait (pEpoll p) tags 256 1000
    when (n < 0) $ ioError (userError ("epoll_wait failed (errno " ++ show (negate n) ++ ")"))
    ready <- peekArray n tags
    forM_ ready $ \tag ->
      if fromIntegral tag == wakeTag then c_drain (pWake p) >> readAll
      else lookupLink (fromIntegral tag) >>= mapM_ (uncurry readReported)
  where
    lookupLink tag = fmap (\l -> (tag, l)) . M.lookup tag <$> readIORef (pLinks p)
    pauseHere = do
      atomically $ writeTVar (pPaused p) True
      -- one transaction: a loan asked for right after the last one ended
      -- must not take the stale "paused" of that one for its own
      atomically $ do
        asked <- readTVar (pAsked p)
        check (not asked)
        writeTVar (pPaused p) False
      -- the loop that had the links read whole frames only; read what it
      -- left and what came since
      readAll
    readAll = readIORef (pLinks p) >>= mapM_ (uncurry readLink) . M.toList
    -- arm the edge-triggered links before blocking; read any that has bytes
    armAll = do
      links <- M.toList <$> readIORef (pLinks p)
      fmap or $ mapM (\(tag, l) -> if not (connEdgeTriggered (polConn l)) then pure False else do
        r <- try (armConnection (polConn l))
        case r of
          Left (e :: SomeException) -> False <$ lose tag l (displayException e)
          Right True -> True <$ readLink tag l
          Right False -> pure False) links
    lose tag l why = do
      removeLink p tag (polConn l)
      polLost l why
    -- epoll reported the link: on a shared ring the report may be the
    -- control socket's end, which the ring looks at only when told to
    -- (arming tells it), since an empty ring is otherwise no news
    readReported tag l = do
      when (connEdgeTriggered (polConn l)) $ void (try (armConnection (polConn l)) :: IO (Either SomeException Bool))
      readLink tag l
    readLink tag l = do
      r <- try (drain l)
      case r of
        Left (e :: SomeException) -> lose tag l (displayException e)
        Right (Just why) -> lose tag l why
        Right Nothing -> pure ()
    -- every whole frame, then what the transport has, until it has nothing
    drain l = do
      frame <- takeBufferedFrame (pCap p) (polConn l)
      case frame of
        Just packet -> do
          ok <- polPacket l packet
          case ok of
            Left why -> pure (Just why)
            Right () -> drain l
        Nothing -> do
          got <- recvAvailable (polConn l)
          case got of
            0 -> pure (Just "connection closed")
            -1 -> pure Nothing
            _ -> drain l
