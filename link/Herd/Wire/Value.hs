{-# LANGUAGE BangPatterns #-}
-- | User values on the wire: @store@ encoders that write straight into a
-- packet buffer, and decoders that read one value's or one run's bytes.
--
-- Promise: a decoder consumes exactly the bytes it is given, or fails with
-- a message; it never reads past them. (Inside a user's own types @store@
-- is trusted as it is; see docs/operations.md.)
module Herd.Wire.Value
  ( valueEncoder
  , decodeValueIO
  , decodeValuesOnto
  ) where

import Control.Exception (displayException, fromException)
import qualified Data.ByteString as B
import Data.Store (Store)
import qualified Data.ByteString.Unsafe as BU
import Data.Store.Core (Peek (..), PeekException (..), PeekResult (..), Poke (..), decodeIOWithFromPtr,
                        unsafeMakePeekState, unsafeMakePokeState)
import qualified Data.Text as T
import Data.Word (Word8)
import Foreign.Ptr (Ptr, castPtr, minusPtr, plusPtr)
import System.IO.Unsafe (unsafeDupablePerformIO)
import Herd.Wire.Run (newCell, setCell, tryAt)
import Data.Store.Internal (getSize, peek, poke)
import Herd.Wire.Writer (Encoder (..))

-- | The encoder of a value (its size is computed now; the bytes are written
-- when the packet layer asks).
valueEncoder :: Store a => a -> Encoder
valueEncoder x = Encoder (getSize x) $ \p -> do
  st <- unsafeMakePokeState p (pure p)
  _ <- runPoke (poke x) st 0
  pure ()

-- | Decode a value that must fill these bytes exactly, in IO: cheaper than
-- 'decodeValue' on a hot path; throws @store@'s @PeekException@.
decodeValueIO :: Store a => B.ByteString -> IO a
decodeValueIO bs = BU.unsafeUseAsCStringLen bs $ \(p, n) -> decodeIOWithFromPtr peek (castPtr p) n

-- | Decode a run of this many values that must fill these bytes exactly,
-- all at once, put in front of the given list ('Left' names the first
-- that does not decode, counting from 0, or the bytes left over). Never
-- reads past the bytes; the tail is not forced.
decodeValuesOnto :: Store a => Int -> B.ByteString -> [a] -> Either (Int, String) [a]
decodeValuesOnto count bs tailList = unsafeDupablePerformIO $ BU.unsafeUseAsCStringLen bs $ \(p0, n) -> do
  let start = castPtr p0 :: Ptr Word8
      end = start `plusPtr` n
  st <- unsafeMakePeekState end (pure end)
  progress <- newCell
  let go !i !p acc
        | i >= count = pure (acc, p)
        | otherwise = do
            setCell progress i
            -- a peek that would read past the end throws PeekException
            PeekResult p' x <- runPeek peek st p
            go (i + 1) p' (x : acc)
  r <- tryAt progress (go 0 start [])
  pure $ case r of
    Left (i, e) -> Left (i, maybe (displayException e) (T.unpack . peekExMessage) (fromException e))
    Right (acc, p)
      | p == end -> Right (reverseOnto acc tailList)
      | otherwise -> Left (count, show (end `minusPtr` p) ++ " bytes left over after the run's " ++ show count ++ " values")
  where
    reverseOnto [] ys = ys
    reverseOnto (x : xs) ys = reverseOnto xs (x : ys)
{-# INLINABLE decodeValuesOnto #-}
