{-# LANGUAGE BangPatterns #-}
-- | A small validating decoder and an encoder for herd's own message
-- envelopes.
--
-- @store@ trusts its input: it allocates a claimed length before checking
-- it and loops for the claimed count of zero-size elements. Nothing from a
-- peer reaches it until this module has checked the envelope: every length
-- and count is compared with the bytes actually present before anything is
-- allocated for it, and every element takes at least one byte, so a count
-- can never exceed the bytes left. Decoding is total: it returns 'Left' with
-- a reason, never throws, never loops.
module Herd.Core.Wire.Codec
  ( -- * Decoding
    Get
  , runGet
  , getWord8
  , getWord16
  , getWord32
  , getWord64
  , getInt64
  , getBytes
  , getSizedBytes
  , getText
  , getCount
  , remaining
  , failGet
    -- * Encoding
  , putWord8
  , putWord16
  , putWord32
  , putWord64
  , putInt64
  , putSizedBytes
  , putText
  , buildStrict
  ) where

import qualified Data.ByteString as B
import qualified Data.ByteString.Builder as BB
import qualified Data.ByteString.Builder.Extra as BBE
import qualified Data.ByteString.Lazy as BL
import Data.Int (Int64)
import qualified Data.Text as T
import qualified Data.Text.Encoding as TE
import Data.Word (Word16, Word32, Word64, Word8)
import Herd.Core.Bytes (peekBE)

-- | A decoder over one strict buffer, tracking the offset.
newtype Get a = Get { unGet :: B.ByteString -> Int -> Either String (a, Int) }

instance Functor Get where
  fmap f (Get g) = Get $ \bs o -> case g bs o of
    Left e -> Left e
    Right (a, o') -> Right (f a, o')

instance Applicative Get where
  pure a = Get $ \_ o -> Right (a, o)
  Get gf <*> Get ga = Get $ \bs o -> case gf bs o of
    Left e -> Left e
    Right (f, o') -> case ga bs o' of
      Left e -> Left e
      Right (a, o'') -> Right (f a, o'')

instance Monad Get where
  Get g >>= k = Get $ \bs o -> case g bs o of
    Left e -> Left e
    Right (a, o') -> unGet (k a) bs o'

-- | Run a decoder over a whole buffer; trailing bytes are an error.
runGet :: Get a -> B.ByteString -> Either String a
runGet (Get g) bs = case g bs 0 of
  Left e -> Left e
  Right (a, o)
    | o == B.length bs -> Right a
    | otherwise -> Left (show (B.length bs - o) ++ " unexpected trailing bytes")

-- | Fail with a reason.
failGet :: String -> Get a
failGet why = Get $ \_ _ -> Left why

-- | Bytes left to read.
remaining :: Get Int
remaining = Get $ \bs o -> Right (B.length bs - o, o)

need :: Int -> String -> Get ()
need n what = Get $ \bs o ->
  if n >= 0 && B.length bs - o >= n
    then Right ((), o)
    else Left ("truncated " ++ what ++ ": needs " ++ show n ++ " bytes, "
               ++ show (B.length bs - o) ++ " left")

fixed :: Int -> String -> Get Word64
fixed n what = need n what >> Get (\bs o -> Right (peekBE n bs o, o + n))

-- | One byte.
getWord8 :: Get Word8
getWord8 = fromIntegral <$> fixed 1 "byte"

-- | Two bytes, big-endian.
getWord16 :: Get Word16
getWord16 = fromIntegral <$> fixed 2 "word16"

-- | Four bytes, big-endian.
getWord32 :: Get Word32
getWord32 = fromIntegral <$> fixed 4 "word32"

-- | Eight bytes, big-endian.
getWord64 :: Get Word64
getWord64 = fixed 8 "word64"

-- | Eight bytes, big-endian, two's complement.
getInt64 :: Get Int64
getInt64 = fromIntegral <$> fixed 8 "int64"

-- | Exactly @n@ bytes (shared with the input buffer, not copied).
getBytes :: Int -> Get B.ByteString
getBytes n = need n "bytes" >> Get (\bs o -> Right (B.take n (B.drop o bs), o + n))

-- | A 32-bit length, checked against the bytes present, then that many bytes.
getSizedBytes :: Get B.ByteString
getSizedBytes = do
  n <- fromIntegral <$> getWord32
  left <- remaining
  if n > left
    then failGet ("length " ++ show n ++ " exceeds the " ++ show left ++ " bytes left")
    else getBytes n

-- | UTF-8 text with a 32-bit length.
getText :: Get T.Text
getText = do
  bytes <- getSizedBytes
  either (const (failGet "text is not valid UTF-8")) pure (TE.decodeUtf8' bytes)

-- | A 32-bit element count, checked against the bytes left given the
-- smallest size one element can take (at least one byte).
getCount :: Int -> Get Int
getCount minElementBytes = do
  n <- fromIntegral <$> getWord32
  left <- remaining
  let perElement = max 1 minElementBytes
  if n > left `div` perElement
    then failGet ("count " ++ show n ++ " cannot fit in the " ++ show left ++ " bytes left")
    else pure n

-- | One byte.
putWord8 :: Word8 -> BB.Builder
putWord8 = BB.word8

-- | Two bytes, big-endian.
putWord16 :: Word16 -> BB.Builder
putWord16 = BB.word16BE

-- | Four bytes, big-endian.
putWord32 :: Word32 -> BB.Builder
putWord32 = BB.word32BE

-- | Eight bytes, big-endian.
putWord64 :: Word64 -> BB.Builder
putWord64 = BB.word64BE

-- | Eight bytes, big-endian, two's complement.
putInt64 :: Int64 -> BB.Builder
putInt64 = BB.int64BE

-- | A 32-bit length and the bytes.
putSizedBytes :: B.ByteString -> BB.Builder
putSizedBytes b = putWord32 (fromIntegral (B.length b)) <> BB.byteString b

-- | UTF-8 text with a 32-bit length.
putText :: T.Text -> BB.Builder
putText = putSizedBytes . TE.encodeUtf8

-- | Run a builder into one strict buffer.
buildStrict :: BB.Builder -> B.ByteString
-- A small first chunk: most messages are a few dozen bytes, and the
-- default 4 KiB chunk is a large object for GHC's allocator, allocated
-- (and its memory touched) once per message.
buildStrict = BL.toStrict . BBE.toLazyByteStringWith (BBE.safeStrategy 128 4096) BL.empty
