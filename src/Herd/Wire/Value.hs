-- | User values on the wire: @store@ encoders that write straight into a
-- packet buffer, and decoders that read one message's bytes.
--
-- Promise: a decoder consumes exactly the bytes it is given, or fails with
-- a message; it never reads past them. (Inside a user's own types @store@
-- is trusted as it is; see the README.)
module Herd.Wire.Value
  ( valueEncoder
  , decodeValue
  , decodeValueIO
  , forcedEncoder
  ) where

import Control.Exception (evaluate, displayException)
import qualified Data.ByteString as B
import Data.Store (Store, decode)
import qualified Data.ByteString.Unsafe as BU
import Data.Store.Core (Poke (..), decodeIOWithFromPtr, unsafeMakePokeState)
import Foreign.Ptr (castPtr)
import Data.Store.Internal (getSize, peek, poke)
import Herd.Packet (Encoder (..))

-- | The encoder of a value (its size is computed now; the bytes are written
-- when the packet layer asks).
valueEncoder :: Store a => a -> Encoder
valueEncoder x = Encoder (getSize x) $ \p -> do
  st <- unsafeMakePokeState p (pure p)
  _ <- runPoke (poke x) st 0
  pure ()

-- | Evaluate a value (to weak head normal form, and further as far as
-- computing its encoded size needs) and give its encoder. Throws what the
-- value throws.
forcedEncoder :: Store a => a -> IO Encoder
forcedEncoder x = do
  x' <- evaluate x
  n <- evaluate (getSize x')
  pure $ Encoder n $ \p -> do
    st <- unsafeMakePokeState p (pure p)
    _ <- runPoke (poke x') st 0
    pure ()

-- | Decode a value that must fill these bytes exactly.
decodeValue :: Store a => B.ByteString -> Either String a
decodeValue bs = either (Left . displayException) Right (decode bs)

-- | Decode a value that must fill these bytes exactly, in IO: cheaper than
-- 'decodeValue' on a hot path; throws @store@'s @PeekException@.
decodeValueIO :: Store a => B.ByteString -> IO a
decodeValueIO bs = BU.unsafeUseAsCStringLen bs $ \(p, n) -> decodeIOWithFromPtr peek (castPtr p) n
