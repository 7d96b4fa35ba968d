{-# LANGUAGE BangPatterns, ScopedTypeVariables #-}
-- | How either side of a stream (the master's feeder of its input, a
-- worker's process for its output) hands its elements to the packet
-- layer: each encoded into a staging buffer, and the elements that are
-- ready when the sender reaches them gathered behind the one before, so a
-- batch of them costs one lock and one copy into the peer's packet
-- ('Herd.Packet.appendValuesToRun') instead of one each.
--
-- Promises:
--
-- * order is kept and every element is handed over once, the ones before
--   an element that throws included (then the exception is rethrown);
-- * an element joins a batch only if its list cell and the element itself
--   are evaluated already ("Herd.Task.Evaluated"): one still to be computed
--   sends the batch before it first, so no element waits for a slow one
--   behind it (a lazily produced list goes one element at a time, as
--   before);
-- * the window is asked before every element, so a batch never takes an
--   element the window would not have let through;
-- * a batch holds at most 'sinkBatchBytes' bytes plus its last element
--   (0: every element alone, as with chunking off).
module Herd.Task.StreamSend
  ( BatchSink (..)
  , newStreamSink
  , sendBatched
  ) where

import Control.Exception
import Control.Monad (when)
import Data.Word (Word8)
import Foreign.Ptr (Ptr)
import Herd.Task.Evaluated (isEvaluated)
import Herd.Task.StreamFlow
import Herd.Wire.Staging (Staging, withStaged)

-- | Where a stream's elements go.
data BatchSink = BatchSink
  { sinkWait       :: IO ()
    -- ^ return when one more element may be sent (sending what is
    -- buffered first, if it has to wait)
  , sinkOpen       :: IO Bool   -- ^ whether one more element may be sent now
  , sinkCounted    :: Int -> IO Bool
    -- ^ count an element of this many bytes as sent; whether the packet
    -- should leave once the batch is handed over (an early send)
  , sinkHandOver   :: Ptr Word8 -> Int -> Int -> Bool -> IO ()
    -- ^ these bytes, holding this many elements back to back; and whether
    -- to send the packet then
  , sinkBatchBytes :: !Int      -- ^ bytes after which a batch is handed over
  }

-- | The sink of one side of a stream: its flow window, its early sends
-- (for packets of this capacity; 0 with chunking off, which also makes
-- every element a batch of its own), how to wait for the window, how to
-- append elements to the peer's run, and how to send the packet.
newStreamSink :: Flow -> Int -> IO () -> (Ptr Word8 -> Int -> Int -> IO ()) -> IO () -> IO BatchSink
newStreamSink flow capacity wait append send = do
  early <- newEarlyFlushes capacity
  pure BatchSink
    { sinkWait = wait
    , sinkOpen = flowOpen flow
    , sinkCounted = \n -> flowSent flow n >> earlyFlushDue early n
    , sinkHandOver = \p bytes k now -> append p bytes k >> when now send
    , sinkBatchBytes = capacity `div` 4
    }
-- inlined, so that the sender's loop ('sendBatched', inlined too) calls
-- these functions directly, with unboxed sizes: through an unknown record
-- each element cost 41 more bytes of allocation on the master
{-# INLINE newStreamSink #-}

-- | Encode and hand over every element of the list, in order, with this
-- encoder (at an offset of the staging buffer; the element's size). Stops
-- at the list's end, or rethrows what an element threw.
sendBatched :: forall a. (Staging -> Int -> a -> IO Int) -> Staging -> BatchSink -> [a] -> IO ()
sendBatched stage staging sink = feed
  where
    feed :: [a] -> IO ()
    feed xs = case xs of
      [] -> pure ()
      y : ys -> do
        sinkWait sink
        n <- stage staging 0 y
        due <- sinkCounted sink n
        gather 1 n due ys
    gather :: Int -> Int -> Bool -> [a] -> IO ()
    gather !k !off due ys
      | due || off >= sinkBatchBytes sink = handOver k off due >> feed ys
      | otherwise = do
          next <- readyHead ys
          open <- sinkOpen sink
          case next of
            Just (z, zs) | open -> do
              staged <- try (stage staging off z)
              case staged of
                Left (e :: SomeException)
                  | Just (_ :: SomeAsyncException) <- fromException e -> throwIO e
                  | otherwise -> handOver k off False >> throwIO e
                Right n -> do
                  due' <- sinkCounted sink n
                  gather (k + 1) (off + n) due' zs
            _ -> handOver k off due >> feed ys
    handOver k off due = withStaged staging $ \p -> sinkHandOver sink p off k due
{-# INLINE sendBatched #-}

-- The first element of a list and the rest, if the list's cell and that
-- element are evaluated already.
readyHead :: [a] -> IO (Maybe (a, [a]))
readyHead xs = do
  cell <- isEvaluated xs
  if not cell then pure Nothing else case xs of
    z : zs -> do
      ready <- isEvaluated z
      pure (if ready then Just (z, zs) else Nothing)
    [] -> pure Nothing
{-# INLINE readyHead #-}
