{-# LANGUAGE BangPatterns, ScopedTypeVariables #-}
-- | Where a worker keeps the shared values it was sent ("Herd.Master.Job.Shared"):
-- the values encoded as they came and decoded at most once per type, when
-- a task first looks at one. A worker assembles a value from its pieces
-- ('receivePiece'). The master keeps nothing here (its handles carry
-- their values, and its cluster's bookkeeping is the shell's).
--
-- This is the one process-wide table herd keeps, and why: a task's
-- argument is decoded by @store@'s pure 'Data.Store.peek', which is given
-- no context, so a 'Herd.Master.Job.Shared.Shared' handle can find its
-- value only in a table of the process; a worker process serves exactly
-- one master, so the table is that worker's. Numbers carry their
-- cluster's tag, so values of two clusters (a simulated host's, a test's)
-- never share an entry.
--
-- A worker may be given a budget for the values it keeps in memory
-- ('setHoldBudget': a share of its memory limit). A value that would not
-- fit goes to the worker's local disk as it arrives ("spilled"), and
-- lowering the budget spills the newest values held; a spilled value is
-- read back, and decoded afresh, each time a task looks at it: a job whose
-- values outgrow memory slows down instead of dying.
--
-- Promises: a value is in the table only once all its pieces came, in
-- order and adding up to its size (a piece that does not fit is refused,
-- naming the value); while a budget is set, the values kept in memory
-- take no more than it (one value larger than the budget goes to disk);
-- a value dropped is gone, pieces, decoding and file; looking up a value
-- that is not held fails with an error naming it.
module Herd.Node.Store
  ( Assembly
  , newAssembly
  , receivePiece
  , dropShared
  , resolveShared
  , heldCount
  , heldBytesOf
  , setHoldBudget
  , spilledCount
  , removeSpills
  , removeSpillsOf
  , maxSharedBytes
  , takeSpilled
  , memoryRoom
  , holdOther
  , spillPath
  ) where

import Control.Exception (ErrorCall (..), IOException, throwIO, try)
import Control.Monad (forM_, void, when)
import qualified Data.ByteString as B
import qualified Data.ByteString.Internal as BI
import qualified Data.ByteString.Unsafe as BU
import Data.Word (Word8)
import Foreign.ForeignPtr (ForeignPtr, withForeignPtr)
import Foreign.Ptr (castPtr, plusPtr)
import System.IO (Handle, IOMode (..), hClose, openBinaryFile)
import Data.IORef
import Data.List (sortOn)
import qualified Data.Map.Strict as M
import Data.Ord (Down (..))
import Data.Store (Store, decode)
import Data.Typeable (Proxy (..), Typeable, typeRep, typeRepFingerprint)
import Data.Word (Word64)
import GHC.Exts (Any)
import GHC.Fingerprint (Fingerprint)
import System.Directory (createDirectoryIfMissing, getTemporaryDirectory, removeDirectoryRecursive, removeFile)
import System.FilePath ((</>))
import System.IO.Unsafe (unsafePerformIO)
import System.Posix.Process (getProcessID)
import Unsafe.Coerce (unsafeCoerce)
import Herd.Node.Memory (hostMemoryBytes)

-- One held value.
data Entry
  = InMemory !B.ByteString !(IORef (Maybe (Fingerprint, Any)))
    -- ^ its bytes, and its decoding for the type that last asked
  | OnDisk !FilePath !Int
    -- ^ spilled: the file holding its bytes, and how many

-- The process's table: the values, the budget for those in memory (0:
-- none), and the order values came in (the newest spill first).
data Table = Table
  { tValues :: !(M.Map Word64 Entry)
  , tBudget :: !Int
  , tOrder  :: !Word64
  , tCame   :: !(M.Map Word64 Word64)
  , tSpilledNew :: ![Word64]   -- ^ values spilled since 'takeSpilled' last looked
  , tOther  :: !Int            -- ^ bytes of other held values in memory (reductions' parts), within the same budget
  }

table :: IORef Table
table = unsafePerformIO (newIORef (Table M.empty 0 0 M.empty [] 0))
{-# NOINLINE table #-}

-- | One link's values in arrival: for each, its size, the bytes so far,
-- and where they go.
newtype Assembly = Assembly (IORef (M.Map Word64 (Int, Int, Target)))

-- | The largest shared value a worker takes: 1 TiB.
maxSharedBytes :: Int
maxSharedBytes = 2 ^ (40 :: Int)

-- Where an arriving value's bytes go: a buffer of its size, or (when it
-- would not fit the budget) straight to its file on disk.
data Target = ToMemory !(ForeignPtr Word8) | ToDisk !Handle !FilePath

-- | Nothing arriving yet.
newAssembly :: IO Assembly
newAssembly = Assembly <$> newIORef M.empty

-- | The next piece of a value of this total size: 'Right True' once the
-- value is whole (and held), 'Left' why the piece does not fit. The piece
-- is copied where the value is kept, so the frame it came in can be
-- reused, and a value is never held twice while it arrives.
receivePiece :: Assembly -> Word64 -> Word64 -> B.ByteString -> IO (Either String Bool)
receivePiece (Assembly ref) n claimed piece
  | claimed > fromIntegral maxSharedBytes =
      pure (Left ("shared value " ++ show n ++ " claims " ++ show claimed ++ " bytes, more than a worker takes ("
                  ++ show maxSharedBytes ++ ")"))
  | otherwise = do
  let total = fromIntegral claimed
  parts <- readIORef ref
  (size, got, target) <- maybe (start) pure (M.lookup n parts)
  let got' = got + B.length piece
  if size /= total || got' > total
    then pure (Left ("shared value " ++ show n ++ ": a piece of " ++ show (B.length piece) ++ " bytes after "
                     ++ show got ++ " does not fit its size " ++ show size ++ " (this piece says " ++ show total ++ ")"))
    else do
      case target of
        ToMemory fp -> BU.unsafeUseAsCStringLen piece $ \(src, len) ->
          withForeignPtr fp $ \dst -> BI.memcpy (dst `plusPtr` got) (castPtr src) len
        ToDisk h _ -> B.hPut h piece
      if got' < total
        then Right False <$ modifyIORef' ref (M.insert n (total, got', target))
        else do
          modifyIORef' ref (M.delete n)
          case target of
            ToMemory fp -> do
              cache <- newIORef Nothing
              insert n (InMemory (BI.fromForeignPtr fp 0 total) cache)
              enforceBudget
            ToDisk h path -> do
              hClose h
              insert n (OnDisk path total)
              atomicModifyIORef' table (\t -> (t { tSpilledNew = n : tSpilledNew t }, ()))
          pure (Right True)
  where
    start = do
      t <- readIORef table
      memory <- maybe maxSharedBytes id <$> hostMemoryBytes
      let inMemory = tOther t + sum [ B.length b | InMemory b _ <- M.elems (tValues t) ]
          total = fromIntegral claimed
      -- a value past the budget, or too large for this host's memory (the
      -- allocation would end the process), goes to disk as it comes
      target <- if (tBudget t > 0 && inMemory + total > tBudget t) || total > memory `div` 2
        then do
          dir <- spillDir
          let path = dir </> show n
          h <- openBinaryFile path WriteMode
          pure (ToDisk h path)
        else ToMemory <$> BI.mallocByteString (max 1 total)
      pure (total, 0, target)

