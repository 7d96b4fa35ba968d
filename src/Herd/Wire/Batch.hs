{-# LANGUAGE BangPatterns #-}
{-# LANGUAGE ScopedTypeVariables #-}
-- | Runs of user values in bytes: the farm's hot path, on both sides.
--
-- A run of task arguments or results travels as one message: a count,
-- then the values' @store@ encodings back to back, with no header per
-- value. The master encodes a job's arguments once, into one pinned
-- table ('ArgTable'), so a batch's arguments leave as slices of it (one
-- copy into the packet); the worker decodes a run in place, applies the
-- function and writes the results into a buffer it reuses ('Scratch');
-- the master decodes a run of results in place, handing each value
-- straight to the caller's array ('decodeRun'). Nothing is allocated per
-- value beyond the decoded value itself.
--
-- Promises: a run is accepted only if its values fill its bytes exactly,
-- and no read goes past them; a value that throws while it is evaluated or
-- encoded, or that does not decode, is reported with its position, and
-- nothing after it is used. (Inside a user's own types @store@ is trusted
-- as it is; see the README.)
module Herd.Wire.Batch
  ( -- * The master's arguments
    ArgTable
  , buildArgTable
  , argCount
  , argsFitting
  , argsEncoder
    -- * The master's results
  , decodeRun
  , constantWidth
  , Arena
  , newArena
  , stageRun
  , arenaValues
    -- * The worker's results
  , Scratch
  , newScratch
  , ChunkOutcome (..)
  , runChunk
  , scratchCount
  , resultsFitting
  , resultsEncoder
    -- * Message layout
  , runHeaderBytes
  ) where

import Control.Exception
import qualified Data.ByteString as B
import qualified Data.ByteString.Unsafe as BU
import Data.IORef
import Data.Primitive.PrimArray
import Data.Store (Store)
import Data.Store.Core (Peek (..), PeekException (..), PeekResult (..), Poke (..), unsafeMakePeekState, unsafeMakePokeState)
import Data.Proxy (Proxy)
import Data.Store.Internal (Size (..), getSize, peek, poke, size)
import System.IO.Unsafe (unsafeDupablePerformIO)
import qualified Data.Text as T
import Data.Word (Word8)
import Foreign.ForeignPtr (ForeignPtr, castForeignPtr, mallocForeignPtrBytes, withForeignPtr)
import Foreign.Marshal.Utils (copyBytes)
import Foreign.Ptr (Ptr, castPtr, minusPtr, plusPtr)
import Foreign.Storable (peekElemOff, pokeByteOff, pokeElemOff)
import GHC.Exts (RealWorld)
import Herd.Base (Encoder (..), Range (..))
import Herd.Big
import Herd.Bytes (pokeBE)
import Herd.Wire.Tags (tagArgs, tagResults)

-- | Bytes a run message takes besides its values: a tag and a 32-bit count.
runHeaderBytes :: Int
runHeaderBytes = 5

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

-- Encode a value at an offset; the new end.
pokeAt :: Store a => Ptr Word8 -> Int -> a -> IO Int
pokeAt p off x = do
  st <- unsafeMakePokeState p (pure p)
  fst <$> runPoke (poke x) st off
{-# INLINE pokeAt #-}

-- One mutable Int: where a loop got to, read back when it throws.
type Cell = MutablePrimArray RealWorld Int

newCell :: IO Cell
newCell = do
  c <- newPrimArray 1
  writePrimArray c 0 0
  pure c

setCell :: Cell -> Int -> IO ()
setCell c = writePrimArray c 0
{-# INLINE setCell #-}

getCell :: Cell -> IO Int
getCell c = readPrimArray c 0

-- Run a loop; a synchronous exception comes back with the cell's value.
tryAt :: Cell -> IO r -> IO (Either (Int, SomeException) r)
tryAt cell act = do
  r <- try act
  case r of
    Right x -> pure (Right x)
    Left (e :: SomeException)
      | Just (_ :: SomeAsyncException) <- fromException e -> throwIO e
      | otherwise -> (\at -> Left (at, e)) <$> getCell cell

-- | A job's arguments, encoded once: all their bytes in one buffer
-- outside the GHC heap ("Herd.Big"), and where each ends. A run of
-- arguments leaves as one copy of a slice.
data ArgTable = ArgTable
  { tableBytes :: !(ForeignPtr Word8)
  , tableEnds  :: !(ForeignPtr Int)   -- ^ entry i+1: where argument i ends; entry 0 is 0
  , tableCount :: !Int
  }

-- | The number of arguments.
argCount :: ArgTable -> Int
argCount = tableCount

-- | Evaluate and encode every argument, in one pass over the list (the
-- list can be collected as it goes). 'Left' names the first argument (or
-- list cell) that threw, with what it threw.
buildArgTable :: Store a => [a] -> IO (Either (Int, String) ArgTable)
buildArgTable xs0 = do
  progress <- newCell
  bytes0 <- newBig 65536
  ends0 <- newBig 65536 `onException` freeBig bytes0
  pokeElemOff (castPtr (bigPtr ends0)) 0 (0 :: Int)
  -- the buffers as they are now, to free them if an argument throws
  current <- newIORef (bytes0, ends0)
  let go !bytes !ends !fill !i xs = do
        setCell progress i
        case xs of
          [] -> do
            table <- ArgTable <$> freezeBig bytes <*> (castForeignPtr <$> freezeBig ends) <*> pure i
            pure table
          x : rest -> do
            let !size = getSize x
            bytes' <- if fill + size <= bigCapacity bytes then pure bytes else do
              b <- growBig bytes (max (fill + size) (2 * bigCapacity bytes))
              writeIORef current (b, ends)
              pure b
            ends' <- if 8 * (i + 2) <= bigCapacity ends then pure ends else do
              e <- growBig ends (16 * (i + 2))
              writeIORef current (bytes', e)
              pure e
            end <- pokeAt (bigPtr bytes') fill x
            pokeElemOff (castPtr (bigPtr ends')) (i + 1) end
            go bytes' ends' end (i + 1) rest
  built <- tryAt progress (go bytes0 ends0 0 0 xs0)
  case built of
    Right table -> pure (Right table)
    Left (i, e) -> do
      (b, e') <- readIORef current
      freeBig b >> freeBig e'
      pure (Left (i, displayException e))
{-# INLINABLE buildArgTable #-}

-- Where argument i starts (and i - 1 ends).
endOf :: ArgTable -> Int -> Int
endOf t i = unsafeDupablePerformIO (withForeignPtr (tableEnds t) (\p -> peekElemOff p i))
{-# INLINE endOf #-}

-- | How many of the arguments from @lo@ (below @hi@) fit in a message of
-- this many bytes: at least one, so that every argument can be sent.
argsFitting :: ArgTable -> Int -> Int -> Int -> Int
argsFitting t lo hi budget
  | hi <= lo = 0
  | otherwise = max 1 (search lo hi - lo)
  where
    start = endOf t lo
    fits k = endOf t k - start <= budget - runHeaderBytes
    -- the largest k in [lo, hi] whose arguments lo..k-1 fit
    search a b
      | a >= b = a
      | otherwise = let m = (a + b + 1) `div` 2 in if fits m then search m b else search a (m - 1)

-- | The body of an 'Herd.Wire.Args' message carrying arguments @lo@ to
-- @hi - 1@: the tag, the count, then a copy of their bytes.
argsEncoder :: ArgTable -> Int -> Int -> Encoder
argsEncoder t lo hi = Encoder (runHeaderBytes + len) $ \dst -> do
  writeHeader tagArgs (hi - lo) dst
  withForeignPtr (tableBytes t) $ \src -> copyBytes (dst `plusPtr` runHeaderBytes) (src `plusPtr` start) len
  where
    start = endOf t lo
    len = endOf t hi - start

writeHeader :: Word8 -> Int -> Ptr Word8 -> IO ()
writeHeader tag count dst = do
  pokeByteOff dst 0 tag
  pokeBE 4 dst 1 (fromIntegral count)
{-# INLINE writeHeader #-}

-- | Decode a run of values that must fill these bytes exactly, handing
-- each to the sink with its task index (the ranges, in order, name the
-- tasks). 'Left': the index of the first value that did not decode, and
-- why; the sink has seen the values before it.
decodeRun :: forall b. Store b => (Int -> b -> IO ()) -> [Range] -> B.ByteString -> IO (Either (Int, String) ())
decodeRun sink ranges bytes = BU.unsafeUseAsCStringLen bytes $ \(p0, n) -> do
  let start = castPtr p0 :: Ptr Word8
      end = start `plusPtr` n
  st <- unsafeMakePeekState end (pure end)
  progress <- newCell
  let goRanges !p rs = case rs of
        [] -> pure p
        Range lo hi : rest -> goIx p lo hi >>= \p' -> goRanges p' rest
      goIx !p !i !hi
        | i >= hi = pure p
        | otherwise = do
            setCell progress i
            -- a peek that would read past the end throws PeekException
            PeekResult p' x <- runPeek (peek :: Peek b) st p
            sink i x
            goIx p' (i + 1) hi
  done <- tryAt progress (goRanges start ranges)
  pure $ case done of
    Left (i, e) -> Left (i, maybe (displayException e) (T.unpack . peekExMessage) (fromException e))
    Right p
      | p == end -> Right ()
      | otherwise -> Left (lastIndex, show (end `minusPtr` p) ++ " bytes left over after the run's values")
  where
    lastIndex = case reverse ranges of { Range _ hi : _ -> hi - 1; [] -> 0 }
{-# INLINABLE decodeRun #-}

-- | The encoded size every value of a type has, if it has one (@store@'s
-- @ConstSize@: numbers, and records and tuples of them).
constantWidth :: forall b. Store b => Proxy b -> Maybe Int
constantWidth _ = case (size :: Size b) of
  ConstSize n -> Just n
  VarSize _ -> Nothing
{-# INLINABLE constantWidth #-}

-- | Where a job's results of a constant-width type wait for the caller,
-- still encoded: one pinned buffer, task @i@'s value at @i@ times the
-- width. The garbage collector never copies or scans it, and each value
-- is decoded when the caller's list reaches it.
data Arena = Arena
  { arenaBytes :: !(ForeignPtr Word8)
  , arenaWidth :: !Int
  }

-- | An arena for this many values of this width (outside the GHC heap).
newArena :: Int -> Int -> IO Arena
newArena n width = do
  big <- newBig (max 1 (n * width))
  (`Arena` width) <$> freezeBig big

-- | Check that a run of results decodes (each value, all the bytes), then
-- copy each value to its task's place. 'Left' as 'decodeRun'; nothing is
-- copied then.
stageRun :: forall b. Store b => Proxy b -> Arena -> [Range] -> B.ByteString -> IO (Either (Int, String) ())
stageRun _ arena ranges bytes = do
  checked <- decodeRun (\_ (_ :: b) -> pure ()) ranges bytes
  case checked of
    Left bad -> pure (Left bad)
    Right () -> do
      let w = arenaWidth arena
      BU.unsafeUseAsCStringLen bytes $ \(src, _) -> withForeignPtr (arenaBytes arena) $ \dst ->
        let go _ [] = pure ()
            go off (Range lo hi : rest) = do
              copyBytes (dst `plusPtr` (lo * w)) (castPtr src `plusPtr` off) ((hi - lo) * w)
              go (off + (hi - lo) * w) rest
        in go 0 ranges
      pure (Right ())
{-# INLINABLE stageRun #-}

-- | The first @n@ values of an arena whose values were all staged,
-- decoded 64 at a time as the list is walked.
arenaValues :: forall b. Store b => Arena -> Int -> [b]
arenaValues arena n = go 0
  where
    w = arenaWidth arena
    -- 64 cells at a time, so one suspended tail serves 64 values
    go i
      | i >= n = []
      | otherwise = let stop = min n (i + 64) in fill i (stop - 1) (go stop)
    fill lo j acc
      | j < lo = acc
      | otherwise = let !x = valueAt j in fill lo (j - 1) (x : acc)
    valueAt i = unsafeDupablePerformIO $ withForeignPtr (arenaBytes arena) $ \p -> do
      let at = p `plusPtr` (i * w)
          end = at `plusPtr` w
      st <- unsafeMakePeekState end (pure end)
      PeekResult _ x <- runPeek (peek :: Peek b) st at
      pure x
{-# INLINABLE arenaValues #-}

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
  if lo >= count then pure 0 else do
    start <- readPrimArray (gEnds g) lo
    let fits :: Int -> IO Bool
        fits k = (\e -> e - start <= budget - runHeaderBytes) <$> readPrimArray (gEnds g) k
        search a b
          | a >= b = pure a
          | otherwise = do
              let m = (a + b + 1) `div` 2
              ok <- fits m
              if ok then search m b else search a (m - 1)
    k <- search lo count
    pure (max 1 (k - lo))

-- | The body of a 'Herd.Wire.Results' message carrying results @lo@ to
-- @hi - 1@ of the last run (valid until the next run).
resultsEncoder :: Scratch -> Int -> Int -> IO Encoder
resultsEncoder sc lo hi = do
  g <- readIORef (scGrowing sc)
  start <- readPrimArray (gEnds g) lo
  stop <- readPrimArray (gEnds g) hi
  let len = stop - start
  pure $ Encoder (runHeaderBytes + len) $ \dst -> do
    writeHeader tagResults (hi - lo) dst
    withForeignPtr (gBytes g) $ \src -> copyBytes (dst `plusPtr` runHeaderBytes) (src `plusPtr` start) len
