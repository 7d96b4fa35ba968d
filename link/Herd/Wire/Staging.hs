-- | Values encoded outside any lock: a thread that feeds a stream (the
-- master's feeder, a worker's stream process) encodes each element here,
-- back to back behind the ones before it in the same batch, then the
-- packet layer copies the bytes into a peer's buffer
-- ('Herd.Packet.appendValuesToRun'). So a value whose encoding throws (a
-- lazy field that was never forced) throws in its own thread with nothing
-- held, and the packet layer's lock is held only for a copy.
--
-- Promise: after 'stageValueAt' the buffer holds exactly that value's
-- encoding at its offset, the bytes before it kept; the buffer grows as values need, never shrinks,
-- and is owned by one thread.
module Herd.Wire.Staging
  ( Staging
  , newStaging
  , stageValueAt
  , withStaged
  ) where

import Control.Exception (evaluate)
import Control.Monad (when)
import Data.IORef
import Data.Store (Store)
import Data.Store.Internal (getSize)
import Data.Word (Word8)
import Foreign.ForeignPtr (ForeignPtr, mallocForeignPtrBytes, withForeignPtr)
import Foreign.Marshal.Utils (copyBytes)
import Foreign.Ptr (Ptr)
import Herd.Wire.Run (pokeAt)

-- | A growable pinned buffer for one encoded value.
data Staging = Staging
  { stBuffer :: !(IORef (ForeignPtr Word8))
  , stCap    :: !(IORef Int)
  }

-- | An empty staging buffer (4 KiB to start).
newStaging :: IO Staging
newStaging = do
  buf <- mallocForeignPtrBytes 4096
  Staging <$> newIORef buf <*> newIORef 4096

-- | Evaluate a value as far as its encoding needs and encode it at this
-- offset, after values staged before it (kept when the buffer grows), so
-- several values can be staged back to back and handed on together; its
-- size in bytes. Throws what the value throws, the bytes before the
-- offset as they were.
stageValueAt :: Store a => Staging -> Int -> a -> IO Int
stageValueAt st off x = do
  n <- evaluate (getSize x)
  cap <- readIORef (stCap st)
  when (off + n > cap) $ do
    let cap' = max (off + n) (2 * cap)
    old <- readIORef (stBuffer st)
    new <- mallocForeignPtrBytes cap'
    withForeignPtr old $ \src -> withForeignPtr new $ \dst -> copyBytes dst src off
    writeIORef (stBuffer st) new
    writeIORef (stCap st) cap'
  buf <- readIORef (stBuffer st)
  _ <- withForeignPtr buf $ \p -> pokeAt p off x
  pure n
{-# INLINE stageValueAt #-}

-- | Use the staged bytes (valid during the call only).
withStaged :: Staging -> (Ptr Word8 -> IO r) -> IO r
withStaged st act = readIORef (stBuffer st) >>= \buf -> withForeignPtr buf act
{-# INLINE withStaged #-}
