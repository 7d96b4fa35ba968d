{-# LANGUAGE BangPatterns #-}
-- | A stream's flow window, both sides of it. A sender (the master's
-- feeder of a stream's input, a worker's stream process for its output)
-- keeps at most 'configStreamWindow' elements in flight, and stops adding
-- more once the ones in flight hold 'streamWindowBytes' (so a window of
-- large elements cannot fill the receiver's memory); the receiver
-- acknowledges what its consumer took in counts of elements, each quarter
-- window of elements or of bytes ('grantDue').
--
-- The sender remembers each element's size in a ring of one window's
-- slots, so an acknowledgement of k elements frees exactly their bytes;
-- nothing is allocated per element.
--
-- A sender also sends its packet early at the start of a stream
-- ('EarlyFlushes'): after a sixteenth of a packet's capacity, then twice as
-- much more, and so on up to half a packet; after that, packets fill as
-- usual. Without it a fast feeder filled a whole 64 KiB packet (about
-- 4000 one-word elements) before its receiver had anything to start on.
--
-- Promises: elements in flight never exceed the window; bytes in flight
-- exceed 'streamWindowBytes' only by the last element sent (one element
-- larger than the limit still goes, alone); an acknowledgement of more
-- elements than are in flight counts as all of them. A stream's early
-- sends are at most four, each at least twice the bytes of the one before
-- (checked in "FlowSpec").
module Herd.Task.StreamFlow
  ( Flow
  , newFlow
  , flowOpen
  , flowSent
  , flowAcked
  , flowInFlight
  , streamWindowBytes
  , grantDue
    -- * Early sends at a stream's start
  , Early (..)
  , earlyStart
  , earlyAfter
  , EarlyFlushes
  , newEarlyFlushes
  , earlyFlushDue
  ) where

import Control.Monad (when)
import Control.Monad.Primitive (RealWorld)
import Data.Primitive.PrimArray

-- | A sender's window: the sizes of the elements in flight, and counts.
data Flow = Flow
  { flSizes  :: !(MutablePrimArray RealWorld Int)  -- ^ element @i@'s size at @i mod window@
  , flCounts :: !(MutablePrimArray RealWorld Int)  -- ^ sent, acknowledged, bytes in flight
  , flWindow :: !Int
  , flBytes  :: !Int
  }

-- | Bytes of elements a sender keeps in flight at most (plus the last
-- one): 4 MiB, so 4096 elements of 1 KiB, 512 of 8 KiB. Small elements
-- are held by the element window alone.
streamWindowBytes :: Int
streamWindowBytes = 4 * 1024 * 1024

-- | A window of this many elements (at least 1) and bytes, nothing in
-- flight.
newFlow :: Int -> Int -> IO Flow
newFlow window bytes = do
  let w = max 1 window
  sizes <- newPrimArray w
  counts <- newPrimArray 3
  mapM_ (\i -> writePrimArray counts i 0) [0, 1, 2]
  pure (Flow sizes counts w (max 1 bytes))

-- | Whether one more element may be sent now.
flowOpen :: Flow -> IO Bool
flowOpen f = do
  sent <- readPrimArray (flCounts f) 0
  acked <- readPrimArray (flCounts f) 1
  bytes <- readPrimArray (flCounts f) 2
  pure (sent - acked < flWindow f && bytes < flBytes f)
{-# INLINE flowOpen #-}

-- | Count one element of this many bytes as sent (the window must have
-- been open).
flowSent :: Flow -> Int -> IO ()
flowSent f size = do
  sent <- readPrimArray (flCounts f) 0
  writePrimArray (flSizes f) (sent `rem` flWindow f) size
  writePrimArray (flCounts f) 0 (sent + 1)
  bytes <- readPrimArray (flCounts f) 2
  writePrimArray (flCounts f) 2 (bytes + size)
{-# INLINE flowSent #-}

-- | The receiver took this many more elements: their bytes leave the
-- window.
flowAcked :: Flow -> Int -> IO ()
flowAcked f k = do
  sent <- readPrimArray (flCounts f) 0
  acked <- readPrimArray (flCounts f) 1
  let upTo = min sent (acked + max 0 k)
      go :: Int -> Int -> IO Int
      go !i !freed
        | i >= upTo = pure freed
        | otherwise = readPrimArray (flSizes f) (i `rem` flWindow f) >>= \s -> go (i + 1) (freed + s)
  when (upTo > acked) $ do
    freed <- go acked 0
    writePrimArray (flCounts f) 1 upTo
    bytes <- readPrimArray (flCounts f) 2
    writePrimArray (flCounts f) 2 (bytes - freed)

-- | Elements and bytes in flight.
flowInFlight :: Flow -> IO (Int, Int)
flowInFlight f = do
  sent <- readPrimArray (flCounts f) 0
  acked <- readPrimArray (flCounts f) 1
  bytes <- readPrimArray (flCounts f) 2
  pure (sent - acked, bytes)

-- | Whether a receiver whose consumer took this many elements holding
-- this many bytes since its last acknowledgement should acknowledge them
-- now, for a window of this many elements and bytes: each quarter of
-- either. (A quarter: with half, a sender that outpaced its receiver
-- waited for the acknowledgement about half the time.)
grantDue :: Int -> Int -> Int -> Int -> Bool
grantDue window bytesWindow taken takenBytes =
  taken > 0 && (taken >= max 1 (window `div` 4) || takenBytes >= max 1 (bytesWindow `div` 4))

-- | Where a stream's sender is in its early sends: bytes sent so far, the
-- total at which to send the packet next ('maxBound': no more early
-- sends), and the bytes since the last early send that triggered it.
data Early = Early
  { earlyFed  :: !Int
  , earlyAt   :: !Int
  , earlyStep :: !Int
  } deriving (Eq, Show)

-- | The early sends of a stream whose packets hold this many bytes (none
-- if it is 0 or less: chunking off sends every element at once anyway).
earlyStart :: Int -> Early
earlyStart capacity
  | capacity <= 0 = Early 0 maxBound 0
  | otherwise = let step = max 1 (capacity `div` 16) in Early 0 step step

-- | One more element of this many bytes went into the packet: whether to
-- send the packet now, and the state after. Each early send doubles the
-- step to the next; once the step would pass half a packet there are no
-- more (a full packet leaves by itself): four at most.
earlyAfter :: Int -> Int -> Early -> (Bool, Early)
earlyAfter capacity size (Early fed at step)
  | fed' < at = (False, Early fed' at step)
  | otherwise = (True, Early fed' (if step' > capacity `div` 2 then maxBound else fed' + step') step')
  where
    fed' = fed + max 0 size
    step' = 2 * step
{-# INLINE earlyAfter #-}

-- | A sender's 'Early' in mutable memory, so that counting an element
-- allocates nothing.
data EarlyFlushes = EarlyFlushes
  { efCells    :: !(MutablePrimArray RealWorld Int)  -- ^ fed, at, step
  , efCapacity :: !Int
  }

-- | The early sends of a stream whose packets hold this many bytes.
newEarlyFlushes :: Int -> IO EarlyFlushes
newEarlyFlushes capacity = do
  cells <- newPrimArray 3
  let Early fed at step = earlyStart capacity
  writePrimArray cells 0 fed
  writePrimArray cells 1 at
  writePrimArray cells 2 step
  pure (EarlyFlushes cells capacity)

-- | Count an element of this many bytes; whether its sender should send
-- its packet now ('earlyAfter').
earlyFlushDue :: EarlyFlushes -> Int -> IO Bool
earlyFlushDue ef size = do
  let cells = efCells ef
  at <- readPrimArray cells 1
  if at == maxBound then pure False else do
    fed <- readPrimArray cells 0
    step <- readPrimArray cells 2
    let (due, Early fed' at' step') = earlyAfter (efCapacity ef) size (Early fed at step)
    writePrimArray cells 0 fed'
    writePrimArray cells 1 at'
    writePrimArray cells 2 step'
    pure due
{-# INLINE earlyFlushDue #-}
