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
module Herd.Reader.Epoll
  ( newEpollReader
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

-- | An epoll reader for frames of at most this size, its thread not yet
-- running, and the action that releases its descriptors once that thread
-- has stopped. The action given runs after each round of deliveries.
newEpollReader :: Int -> IO () -> IO (Reader, IO ())
newEpollReader cap afterRound = do
  ep <- epollCreate
  wake <- c_eventfd
  when (wake < 0) $ epollClose ep >> systemCallFailed "eventfd" (fromIntegral (negate wake))
  rc <- epollAdd ep wake wakeTag False
  when (rc /= 0) $ systemCallFailed "epoll_ctl" rc
  links <- newIORef (M.empty :: M.Map Int Polled)
  -- the edge-triggered links among them: the only ones armed before a
  -- blocking wait (a pass over every link before each wait cost O(links)
  -- a round at thousands of workers, for nothing on TCP)
  edged <- newIORef (M.empty :: M.Map Int Polled)
  -- links added since the reader last looked: read once each, since bytes
  -- may wait in their buffers already (a read of every link per added
  -- one made a start of 2048 workers cost 744 000 receives)
  fresh <- newIORef ([] :: [Int])
  again <- newIORef ([] :: [Int])   -- links left with frames at the last visit
  visits <- newIORef (0 :: Int)
  let add wid conn onPacket onLost = do
        let polled = Polled conn onPacket onLost
        atomicModifyIORef' links (\m -> (M.insert wid polled m, ()))
        when (connEdgeTriggered conn) $ atomicModifyIORef' edged (\m -> (M.insert wid polled m, ()))
        -- a shared ring signals only a reader that said it waits
        _ <- trySync (armConnection conn)
        fds <- connWaitFds conn
        forM_ fds $ \fd -> do
          r <- epollAdd ep fd wid (connEdgeTriggered conn)
          when (r /= 0) $ onLost ("epoll_ctl failed (errno " ++ show r ++ ")")
        -- bytes that came before it was watched (edge-triggered links say nothing of them)
        atomicModifyIORef' fresh (\ts -> (wid : ts, ()))
        c_signal wake
      remove wid conn = do
        atomicModifyIORef' links (\m -> (M.delete wid m, ()))
        atomicModifyIORef' edged (\m -> (M.delete wid m, ()))
        fds <- trySync (connWaitFds conn)
        either (const (pure ())) (mapM_ (epollDel ep)) fds
      lookupLink tag = fmap (\l -> (tag, l)) . M.lookup tag <$> readIORef links
      lose tag l why = do
        remove tag (polConn l)
        polLost l why
      -- every whole frame, then what the transport has, until it has
      -- nothing or the visit's share is used ('True': more may be there).
      -- A short read empties a level-triggered link: its frames are
      -- handed over and the visit ends without one more receive to hear
      -- "nothing ready" (epoll reports the link again when more comes)
      drain l k emptied
        | k >= framesPerVisit = pure (Right True)
        | otherwise = do
            frame <- takeBufferedFrame cap (polConn l)
            case frame of
              Just packet -> do
                ok <- polPacket l packet
                either (pure . Left) (const (drain l (k + 1) emptied)) ok
              Nothing | emptied -> pure (Right False)
                      | otherwise -> do
                (got, short) <- recvAvailableShort (polConn l)
                case got of
                  0 -> pure (Left "connection closed")
                  -1 -> pure (Right False)
                  _ -> drain l k (short && not (connEdgeTriggered (polConn l)))
      readLink tag l = do
        modifyIORef' visits (+ 1)
        r <- trySync (drain l 0 False)
        case r of
          Left (e :: SomeException) -> lose tag l (displayException e)
          Right (Left why) -> lose tag l why
          Right (Right more) -> when more $ modifyIORef' again (tag :)
      -- epoll reported the link: on a shared ring the report may be the
      -- control socket's end, which the ring looks at only when told to
      -- (arming tells it), since an empty ring is otherwise no news
      readReported tag l = do
        when (connEdgeTriggered (polConn l)) $ void (trySync (armConnection (polConn l)))
        readLink tag l
      readFresh = do
        tags <- atomicModifyIORef' fresh (\ts -> ([], ts))
        forM_ (reverse tags) $ \tag -> lookupLink tag >>= mapM_ (uncurry readLink)
      -- arm the edge-triggered links before blocking; read any that has bytes
      armAll = do
        ls <- M.toList <$> readIORef edged
        fmap or $ mapM (\(tag, l) -> do
          r <- trySync (armConnection (polConn l))
          case r of
            Left (e :: SomeException) -> False <$ lose tag l (displayException e)
            Right True -> True <$ readLink tag l
            Right False -> pure False) ls
      run = allocaArray 256 $ \tags -> forever $ do
        revisit <- atomicModifyIORef' again (\ts -> ([], reverse ts))
        -- under load something is usually ready: look first without
        -- blocking, and block (releasing the runtime) only when nothing is
        n0 <- epollPoll ep tags 256
        n <- if n0 /= 0 || not (null revisit) then pure n0 else do
          ready <- armAll
          if ready then pure 0 else epollWait ep tags 256 1000
        when (n < 0) $ systemCallFailed "epoll_wait" (negate n)
        ready <- peekArray n tags
        forM_ ready $ \tag ->
          if fromIntegral tag == wakeTag then c_drain wake >> readFresh
          else lookupLink (fromIntegral tag) >>= mapM_ (uncurry readReported)
        forM_ revisit $ \tag -> lookupLink tag >>= mapM_ (uncurry readLink)
        afterRound
      release = do
        _ <- c_close wake
        epollClose ep
  pure ( Reader { readerLoop = EpollLoop, readerAdd = add, readerRemove = remove, readerRun = run
                , readerVisits = readIORef visits }
       , release )
