{-# LANGUAGE BangPatterns #-}
-- | Big-endian numbers in bytes, the one place herd reads and writes them:
-- frame lengths, packet counts and message lengths, message fields.
-- Reads take an offset the caller has checked against the bytes present;
-- nothing here checks bounds. Writing numbers at a pointer is
-- "Herd.Wire.Writer"'s.
module Herd.Core.Bytes
  ( peekBE
  , word32At
  , word64At
  , peekPtrBE
  , bytesBE
  ) where

import Data.Bits (shiftL, shiftR, (.|.))
import qualified Data.ByteString as B
import qualified Data.ByteString.Internal as BI
import qualified Data.ByteString.Unsafe as BU
import Data.Word (Word64, Word8)
import Foreign.Ptr (Ptr, castPtr)
import Foreign.Storable (peekByteOff)

-- | The @n@-byte big-endian number at an offset.
peekBE :: Int -> B.ByteString -> Int -> Word64
peekBE n bs off =
  -- one pinning of the buffer around the whole read: through the bytes'
  -- own indexing, each byte was read under a pinning of its own, which in
  -- this GHC boxed every byte (64 bytes of heap a 4-byte length, 128 an
  -- 8-byte number)
  BI.accursedUnutterablePerformIO $ BU.unsafeUseAsCString bs $ \p -> peekPtrBE n (castPtr p) off
{-# INLINE peekBE #-}

-- | The 4-byte big-endian number at an offset, as an 'Int'.
word32At :: B.ByteString -> Int -> Int
word32At bs off = fromIntegral (peekBE 4 bs off)
{-# INLINE word32At #-}

-- | The 8-byte big-endian number at an offset.
word64At :: B.ByteString -> Int -> Word64
word64At = peekBE 8
{-# INLINE word64At #-}

-- | The @n@-byte big-endian number at a pointer and offset.
peekPtrBE :: Int -> Ptr Word8 -> Int -> IO Word64
peekPtrBE n p off = go 0 0
  where
    go !acc !i
      | i == n = pure acc
      | otherwise = do
          b <- peekByteOff p (off + i) :: IO Word8
          go ((acc `shiftL` 8) .|. fromIntegral b) (i + 1)
{-# INLINE peekPtrBE #-}

-- | A number as @n@ big-endian bytes.
bytesBE :: Int -> Word64 -> [Word8]
bytesBE n w = [ fromIntegral (w `shiftR` (8 * (n - 1 - i))) | i <- [0 .. n - 1] ]
