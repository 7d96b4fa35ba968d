{-# LANGUAGE BangPatterns #-}
{-# LANGUAGE ScopedTypeVariables #-}
-- | Runs of user values in bytes, the worker's side of the farm's hot path
-- (the master's is "Herd.Wire.ArgTable"): decode a run of arguments in place,
-- apply the function, force and encode each result into a buffer reused
-- from run to run, and cut the results into run messages.
--
-- Promises: a run's arguments are used only if they fill its bytes
-- exactly, and no read goes past them; the first argument that does not
-- decode, or whose call throws, is named by its position, and the results
-- before it are kept to be sent.
module Herd.Wire.Scratch
  ( Scratch
  , newScratch
  , ChunkOutcome (..)
  , chunkOutcome
  , runChunk
  , scratchCount
  , resultsFitting
  , resultsEncoder
  ) where

import Control.Exception
import qualified Data.ByteString as B
import qualified Data.ByteString.Unsafe as BU
import Data.IORef
import Data.Primitive.PrimArray
import Data.Store (Store)
import Data.Store.Core (PeekException (..), PeekResult (..), Peek (..), unsafeMakePeekState)
import Data.Store.Internal (getSize, peek)
import qualified Data.Text as T
import Data.Word (Word8)
import Foreign.ForeignPtr (ForeignPtr, mallocForeignPtrBytes, withForeignPtr)
import Foreign.Marshal.Utils (copyBytes)
import Foreign.Ptr (Ptr, castPtr, minusPtr, plusPtr)
import GHC.Exts (RealWorld)
import Herd.Wire.Writer (Encoder)
import Herd.Wire.Run
import Herd.Core.Wire.Tags (tagResults)
import Herd.Core.Worker.Step (Outcome (..))

-- A growable pinned byte buffer and a growable array of end offsets.
data Growing = Growing
  { gBytes :: !(ForeignPtr Word8)
  , gCap   :: !Int
  , gEnds  :: !(MutablePrimArray RealWorld Int)  -- ^ entry i+1: where value i ends
  }

newGrowing :: Int -> Int -> IO Growing
newGrowing bytes count = do
  buf <- mallocForeignPtrBytes bytes
  ends <- newPrimArray (count + 1)
  writePrimArray ends 0 0
  pure (Growing buf bytes ends)

-- Whether @need@ more bytes after @fill@ and one more end after value @i@
-- fit as things are.
roomy :: Growing -> Int -> Int -> Int -> IO Bool
roomy g fill need i
  | fill + need > gCap g = pure False
  | otherwise = (i + 2 <=) <$> getSizeofMutablePrimArray (gEnds g)
{-# INLINE roomy #-}

-- Grow to make that room, keeping what is there.
grow :: Growing -> Int -> Int -> Int -> IO Growing
grow g fill need i = do
  g1 <- if fill + need <= gCap g then pure g else do
    let cap' = max (fill + need) (2 * gCap g)
    buf' <- mallocForeignPtrBytes cap'
    withForeignPtr buf' $ \dst -> withForeignPtr (gBytes g) $ \src -> copyBytes dst src fill
    pure g { gBytes = buf', gCap = cap' }
  slots <- getSizeofMutablePrimArray (gEnds g1)
  if i + 2 <= slots then pure g1 else do
    ends' <- resizeMutablePrimArray (gEnds g1) (2 * slots)
    pure g1 { gEnds = ends' }

-- | The worker's results of one run, in a buffer reused from run to run.
data Scratch = Scratch
  { scGrowing :: !(IORef Growing)
  , scCount   :: !Cell   -- ^ results the last run wrote
  , scAt      :: !Cell   -- ^ 2j while argument j is decoded, 2j+1 while it is computed
  }

-- | An empty scratch buffer.
newScratch :: IO Scratch
newScratch = Scratch <$> (newGrowing 65536 1024 >>= newIORef) <*> newCell <*> newCell

-- | How a run of arguments went.
data ChunkOutcome
  = ChunkDone                       -- ^ every argument gave a result
  | ChunkUndecodable !Int String    -- ^ the argument at this position did not decode (results before it are kept)
  | ChunkThrew !Int String          -- ^ the function threw on the argument at this position (results before it are kept)
  deriving (Eq, Show)

-- | A run's outcome as the worker's step ("Herd.Core.Worker.Step") takes it.
chunkOutcome :: ChunkOutcome -> Outcome
chunkOutcome ran = case ran of
  ChunkDone -> Computed
  ChunkUndecodable j why -> Undecodable j why
  ChunkThrew j why -> Threw j why

-- | Decode a run of @count@ arguments, apply the function to each, force
-- and encode each result into the scratch buffer. Stops at the first
-- argument that does not decode or whose call throws; the results before
-- it stay in the buffer ('scratchCount').
runChunk :: forall a b. (Store a, Store b) => (a -> b) -> Scratch -> B.ByteString -> Int -> IO ChunkOutcome
runChunk f sc bytes count = BU.unsafeUseAsCStringLen bytes $ \(p0, n) -> do
  let start = castPtr p0 :: Ptr Word8
      end = start `plusPtr` n
  st <- unsafeMakePeekState end (pure end)
  setCell (scCount sc) 0
  g0 <- readIORef (scGrowing sc)
  let go !p !g !fill !j
        | j >= count = pure p
        | otherwise = do
            setCell (scAt sc) (2 * j)
            PeekResult p' (x :: a) <- runPeek peek st p
            setCell (scAt sc) (2 * j + 1)
            y <- evaluate (f x)
            let !size = getSize y
            ok <- roomy g fill size j
            g' <- if ok then pure g else do
              grown <- grow g fill size j
              writeIORef (scGrowing sc) grown
              pure grown
            end' <- withForeignPtr (gBytes g') $ \q -> pokeAt q fill y
            writePrimArray (gEnds g') (j + 1) end'
            setCell (scCount sc) (j + 1)
            go p' g' end' (j + 1)
  r <- tryAt (scAt sc) (go start g0 0 0)
  pure $ case r of
    Right p
      | p == end -> ChunkDone
      | otherwise -> ChunkUndecodable (max 0 (count - 1))
                       (show (end `minusPtr` p) ++ " bytes left over after the run's arguments")
    Left (at, e) -> case (even at, fromException e) of
      (True, Just (pe :: PeekException)) -> ChunkUndecodable (at `div` 2) (T.unpack (peekExMessage pe))
      _ -> ChunkThrew (at `div` 2) (displayException e)
{-# INLINABLE runChunk #-}

-- | Results the last run left in the buffer.
scratchCount :: Scratch -> IO Int
scratchCount sc = getCell (scCount sc)

-- | How many results from position @lo@ fit in a message of this many
-- bytes: at least one (when any is left).
resultsFitting :: Scratch -> Int -> Int -> IO Int
resultsFitting sc lo budget = do
  count <- scratchCount sc
  g <- readIORef (scGrowing sc)
  runsFitting (readPrimArray (gEnds g)) lo count budget

-- | The body of a 'Herd.Wire.Results' message carrying results @lo@ to
-- @hi - 1@ of the last run (valid until the next run).
resultsEncoder :: Scratch -> Int -> Int -> IO Encoder
resultsEncoder sc lo hi = do
  g <- readIORef (scGrowing sc)
  start <- readPrimArray (gEnds g) lo
  stop <- readPrimArray (gEnds g) hi
  pure (runEncoder tagResults (hi - lo) (gBytes g) start (stop - start))
