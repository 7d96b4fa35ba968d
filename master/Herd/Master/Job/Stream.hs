{-# LANGUAGE ScopedTypeVariables #-}
-- | Eden-style stream processes: a list function instantiated on a worker,
-- fed the caller's list element by element as it is produced, its output
-- coming back element by element and consumed lazily. Elements travel in
-- runs that grow as they are sent ('Herd.Packet.appendValuesToRun'), so
-- they share packets and message headers without waiting for company;
-- elements that are evaluated already go in batches ("Herd.Task.StreamSend").
--
-- > sorter :: StaticPtr (Process Int Int)      -- in a non-Main module
-- > sorter = static (process sort)
-- >
-- > sorted <- withStream cluster sorter xs (evaluate . force)
--
-- Promises:
--
-- * the input is not forced in full first: each element is evaluated and
--   sent when the flow allows, so an infinite input with a finite demand
--   works;
-- * flow is bounded: at most 'configStreamWindow' elements, holding at
--   most 'streamWindowBytes' (plus one element), are in flight in each
--   direction, so a fast producer or a slow consumer cannot grow memory
--   without bound (credit-based flow control, "Herd.Task.StreamFlow"), and the feeder waits
--   while the worker's link holds more than 8 MiB it could not send yet,
--   so a window of large elements cannot get the worker dropped as one
--   that stopped reading;
-- * a process that throws, cannot start, or whose worker is lost ends the
--   output list with 'StreamFailed' naming it, thrown where the caller
--   reaches that point of the list. Stream processes are not re-run
--   elsewhere: their input is consumed as it is sent.
module Herd.Master.Job.Stream
  ( Process
  , process
  , withStream
  , instantiate
  ) where

import Control.Concurrent (ThreadId, forkIO, killThread)
import Control.Concurrent.STM
import Control.Exception
import Control.Monad (unless, when)
import qualified Data.ByteString as B
import Data.IORef
import Data.Word (Word64)
import GHC.StaticPtr (StaticPtr)
import Herd.Settings (Config (..))
import Herd.Core.Error (HerdError (..))
import Herd.Master
import Herd.Task.Process
import Herd.Task.StreamSend
import Herd.Task.StreamFlow
import Herd.Wire.Staging (newStaging)
import Herd.Task (refName)
import System.IO.Unsafe (unsafeInterleaveIO)

-- | Instantiate the process on a worker, give it the list, and run the body
-- with its output. When the body returns (or throws) the remote process is
-- stopped and the rest of its input is no longer read; use this when the
-- body may not consume the whole output (an infinite stream, say).
withStream :: Cluster -> StaticPtr (Process a b) -> [a] -> ([b] -> IO r) -> IO r
withStream cluster ptr xs body = mask $ \restore -> do
  (sid, feeder, out) <- start cluster ptr xs
  -- not 'bracket': its release would hold the triple, and with it the
  -- head of the output list, for as long as the body runs, so every
  -- element the body had consumed would stay live
  r <- restore (body out) `onException` stop sid feeder
  stop sid feeder
  pure r
  where
    stop sid feeder = do
      killThread feeder
      closeStream cluster sid

-- | Instantiate the process on a worker and give it the list; its output
-- comes back lazily (Eden's @process f # xs@, in IO). The remote process
-- ends when its output ends; a caller that may stop reading early should
-- use 'withStream', so the process does not wait for credit until the
-- cluster closes.
instantiate :: Cluster -> StaticPtr (Process a b) -> [a] -> IO [b]
instantiate cluster ptr xs = (\(_, _, out) -> out) <$> start cluster ptr xs

start :: Cluster -> StaticPtr (Process a b) -> [a] -> IO (Word64, ThreadId, [b])
start cluster ptr xs = do
  let window = configStreamWindow (clusterConfig cluster)
      ref = processRef ptr
      name = refName ref
      stage = processInStager ptr
      decodeOut = processOutDecoder ptr
  ends <- StreamEnds <$> newTQueueIO <*> newTVarIO 0
  input <- openStream cluster ref ends
  flow <- newFlow window streamWindowBytes
  let sid = streamId input
      acks = endsCredit ends
      -- take every acknowledgement so far at once, so the STM cost is per
      -- acknowledgement, not per element
      waitOpen = do
        open <- flowOpen flow
        unless open $ do
          acked <- atomically $ swapTVar acks 0
          a <- if acked > 0 then pure acked else do
            -- nothing else to send until the worker takes more: flush
            flushStream input
            atomically $ do
              c <- readTVar acks
              when (c <= 0) retry
              writeTVar acks 0
              pure c
          flowAcked flow a
          waitOpen
      feeder = do
        staging <- newStaging
        sink <- newStreamSink flow (streamEarlyCapacity input) waitOpen (feedStream input) (flushStream input)
        outcome <- try (sendBatched stage staging sink xs >> endStreamInput cluster sid)
        case outcome of
          Right () -> pure ()
          Left (e :: SomeException)
            | Just (_ :: SomeAsyncException) <- fromException e -> pure ()
            | Just BlockedIndefinitelyOnSTM <- fromException e -> pure ()
            | otherwise -> do
                -- an input element threw: end the stream with that error
                atomically $ writeTQueue (endsOutput ends)
                  (StreamBroken ("evaluating an input element threw: " ++ displayException e))
                closeStream cluster sid
  tid <- forkIO feeder
  consumed <- newIORef (0 :: Int, 0 :: Int)
  let next = do
        event <- atomically (readTQueue (endsOutput ends))
        case event of
          StreamFinished -> pure []
          StreamBroken why -> throwIO (StreamFailed name why)
          StreamElements runs -> do
            let k = sum (map fst runs)
                b = sum (map (B.length . snd) runs)
            (total, bytes) <- atomicModifyIORef' consumed (\(c, cb) -> ((c + k, cb + b), (c + k, cb + b)))
            when (grantDue window streamWindowBytes total bytes) $ do
              writeIORef consumed (0, 0)
              consumedStream cluster sid total
            rest <- unsafeInterleaveIO next
            pure (foldr (decodeOrThrow name decodeOut) rest runs)
  out <- unsafeInterleaveIO next
  pure (sid, tid, out)

-- A run of output elements in front of the rest, decoded whole when the
-- caller reaches it.
decodeOrThrow :: String -> (Int -> B.ByteString -> [b] -> Either (Int, String) [b]) -> (Int, B.ByteString) -> [b] -> [b]
decodeOrThrow name decode (k, bytes) more = case decode k bytes more of
  Right ys -> ys
  Left (_, why) -> throw (StreamFailed name ("an output element does not decode: " ++ why))
