-- | One value at a time, encoded outside any lock: a thread that feeds a
-- stream (the master's feeder, a worker's stream process) encodes each
-- element here, then the packet layer copies the bytes into a peer's
-- buffer ('Herd.Packet.appendToRun'). So a value whose encoding throws (a
-- lazy field that was never forced) throws in its own thread with nothing
-- held, and the packet layer's lock is held only for a copy.
--
-- Promise: after 'stageValue' the buffer holds exactly that value's
-- encoding at its start; the buffer grows as values need, never shrinks,
-- and is owned by one thread.
module Herd.Wire.Staging
  ( Staging
  , newStaging
  , stageValue
  , withStaged
  ) where

import Control.Exception (evaluate)
import Control.Monad (when)
import Data.IORef
import Data.Store (Store)
import Data.Store.Internal (getSize)
import Data.Word (Word8)
import Foreign.ForeignPtr (ForeignPtr, mallocForeignPtrBytes, withForeignPtr)
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

-- | Evaluate a value as far as its encoding needs and encode it at the
-- buffer's start; its size in bytes. Throws what the value throws.
stageValue :: Store a => Staging -> a -> IO Int
stageValue st x = do
  n <- evaluate (getSize x)
  cap <- readIORef (stCap st)
  when (n > cap) $ do
    let cap' = max n (2 * cap)
    mallocForeignPtrBytes cap' >>= writeIORef (stBuffer st)
    writeIORef (stCap st) cap'
  buf <- readIORef (stBuffer st)
  _ <- withForeignPtr buf $ \p -> pokeAt p 0 x
  pure n
{-# INLINE stageValue #-}

-- | Use the staged bytes (valid during the call only).
withStaged :: Staging -> (Ptr Word8 -> IO r) -> IO r
withStaged st act = readIORef (stBuffer st) >>= \buf -> withForeignPtr buf act
{-# INLINE withStaged #-}
