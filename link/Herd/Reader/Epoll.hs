{-# LANGUAGE ScopedTypeVariables #-}
-- | The single-threaded reader, as in FP Complete's second master: one
-- thread waits on every worker's link with epoll directly (a safe foreign
-- call, so the rest of the runtime runs meanwhile), reads what is ready
-- without blocking, and steps the core. GHC's IO manager is not on the
-- receiving path, and no thread hand-off happens per message. A reader
-- thread per link had either a slow IO-manager wake-up per message or, in
-- a blocking call of its own, an OS thread per worker and a hand-over of
-- the runtime to each of them whenever all were woken at once.
--
-- Cancelling its thread stops it: a failure reading one link loses that
-- link, but an asynchronous exception (the cluster's end) is never taken
-- for one and always ends the loop.
--
-- Fairness: a visit to a link hands over at most 'framesPerVisit' frames;
-- a link with more is visited again in the next round, after the others,
-- so a chatty worker cannot starve the rest.
--
-- A deadline on partial frames ('newEpollReaderWith'): a link left with
-- part of a frame whose byte count has not grown for that long is lost,
-- so a peer that starts a frame and stops does not hold its link (and
-- the buffer for the frame) forever; a large frame still arriving, however
-- slowly, is not cut.
module Herd.Reader.Epoll
  ( newEpollReader
  , newEpollReaderWith
  ) where

import Control.Exception
import Control.Monad (forM_, forever, void, when)
import Data.IORef
import qualified Data.Map.Strict as M
import Foreign.C.Types (CInt (..))
import Foreign.Marshal.Array (allocaArray, peekArray)
import Herd.Settings (MasterLoop (..))
import Herd.Sys.Epoll
import Herd.Reader
import Herd.Sys.Clock (monotonicSeconds)
import Herd.Transport

foreign import ccall unsafe "herd_eventfd" c_eventfd :: IO CInt
foreign import ccall unsafe "herd_eventfd_signal" c_signal :: CInt -> IO ()
foreign import ccall unsafe "herd_eventfd_drain" c_drain :: CInt -> IO ()
foreign import ccall unsafe "close" c_close :: CInt -> IO CInt

-- One link as the reader sees it.
data Polled = Polled
  { polConn   :: !Connection
  , polPacket :: !OnPacket
  , polLost   :: !OnLost
  }

-- | Frames one visit to a link hands over before moving on.
framesPerVisit :: Int
framesPerVisit = 64

wakeTag :: Int
wakeTag = -1

-- One epoll reader's state: its descriptors, its links, and what its
-- loop has left to do.
data Poller = Poller
  { plEpoll  :: !Epoll
  , plWake   :: !CInt                       -- ^ the eventfd that wakes the loop
  , plCap    :: !Int                        -- ^ the largest frame taken
  , plLinks  :: !(IORef (M.Map Int Polled))
  , plEdged  :: !(IORef (M.Map Int Polled))
    -- ^ the edge-triggered links among them: the only ones armed before a
    -- blocking wait (a pass over every link before each wait cost O(links)
    -- a round at thousands of workers, for nothing on TCP)
  , plFresh  :: !(IORef [Int])
    -- ^ links added since the reader last looked: read once each, since
    -- bytes may wait in their buffers already (a read of every link per
    -- added one made a start of 2048 workers cost 744 000 receives)
  , plAgain  :: !(IORef [Int])              -- ^ links left with frames at the last visit
  , plVisits :: !(IORef Int)
  , plDeadline :: !Double                   -- ^ seconds a partial frame may stand still (0: for ever)
  , plPartial :: !(IORef (M.Map Int (Int, Double)))
    -- ^ links left with part of a frame: its bytes then, and since when
  , plSwept  :: !(IORef Double)             -- ^ when stalled links were last looked for
  }

-- | An epoll reader for frames of at most this size, its thread not yet
-- running, and the action that releases its descriptors once that thread
-- has stopped. The action given runs after each round of deliveries.
newEpollReader :: Int -> IO () -> IO (Reader, IO ())
newEpollReader = newEpollReaderWith 0

-- | 'newEpollReader' that loses a link whose partial frame has not grown
-- for this many seconds (0: never).
newEpollReaderWith :: Double -> Int -> IO () -> IO (Reader, IO ())
newEpollReaderWith deadline cap afterRound = do
  ep <- epollCreate
  wake <- c_eventfd
  when (wake < 0) $ epollClose ep >> systemCallFailed "eventfd" (fromIntegral (negate wake))
  rc <- epollAdd ep wake wakeTag False
  when (rc /= 0) $ systemCallFailed "epoll_ctl" rc
  pl <- Poller ep wake cap <$> newIORef M.empty <*> newIORef M.empty <*> newIORef [] <*> newIORef [] <*> newIORef 0
                           <*> pure (max 0 deadline) <*> newIORef M.empty <*> newIORef 0
  let release = do
        _ <- c_close wake
        epollClose ep
  pure ( Reader { readerLoop = EpollLoop, readerAdd = addLink pl, readerRemove = removeLink pl
                , readerRun = runPoller pl afterRound, readerVisits = readIORef (plVisits pl) }
       , release )

-- Watch a link: its descriptors join the epoll set, and it is read once
-- at the next round (bytes that came before it was watched: an
-- edge-triggered link says nothing of them).
addLink :: Poller -> Int -> Connection -> OnPacket -> OnLost -> IO ()
addLink pl wid conn onPacket onLost = do
  let polled = Polled conn onPacket onLost
  atomicModifyIORef' (plLinks pl) (\m -> (M.insert wid polled m, ()))
  when (connEdgeTriggered conn) $ atomicModifyIORef' (plEdged pl) (\m -> (M.insert wid polled m, ()))
  -- a shared ring signals only a reader that said it waits
  _ <- trySync (armConnection conn)
  fds <- connWaitFds conn
  forM_ fds $ \fd -> do
    r <- epollAdd (plEpoll pl) fd wid (connEdgeTriggered conn)
    when (r /= 0) $ onLost ("epoll_ctl failed (errno " ++ show r ++ ")")
  atomicModifyIORef' (plFresh pl) (\ts -> (wid : ts, ()))
  c_signal (plWake pl)

-- Stop watching a link.
removeLink :: Poller -> Int -> Connection -> IO ()
removeLink pl wid conn = do
  atomicModifyIORef' (plLinks pl) (\m -> (M.delete wid m, ()))
  modifyIORef' (plPartial pl) (M.delete wid)
  atomicModifyIORef' (plEdged pl) (\m -> (M.delete wid m, ()))
  fds <- trySync (connWaitFds conn)
  either (const (pure ())) (mapM_ (epollDel (plEpoll pl))) fds

lookupLink :: Poller -> Int -> IO (Maybe (Int, Polled))
lookupLink pl tag = fmap (\l -> (tag, l)) . M.lookup tag <$> readIORef (plLinks pl)

loseLink :: Poller -> Int -> Polled -> String -> IO ()
loseLink pl tag l why = do
  removeLink pl tag (polConn l)
  polLost l why

-- Every whole frame, then what the transport has, until it has nothing
-- or the visit's share is used ('True': more may be there). A short read
-- empties a level-triggered link: its frames are handed over and the
-- visit ends without one more receive to hear "nothing ready" (epoll
-- reports the link again when more comes).
drainLink :: Int -> Polled -> Int -> Bool -> IO (Either String Bool)
drainLink cap l k emptied
  | k >= framesPerVisit = pure (Right True)
  | otherwise = do
      frame <- takeBufferedFrame cap (polConn l)
      case frame of
        Just packet -> do
          ok <- polPacket l packet
          either (pure . Left) (const (drainLink cap l (k + 1) emptied)) ok
        Nothing | emptied -> pure (Right False)
                | otherwise -> do
          (got, short) <- recvAvailableShort (polConn l)
          case got of
            0 -> pure (Left "connection closed")
            -1 -> pure (Right False)
            _ -> drainLink cap l k (short && not (connEdgeTriggered (polConn l)))

-- One visit to a link: what it has is handed over; a link left with
-- frames is visited again next round.
readLink :: Poller -> Int -> Polled -> IO ()
readLink pl tag l = do
  modifyIORef' (plVisits pl) (+ 1)
  r <- trySync (drainLink (plCap pl) l 0 False)
  case r of
    Left (e :: SomeException) -> loseLink pl tag l (displayException e)
    Right (Left why) -> loseLink pl tag l why
    Right (Right True) -> modifyIORef' (plAgain pl) (tag :)
    Right (Right False) -> when (plDeadline pl > 0) (notePartial pl tag l)

-- After a visit that emptied the link: remember a partial frame left (and
-- since when its count stood), forget one completed.
notePartial :: Poller -> Int -> Polled -> IO ()
notePartial pl tag l = do
  have <- partialFrameBytes (polConn l)
  known <- M.lookup tag <$> readIORef (plPartial pl)
  case known of
    _ | have == 0 -> when (known /= Nothing) $ modifyIORef' (plPartial pl) (M.delete tag)
    Just (was, _) | was == have -> pure ()
    _ -> monotonicSeconds >>= \now -> modifyIORef' (plPartial pl) (M.insert tag (have, now))

-- Lose the links whose partial frame has stood still past the deadline
-- (looked for a few times a second at most).
sweepStalled :: Poller -> IO ()
sweepStalled pl = do
  partial <- readIORef (plPartial pl)
  when (plDeadline pl > 0 && not (M.null partial)) $ do
    now <- monotonicSeconds
    last' <- readIORef (plSwept pl)
    when (now - last' >= min 0.25 (plDeadline pl / 4)) $ do
      writeIORef (plSwept pl) now
      forM_ [ (tag, have) | (tag, (have, since)) <- M.toList partial, now - since > plDeadline pl ] $ \(tag, have) ->
        lookupLink pl tag >>= mapM_ (\(_, l) -> loseLink pl tag l
          ("it sent " ++ show have ++ " bytes of a frame and then nothing for " ++ show (plDeadline pl)
           ++ " s (configFrameDeadline)"))

-- Epoll reported the link: on a shared ring the report may be the
-- control socket's end, which the ring looks at only when told to
-- (arming tells it), since an empty ring is otherwise no news.
readReported :: Poller -> Int -> Polled -> IO ()
readReported pl tag l = do
  when (connEdgeTriggered (polConn l)) $ void (trySync (armConnection (polConn l)))
  readLink pl tag l

-- The links added since the last round, each read once.
readFresh :: Poller -> IO ()
readFresh pl = do
  tags <- atomicModifyIORef' (plFresh pl) (\ts -> ([], ts))
  forM_ (reverse tags) $ \tag -> lookupLink pl tag >>= mapM_ (uncurry (readLink pl))

-- Arm the edge-triggered links before blocking; read any that has bytes
-- ('True': one had).
armAll :: Poller -> IO Bool
armAll pl = do
  ls <- M.toList <$> readIORef (plEdged pl)
  fmap or $ mapM (\(tag, l) -> do
    r <- trySync (armConnection (polConn l))
    case r of
      Left (e :: SomeException) -> False <$ loseLink pl tag l (displayException e)
      Right True -> True <$ readLink pl tag l
      Right False -> pure False) ls

-- The reader's loop: under load something is usually ready, so it looks
-- first without blocking, and blocks (releasing the runtime) only when
-- nothing is; after each round, the action given.
runPoller :: Poller -> IO () -> IO ()
runPoller pl afterRound = allocaArray 256 $ \tags -> forever $ do
  revisit <- atomicModifyIORef' (plAgain pl) (\ts -> ([], reverse ts))
  partialNow <- readIORef (plPartial pl)
  n0 <- epollPoll (plEpoll pl) tags 256
  n <- if n0 /= 0 || not (null revisit) then pure n0 else do
    ready <- armAll pl
    if ready then pure 0 else epollWait (plEpoll pl) tags 256 (if M.null partialNow then 1000 else 250)
  when (n < 0) $ systemCallFailed "epoll_wait" (negate n)
  ready <- peekArray n tags
  forM_ ready $ \tag ->
    if fromIntegral tag == wakeTag then c_drain (plWake pl) >> readFresh pl
    else lookupLink pl (fromIntegral tag) >>= mapM_ (uncurry (readReported pl))
  forM_ revisit $ \tag -> lookupLink pl tag >>= mapM_ (uncurry (readLink pl))
  sweepStalled pl
  afterRound
