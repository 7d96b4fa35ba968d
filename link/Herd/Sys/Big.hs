-- | Big byte buffers outside the GHC heap (@cbits/herd_big.c@), for the
-- farm's argument tables and result arenas: memory the garbage collector
-- never scans or copies, backed by huge pages from 2 MiB on where the
-- kernel allows (a smaller buffer would pay for zeroing a whole huge page), and
-- grown by @mremap@ (page tables move, bytes are not copied).
--
-- Promise: a buffer is unmapped exactly once: by 'freeBig', or by the
-- garbage collector once the 'ForeignPtr' 'freezeBig' gave is
-- unreachable.
module Herd.Sys.Big
  ( Big
  , newBig
  , bigPtr
  , bigCapacity
  , growBig
  , freeBig
  , freezeBig
  ) where

import Foreign.C.Types (CSize (..))
import qualified Foreign.Concurrent as FC
import Foreign.ForeignPtr (ForeignPtr)
import Foreign.Marshal.Alloc (alloca)
import Foreign.Ptr (Ptr, nullPtr)
import Foreign.Storable (peek)
import Data.Word (Word8)
import System.IO.Error (fullErrorType, ioeSetErrorString, mkIOError)

foreign import ccall unsafe "herd_big_alloc"
  c_alloc :: CSize -> Ptr CSize -> IO (Ptr Word8)
foreign import ccall unsafe "herd_big_grow"
  c_grow :: Ptr Word8 -> CSize -> CSize -> Ptr CSize -> IO (Ptr Word8)
foreign import ccall unsafe "herd_big_free"
  c_free :: Ptr Word8 -> CSize -> IO ()

-- | A buffer being filled: not yet watched by the garbage collector, so
-- it must be freed or frozen.
data Big = Big !(Ptr Word8) !Int

-- | Its address (it moves when it grows).
bigPtr :: Big -> Ptr Word8
bigPtr (Big p _) = p

-- | How many bytes it holds.
bigCapacity :: Big -> Int
bigCapacity (Big _ n) = n

-- The system refused memory: a "resource exhausted" 'IOError' saying what
-- was asked for.
refused :: String -> IOError
refused what = ioeSetErrorString (mkIOError fullErrorType "herd buffer" Nothing Nothing) what

-- | A buffer of at least this many bytes (throws if memory is refused).
newBig :: Int -> IO Big
newBig n = alloca $ \actual -> do
  p <- c_alloc (fromIntegral n) actual
  if p == nullPtr then ioError (refused ("cannot map " ++ show n ++ " bytes")) else
    Big p . fromIntegral <$> peek actual

-- | Grow a buffer to at least this many bytes, keeping its contents; the
-- old value must not be used again (throws if memory is refused, the old
-- buffer then still valid).
growBig :: Big -> Int -> IO Big
growBig (Big p old) n = alloca $ \actual -> do
  q <- c_grow p (fromIntegral old) (fromIntegral n) actual
  if q == nullPtr then ioError (refused ("cannot grow a buffer to " ++ show n ++ " bytes")) else
    Big q . fromIntegral <$> peek actual

-- | Unmap a buffer now.
freeBig :: Big -> IO ()
freeBig (Big p n) = c_free p (fromIntegral n)

-- | Hand a buffer to the garbage collector: it is unmapped once the
-- pointer is unreachable.
freezeBig :: Big -> IO (ForeignPtr Word8)
freezeBig (Big p n) = FC.newForeignPtr p (c_free p (fromIntegral n))