insert :: Word64 -> Entry -> IO ()
insert n e = atomicModifyIORef' table $ \t ->
  (t { tValues = M.insert n e (tValues t), tOrder = tOrder t + 1, tCame = M.insert n (tOrder t) (tCame t) }, ())

-- | Forget a value, held or still arriving (and its file, if spilled).
dropShared :: Assembly -> Word64 -> IO ()
dropShared (Assembly ref) n = do
  arriving <- M.lookup n <$> readIORef ref
  modifyIORef' ref (M.delete n)
  case arriving of
    Just (_, _, ToDisk h path) -> hClose h >> void (try (removeFile path) :: IO (Either IOException ()))
    _ -> pure ()
  gone <- atomicModifyIORef' table (\t -> (t { tValues = M.delete n (tValues t), tCame = M.delete n (tCame t) }, M.lookup n (tValues t)))
  case gone of
    Just (OnDisk path _) -> void (try (removeFile path) :: IO (Either IOException ()))
    _ -> pure ()

-- | How many values this process holds.
heldCount :: IO Int
heldCount = M.size . tValues <$> readIORef table

-- | The encoded size of a value held here (0 if none is).
heldBytesOf :: Word64 -> IO Int
heldBytesOf n = do
  found <- M.lookup n . tValues <$> readIORef table
  pure $ case found of
    Just (InMemory bytes _) -> B.length bytes
    Just (OnDisk _ size) -> size
    Nothing -> 0

-- | How many of them are spilled to disk.
spilledCount :: IO Int
spilledCount = length . filter onDisk . M.elems . tValues <$> readIORef table
  where onDisk e = case e of { OnDisk {} -> True; _ -> False }

