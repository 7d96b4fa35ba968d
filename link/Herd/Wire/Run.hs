{-# LANGUAGE ScopedTypeVariables #-}
-- | What both sides of the farm's runs of values share ("Herd.Wire.ArgTable"
-- on the master, "Herd.Wire.Scratch" on the worker): the layout of a run
-- message, how many values a message has room for, encoding a value at an
-- offset, and a loop's progress kept where an exception cannot lose it.
module Herd.Wire.Run
  ( runHeaderBytes
  , runEncoder
  , runsFitting
  , pokeAt
  , Cell
  , newCell
  , setCell
  , getCell
  , tryAt
  ) where

import Control.Exception
import Data.Primitive.PrimArray
import Data.Store (Store)
import Data.Store.Core (Poke (..), unsafeMakePokeState)
import Data.Store.Internal (poke)
import Data.Word (Word8)
import Foreign.ForeignPtr (ForeignPtr, withForeignPtr)
import Foreign.Marshal.Utils (copyBytes)
import Foreign.Ptr (Ptr, plusPtr)
import Foreign.Storable (pokeByteOff)
import GHC.Exts (RealWorld)
import Herd.Wire.Writer (Encoder (..))
import Herd.Wire.Writer (pokeBE)

-- | Bytes a run message takes besides its values: a tag and a 32-bit count.
runHeaderBytes :: Int
runHeaderBytes = 5

-- | The body of a run message: the tag, the count, then a copy of @len@
-- bytes of the buffer from @start@.
runEncoder :: Word8 -> Int -> ForeignPtr Word8 -> Int -> Int -> Encoder
runEncoder tag count buf start len = Encoder (runHeaderBytes + len) $ \dst -> do
  pokeByteOff dst 0 tag
  pokeBE 4 dst 1 (fromIntegral count)
  withForeignPtr buf $ \src -> copyBytes (dst `plusPtr` runHeaderBytes) (src `plusPtr` start) len

-- | How many values from @lo@ (below @hi@) fit in a run message of this
-- many bytes, given where each value ends (@endOf k@: the end of value
-- @k - 1@): at least one when any is left, so that every value can be sent.
runsFitting :: Monad m => (Int -> m Int) -> Int -> Int -> Int -> m Int
runsFitting endOf lo hi budget
  | hi <= lo = pure 0
  | otherwise = do
      start <- endOf lo
      let fits k = (\e -> e - start <= budget - runHeaderBytes) <$> endOf k
          -- the largest k in [a, b] whose values lo..k-1 fit
          search a b
            | a >= b = pure a
            | otherwise = do
                let m = (a + b + 1) `div` 2
                ok <- fits m
                if ok then search m b else search a (m - 1)
      k <- search lo hi
      pure (max 1 (k - lo))
{-# INLINE runsFitting #-}

-- | Encode a value at an offset from a pointer; the offset after it.
pokeAt :: Store a => Ptr Word8 -> Int -> a -> IO Int
pokeAt p off x = do
  st <- unsafeMakePokeState p (pure p)
  fst <$> runPoke (poke x) st off
{-# INLINE pokeAt #-}

-- | One mutable Int, unboxed: where a loop got to, read back when it throws.
type Cell = MutablePrimArray RealWorld Int

-- | A cell holding 0.
newCell :: IO Cell
newCell = do
  c <- newPrimArray 1
  writePrimArray c 0 0
  pure c

-- | Set a cell.
setCell :: Cell -> Int -> IO ()
setCell c = writePrimArray c 0
{-# INLINE setCell #-}

-- | Read a cell.
getCell :: Cell -> IO Int
getCell c = readPrimArray c 0

-- | Run a loop; a synchronous exception comes back with the cell's value
-- (asynchronous ones are rethrown).
tryAt :: Cell -> IO r -> IO (Either (Int, SomeException) r)
tryAt cell act = do
  r <- try act
  case r of
    Right x -> pure (Right x)
    Left (e :: SomeException)
      | Just (_ :: SomeAsyncException) <- fromException e -> throwIO e
      | otherwise -> (\at -> Left (at, e)) <$> getCell cell
