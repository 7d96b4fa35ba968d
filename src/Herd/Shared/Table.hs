{-# LANGUAGE BangPatterns, ScopedTypeVariables #-}
-- | Where a process keeps the shared values it was sent ("Herd.Shared"):
-- one table per process, the values encoded as they came and decoded at
-- most once per type, when a task first looks at one. A worker assembles
-- a value from its pieces ('receivePiece'); the master puts in what it
-- shares, already decoded, so a handle resolves there too.
--
-- Promises: a value is in the table only once all its pieces came, in
-- order and adding up to its size (a piece that does not fit is refused,
-- naming the value); a value dropped is gone, pieces and all; looking up
-- a value that is not held fails with an error naming it.
module Herd.Shared.Table
  ( Assembly
  , newAssembly
  , receivePiece
  , dropShared
  , holdLocal
  , resolveShared
  , heldCount
  ) where

import Control.Exception (ErrorCall (..), throwIO)
import qualified Data.ByteString as B
import Data.IORef
import qualified Data.Map.Strict as M
import Data.Store (Store, decode)
import Data.Typeable (Proxy (..), Typeable, typeRep, typeRepFingerprint)
import Data.Word (Word64)
import GHC.Exts (Any)
import GHC.Fingerprint (Fingerprint)
import System.IO.Unsafe (unsafePerformIO)
import Unsafe.Coerce (unsafeCoerce)

-- One held value: its bytes, and its decoding for the type that last asked.
data Entry = Entry !B.ByteString !(IORef (Maybe (Fingerprint, Any)))

-- The process's table.
table :: IORef (M.Map Word64 Entry)
table = unsafePerformIO (newIORef M.empty)
{-# NOINLINE table #-}

-- | One link's values in arrival: for each, its size and the pieces so
-- far, newest first.
newtype Assembly = Assembly (IORef (M.Map Word64 (Int, Int, [B.ByteString])))

-- | Nothing arriving yet.
newAssembly :: IO Assembly
newAssembly = Assembly <$> newIORef M.empty

-- | The next piece of a value of this total size: 'Right True' once the
-- value is whole (and held), 'Left' why the piece does not fit. The piece
-- is copied: the frame it came in is reused.
receivePiece :: Assembly -> Word64 -> Int -> B.ByteString -> IO (Either String Bool)
receivePiece (Assembly ref) n total piece = do
  parts <- readIORef ref
  let (size, got, pieces) = M.findWithDefault (total, 0, []) n parts
      got' = got + B.length piece
  if size /= total || got' > total
    then pure (Left ("shared value " ++ show n ++ ": a piece of " ++ show (B.length piece) ++ " bytes after "
                     ++ show got ++ " does not fit its size " ++ show size ++ " (this piece says " ++ show total ++ ")"))
    else if got' == total
      then do
        modifyIORef' ref (M.delete n)
        let !bytes = B.concat (reverse (B.copy piece : pieces))
        cache <- newIORef Nothing
        atomicModifyIORef' table (\m -> (M.insert n (Entry bytes cache) m, ()))
        pure (Right True)
      else do
        -- copied now, not when the list is next read: by then the
        -- frame's buffer holds another packet
        let !kept = B.copy piece
        modifyIORef' ref (M.insert n (total, got', kept : pieces))
        pure (Right False)

-- | Forget a value, held or still arriving.
dropShared :: Assembly -> Word64 -> IO ()
dropShared (Assembly ref) n = do
  modifyIORef' ref (M.delete n)
  atomicModifyIORef' table (\m -> (M.delete n m, ()))

-- | Hold a value this process made (the master's own), decoded already.
holdLocal :: forall a. Typeable a => Word64 -> B.ByteString -> a -> IO ()
holdLocal n bytes x = do
  cache <- newIORef (Just (typeRepFingerprint (typeRep (Proxy :: Proxy a)), unsafeCoerce x))
  atomicModifyIORef' table (\m -> (M.insert n (Entry bytes cache) m, ()))

-- | How many values this process holds.
heldCount :: IO Int
heldCount = M.size <$> readIORef table

-- | The value held under this number, decoded as @a@ (once per type).
-- Throws an 'ErrorCall' naming the value if it is not held here or does
-- not decode as @a@.
resolveShared :: forall a. (Store a, Typeable a) => Word64 -> IO a
resolveShared n = do
  found <- M.lookup n <$> readIORef table
  case found of
    Nothing -> throwIO (ErrorCall ("shared value " ++ show n ++ " is not held here (was it unshared?)"))
    Just (Entry bytes cache) -> do
      decoded <- readIORef cache
      case decoded of
        Just (fp, v) | fp == want -> pure (unsafeCoerce v)
        _ -> case decode bytes of
          Left e -> throwIO (ErrorCall ("shared value " ++ show n ++ " does not decode as "
                                        ++ show (typeRep (Proxy :: Proxy a)) ++ ": " ++ show e))
          Right (v :: a) -> do
            writeIORef cache (Just (want, unsafeCoerce v))
            pure v
  where want = typeRepFingerprint (typeRep (Proxy :: Proxy a))
