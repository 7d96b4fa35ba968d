{-# LANGUAGE ScopedTypeVariables #-}
-- | The closure of a keyed reduction ("Herd.Master.Job.Reduce"): on the workers, a
-- group of inputs mapped to (key, value) pairs, combined by key and cut
-- into partitions of the keys, and a partition's parts combined in group
-- order; for the caller, the group's encoding and the decoding of a
-- partition's answer. Both sides only see bytes on the wire: a part is a
-- partition's pairs in ascending key order, @store@-encoded.
--
-- Promises: a key's partition depends only on its encoding (the same on
-- every worker of one build); combining keeps group order, so any
-- associative function gives the single-process answer; inputs or parts
-- that do not decode are an error naming what, never a crash.
module Herd.Task.Reducer
  ( KeyedReducer
  , KeyedCodecs (..)
  , KeyedRunner (..)
  , keyedReducer
  , lookupKeyedRunner
  , partitionOfKey
  ) where

import Control.Exception (evaluate)
import Data.Bits (xor)
import qualified Data.ByteString as B
import qualified Data.IntMap.Strict as IM
import Data.List (foldl')
import qualified Data.Map.Strict as M
import Data.Store (PeekException, Store, decode, encode)
import Data.Typeable (Proxy (..), Typeable, typeRep, typeRepFingerprint)
import Data.Word (Word64, Word8)
import Herd.Task.Closure
import Herd.Core.Base (TaskRef)
import Herd.Task (tryUser)

-- | A function from an input to (key, value) pairs and an associative way
-- to combine two values of one key. Build one with 'keyedReducer' inside
-- a @static@ form.
type KeyedReducer a k v = Closure (KeyedCodecs a k v) KeyedRunner

-- | The caller's side.
data KeyedCodecs a k v = KeyedCodecs
  { encodeGroup    :: [a] -> IO (Either String B.ByteString)
    -- ^ a group's inputs, evaluated and encoded ('Left': what threw)
  , decodePartition :: B.ByteString -> Either String (M.Map k v)
    -- ^ a partition's combined answer
  , mergeInOrder   :: [M.Map k v] -> M.Map k v
    -- ^ maps combined by key, earlier ones first (the blocks of a tree)
  }

-- | The workers' side, on bytes.
data KeyedRunner = KeyedRunner
  { runGroup     :: Int -> B.ByteString -> IO (Either String [B.ByteString])
    -- ^ a group's inputs, mapped and combined by key, cut into this many
    -- partitions' parts
  , combineParts :: [B.ByteString] -> IO (Either String B.ByteString)
    -- ^ one partition's parts, in group order, combined
  }

-- | Map each input to pairs, combine the values of a key with the
-- operator (which must be associative).
keyedReducer :: forall a k v. (Ord k, Store a, Store k, Store v, Typeable a, Typeable k, Typeable v)
             => (a -> [(k, v)]) -> (v -> v -> v) -> KeyedReducer a k v
keyedReducer f op = Closure
  { closureKind = ReducerClosure
  , closureLabel = Nothing
  , closureIn = typeRepFingerprint (typeRep (Proxy :: Proxy a))
  , closureOut = typeRepFingerprint (typeRep (Proxy :: Proxy (M.Map k v)))
  , closureTypes = show (typeRep (Proxy :: Proxy a)) ++ " -> " ++ show (typeRep (Proxy :: Proxy (M.Map k v)))
  , closureCodecs = KeyedCodecs
      { encodeGroup = \xs -> tryUser (evaluate (encode xs))
      , decodePartition = \b -> either (const (Left "a partition's answer does not decode")) (Right . M.fromDistinctAscList)
                                       (decode b :: Either PeekException [(k, v)])
      , mergeInOrder = foldl' (M.unionWith op) M.empty
      }
  , closureRunner = KeyedRunner groupRun partsCombine
  }
  where
    groupRun parts bytes = case decode bytes :: Either PeekException [a] of
      Left _ -> pure (Left "the group's inputs do not decode as its type")
      Right xs -> tryUser $ do
        let combined = foldl' (\m x -> foldl' add m (f x)) M.empty xs
            -- one pass, right to left, so each partition's pairs come out ascending
            cut = M.foldrWithKey (\k v acc -> IM.insertWith (++) (partitionOfKey parts (encode k)) [(k, v)] acc) IM.empty combined
            encoded = [ encode (IM.findWithDefault [] j cut) | j <- [0 .. parts - 1] ]
        mapM evaluate encoded
    add acc (k, v) = M.insertWith (flip op) k v acc
    partsCombine bs = case mapM (\b -> decode b :: Either PeekException [(k, v)]) bs of
      Left _ -> pure (Left "a part does not decode as the reducer's pairs")
      Right lists -> tryUser (evaluate (encode (M.toAscList (foldl' (\m l -> M.unionWith op m (M.fromDistinctAscList l)) M.empty lists))))
{-# INLINE keyedReducer #-}

-- | The partition of a key: FNV-1a of its encoding, modulo the count.
partitionOfKey :: Int -> B.ByteString -> Int
partitionOfKey parts key = fromIntegral (B.foldl' step 14695981039346656037 key `mod` fromIntegral (max 1 parts))
  where
    step :: Word64 -> Word8 -> Word64
    step h b = (h `xor` fromIntegral b) * 1099511628211

-- | Find a keyed reducer's runner in this binary, checking its kind and
-- types; 'Left' says why it cannot run here.
lookupKeyedRunner :: TaskRef -> IO (Either String KeyedRunner)
lookupKeyedRunner ref = either (Left . describeClosureError) Right <$> lookupClosure ReducerClosure ref