-- | The values spilled since this was last asked, oldest first (for the
-- worker to tell its master).
takeSpilled :: IO [Word64]
takeSpilled = atomicModifyIORef' table (\t -> (t { tSpilledNew = [] }, reverse (tSpilledNew t)))

-- | Keep at most this many bytes of values in memory (0: no bound),
-- spilling the newest to disk until they fit.
setHoldBudget :: Int -> IO ()
setHoldBudget b = do
  atomicModifyIORef' table (\t -> (t { tBudget = max 0 b }, ()))
  enforceBudget

-- Spill the newest values in memory until those left fit the budget.
enforceBudget :: IO ()
enforceBudget = do
  t <- readIORef table
  let inMemory = [ (n, bytes) | (n, InMemory bytes _) <- M.toList (tValues t) ]
      total = tOther t + sum (map (B.length . snd) inMemory)
      newestFirst = sortOn (\(n, _) -> Down (M.findWithDefault 0 n (tCame t))) inMemory
      spill over ((n, bytes) : rest) | over > 0 = (n, bytes) : spill (over - B.length bytes) rest
      spill _ _ = []
  when (tBudget t > 0 && total > tBudget t) $ do
    dir <- spillDir
    forM_ (spill (total - tBudget t) newestFirst) $ \(n, bytes) -> do
      let path = dir </> show n
      B.writeFile path bytes
      atomicModifyIORef' table (\t' -> (t' { tValues = M.adjust (const (OnDisk path (B.length bytes))) n (tValues t')
                                            , tSpilledNew = n : tSpilledNew t' }, ()))

-- | The bytes that may still be held in memory under the budget, after
-- the shared values and other values kept there ('Nothing': no budget).
memoryRoom :: IO (Maybe Int)
memoryRoom = do
  t <- readIORef table
  let used = tOther t + sum [ B.length b | InMemory b _ <- M.elems (tValues t) ]
  pure (if tBudget t > 0 then Just (tBudget t - used) else Nothing)

-- | Other values of this many bytes were put in memory (or, negative,
-- left it): they count against the budget with the shared values.
holdOther :: Int -> IO ()
holdOther n = atomicModifyIORef' table (\t -> (t { tOther = max 0 (tOther t + n) }, ()))

-- | A file of this name in this process's spill directory (made if
-- needed), for a value held on disk; the directory goes with the process.
spillPath :: String -> IO FilePath
spillPath name = (</> name) <$> spillDir

-- This process's directory of spilled values.
spillDir :: IO FilePath
spillDir = do
  dir <- getProcessID >>= spillDirOf . fromIntegral
  createDirectoryIfMissing True dir
  pure dir

-- The directory of a process's spilled values.
spillDirOf :: Int -> IO FilePath
spillDirOf pid = (</> ("herd-spill-" ++ show pid)) <$> getTemporaryDirectory

-- | Remove what another process of this host spilled (a worker that was
-- killed before it could), if anything.
removeSpillsOf :: Int -> IO ()
removeSpillsOf pid = do
  dir <- spillDirOf pid
  void (try (removeDirectoryRecursive dir) :: IO (Either IOException ()))

-- | Remove this process's spilled values from disk (a worker's last act).
removeSpills :: IO ()
removeSpills = getProcessID >>= removeSpillsOf . fromIntegral

-- | The value held under this number, decoded as @a@ (once per type,
-- unless it was spilled: then read and decoded each time). Throws an
-- 'ErrorCall' naming the value if it is not held here or does not decode
-- as @a@.
resolveShared :: forall a. (Store a, Typeable a) => Word64 -> IO a
resolveShared n = do
  found <- M.lookup n . tValues <$> readIORef table
  case found of
    Nothing -> throwIO (ErrorCall ("shared value " ++ show n ++ " is not held here (was it unshared?)"))
    Just (OnDisk path _) -> B.readFile path >>= decoded
    Just (InMemory bytes cache) -> do
      known <- readIORef cache
      case known of
        Just (fp, v) | fp == want -> pure (unsafeCoerce v)
        _ -> do
          v <- decoded bytes
          writeIORef cache (Just (want, unsafeCoerce v))
          pure v
  where
    want = typeRepFingerprint (typeRep (Proxy :: Proxy a))
    decoded bytes = case decode bytes of
      Left e -> throwIO (ErrorCall ("shared value " ++ show n ++ " does not decode as "
                                    ++ show (typeRep (Proxy :: Proxy a)) ++ ": " ++ show e))
      Right (v :: a) -> pure v
