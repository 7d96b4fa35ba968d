{-# LANGUAGE BangPatterns #-}
{-# LANGUAGE ScopedTypeVariables #-}
-- | Runs of user values in bytes, the master's side of the farm's hot
-- path (the worker's is "Herd.Wire.Scratch").
--
-- A run of task arguments or results travels as one message: a count,
-- then the values' @store@ encodings back to back, with no header per
-- value ("Herd.Wire.Run"). The master encodes a job's arguments once, into
-- one table outside the GHC heap ('ArgTable'), so a batch's arguments
-- leave as slices of it (one copy into the packet); it decodes a run of
-- results in place, handing each value straight to the caller's array
-- ('decodeRun') or keeping it encoded ('Arena'). Nothing is allocated per
-- value beyond the decoded value itself.
--
-- Promises: a run is accepted only if its values fill its bytes exactly,
-- and no read goes past them; a value that throws while it is evaluated or
-- encoded, or that does not decode, is reported with its position, and
-- nothing after it is used. (Inside a user's own types @store@ is trusted
-- as it is; see docs/operations.md.)
module Herd.Wire.ArgTable
  ( -- * The master's arguments
    ArgTable
  , buildArgTable
  , argCount
  , argsFitting
  , argsEncoder
  , argBytes
    -- * The master's results
  , decodeRun
  , constantWidth
  , Arena
  , newArena
  , stageRun
  , arenaValues
  , argsArena
  , arenaBytesOf
    -- * Message layout
  , runHeaderBytes
  ) where

import Control.Exception
import qualified Data.ByteString as B
import qualified Data.ByteString.Unsafe as BU
import Data.Functor.Identity (Identity (..))
import Data.IORef
import Data.Maybe (fromMaybe)
import Data.Proxy (Proxy (..))
import Data.Store (Store)
import Data.Store.Core (Peek (..), PeekException (..), PeekResult (..), unsafeMakePeekState)
import Data.Store.Internal (Size (..), getSize, peek, size)
import qualified Data.Text as T
import Data.Word (Word8)
import Foreign.ForeignPtr (ForeignPtr, castForeignPtr, withForeignPtr)
import Foreign.Marshal.Utils (copyBytes)
import Foreign.Ptr (Ptr, castPtr, minusPtr, plusPtr)
import Foreign.Storable (peekElemOff, pokeElemOff)
import Herd.Core.Base (Range (..))
import Herd.Wire.Writer (Encoder)
import Herd.Sys.Big
import Herd.Wire.Run
import Herd.Core.Wire.Tags (tagArgs)
import System.IO.Unsafe (unsafeDupablePerformIO)

-- | A job's arguments, encoded once: all their bytes in one buffer
-- outside the GHC heap ("Herd.Sys.Big"), and where each ends. A run of
-- arguments leaves as one copy of a slice. Arguments of a type whose
-- encodings all have one width keep no table of ends: argument @i@ ends
-- at @(i + 1)@ times the width. That table was a third of the fresh
-- memory of a farm of tiny tasks (8 bytes per task), and on a VM the
-- first touch of fresh memory is dear.
data ArgTable = ArgTable
  { tableBytes :: !(ForeignPtr Word8)
  , tableEnds  :: !Ends
  , tableCount :: !Int
  }

-- Where each argument ends: in a table (entry i+1: where argument i
-- ends; entry 0 is 0), or every one width further.
data Ends = EndsAt !(ForeignPtr Int) | EveryWidth !Int

-- | The number of arguments.
argCount :: ArgTable -> Int
argCount = tableCount

-- | Evaluate and encode every argument, in one pass over the list (the
-- list can be collected as it goes). 'Left' names the first argument (or
-- list cell) that threw, with what it threw.
buildArgTable :: forall a. Store a => [a] -> IO (Either (Int, String) ArgTable)
buildArgTable xs0 = do
  progress <- newCell
  bytes0 <- newBig 65536
  let width = constantWidth (Proxy :: Proxy a)
  ends0 <- case width of
    Just _ -> pure Nothing
    Nothing -> Just <$> newBig 65536 `onException` freeBig bytes0
  mapM_ (\e -> pokeElemOff (castPtr (bigPtr e)) 0 (0 :: Int)) ends0
  -- the buffers as they are now, to free them if an argument throws
  current <- newIORef (bytes0, ends0)
  let go !bytes ends !fill !i xs = do
        setCell progress i
        case xs of
          [] -> do
            frozenEnds <- case ends of
              Just e -> EndsAt . castForeignPtr <$> freezeBig e
              Nothing -> pure (EveryWidth (fromMaybe 0 width))
            frozen <- freezeBig bytes
            pure (ArgTable frozen frozenEnds i)
          x : rest -> do
            let !size' = getSize x
            bytes' <- if fill + size' <= bigCapacity bytes then pure bytes else do
              b <- growBig bytes (max (fill + size') (2 * bigCapacity bytes))
              writeIORef current (b, ends)
              pure b
            ends' <- case ends of
              Just e | 8 * (i + 2) > bigCapacity e -> do
                e' <- growBig e (16 * (i + 2))
                writeIORef current (bytes', Just e')
                pure (Just e')
              _ -> pure ends
            end <- pokeAt (bigPtr bytes') fill x
            case (ends', width) of
              (Just e, _) -> pokeElemOff (castPtr (bigPtr e)) (i + 1) end
              (Nothing, Just w) | end /= fill + w ->
                -- without a table of ends, every argument must be as wide as its type says
                throwIO (ErrorCall ("its encoding took " ++ show (end - fill) ++ " bytes, but its type's Store instance says every value takes " ++ show w))
              _ -> pure ()
            go bytes' ends' end (i + 1) rest
  built <- tryAt progress (go bytes0 ends0 0 0 xs0)
  case built of
    Right table -> pure (Right table)
    Left (i, e) -> do
      (b, e') <- readIORef current
      freeBig b >> mapM_ freeBig e'
      pure (Left (i, displayException e))
{-# INLINABLE buildArgTable #-}

-- Where argument i starts (and i - 1 ends).
endOf :: ArgTable -> Int -> Int
endOf t i = case tableEnds t of
  EveryWidth w -> i * w
  EndsAt ends -> unsafeDupablePerformIO (withForeignPtr ends (\p -> peekElemOff p i))
{-# INLINE endOf #-}

-- | How many of the arguments from @lo@ (below @hi@) fit in a message of
-- this many bytes: at least one, so that every argument can be sent.
argsFitting :: ArgTable -> Int -> Int -> Int -> Int
argsFitting t lo hi budget = runIdentity (runsFitting (Identity . endOf t) lo hi budget)

-- | A copy of argument @i@'s encoded bytes (for showing it in an error).
argBytes :: ArgTable -> Int -> B.ByteString
argBytes t i
  | i < 0 || i >= tableCount t = B.empty
  | otherwise = unsafeDupablePerformIO $ withForeignPtr (tableBytes t) $ \p ->
      B.packCStringLen (castPtr (p `plusPtr` endOf t i), endOf t (i + 1) - endOf t i)

-- | The body of an 'Herd.Wire.Args' message carrying arguments @lo@ to
-- @hi - 1@: the tag, the count, then a copy of their bytes.
argsEncoder :: ArgTable -> Int -> Int -> Encoder
argsEncoder t lo hi = runEncoder tagArgs (hi - lo) (tableBytes t) (endOf t lo) (endOf t hi - endOf t lo)

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

-- | The arguments' own table as an arena of their width, if they all have
-- one ("Herd.Wire.InPlace" writes final results over their arguments).
argsArena :: ArgTable -> Maybe Arena
argsArena t = case tableEnds t of
  EveryWidth w | w > 0 -> Just (Arena (tableBytes t) w)
  _ -> Nothing

-- | An arena's bytes and the width of each value.
arenaBytesOf :: Arena -> (ForeignPtr Word8, Int)
arenaBytesOf a = (arenaBytes a, arenaWidth a)

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
