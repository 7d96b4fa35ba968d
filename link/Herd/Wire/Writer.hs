{-# LANGUAGE BangPatterns #-}
-- | How a message body is written: an 'Encoder' is a size and a writer of
-- exactly that many bytes at a pointer. The packet layer asks each
-- message for its encoder and writes it straight into a send buffer, so
-- a message costs no buffer of its own. This is the write side that the
-- pure library (@herd-core@, which reads messages) leaves to the IO side.
module Herd.Wire.Writer
  ( Encoder (..)
  , encodeBytes
  , encodeWithTail
  , encoderBytes
  , pokeBE
  ) where

import Data.Bits (shiftR)
import qualified Data.ByteString as B
import qualified Data.ByteString.Internal as BI
import qualified Data.ByteString.Unsafe as BU
import Data.Word (Word64, Word8)
import Foreign.Ptr (Ptr, plusPtr)
import Foreign.Storable (pokeByteOff)

-- | How to write one message body: its size in bytes, and a function that
-- writes exactly that many bytes at a pointer. The writer may throw (a
-- lazy value's exception); then nothing of the message is sent.
data Encoder = Encoder !Int (Ptr Word8 -> IO ())

-- | An encoder for bytes already encoded.
encodeBytes :: B.ByteString -> Encoder
encodeBytes bs = Encoder (B.length bs) $ \dst ->
  BU.unsafeUseAsCStringLen bs $ \(src, n) -> BI.memcpy dst (src `plusPtr` 0) n

-- | An encoder of these bytes followed by a tail's: a message whose value
-- ends it, written whole (the packet layer sends a large tail apart).
encodeWithTail :: Encoder -> B.ByteString -> Encoder
encodeWithTail enc tl | B.null tl = enc
encodeWithTail (Encoder n write) tl = Encoder (n + B.length tl) $ \p -> do
  write p
  BU.unsafeUseAsCStringLen tl $ \(src, len) -> BI.memcpy (p `plusPtr` n) (src `plusPtr` 0) len

-- | The bytes an encoder writes.
encoderBytes :: Encoder -> IO B.ByteString
encoderBytes (Encoder n write) = BI.create n write

-- | Write a number as @n@ big-endian bytes at a pointer and offset.
pokeBE :: Int -> Ptr Word8 -> Int -> Word64 -> IO ()
pokeBE n p off w = go 0
  where
    go !i
      | i == n = pure ()
      | otherwise = do
          pokeByteOff p (off + i) (fromIntegral (w `shiftR` (8 * (n - 1 - i))) :: Word8)
          go (i + 1)
{-# INLINE pokeBE #-}

