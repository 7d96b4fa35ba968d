{-# LANGUAGE ScopedTypeVariables, StaticPointers #-}
-- | The closures of datasets ("Herd.Master.Job.Dataset"): functions that
-- run on the partitions a worker holds. A partition is held as its
-- encoding and, once a function has looked at it, as its decoded value
-- ('Held'), so a partition used by every iteration of a loop is decoded
-- once, and one a function made is never decoded at all.
--
-- Promises: a runner never crashes its worker: inputs that do not decode
-- as the function's type, and whatever the function throws, come back as
-- 'Left' naming what; a shuffle's split gives exactly as many parts as it
-- is asked for, or fails saying so.
module Herd.Task.Partition
  ( -- * Held partitions
    Held
  , heldBytes
  , heldSize
  , newHeld
  , heldOf
  , heldAs
    -- * Partition functions
  , PartitionRunner (..)
  , PartitionFn
  , PartCodecs (..)
  , DatasetMap
  , DatasetZip
  , DatasetGen
  , DatasetQuery
  , partitionMap
  , partitionZip
  , partitionGen
  , partitionRead
  , partitionQuery
  , putPartition
  , collectPartition
  , EveryWorker
  , onEachWorker
  , lookupPartitionRunner
    -- * Shuffles
  , ShuffleRunner (..)
  , Shuffler
  , ShuffleCodecs (..)
  , shuffler
  , keyedShuffler
  , lookupShuffleRunner
  ) where

import GHC.Compact (compact, getCompact)
import Control.Exception (CompactionFailed, IOException, evaluate, try)
import qualified Data.ByteString as B
import qualified Data.IntMap.Strict as IM
import Data.IORef
import Data.List (foldl')
import qualified Data.Map.Strict as M
import qualified Data.Vector as V
import Data.Store (PeekException, Store, decode, encode)
import Data.Store.Internal (getSize)
import Data.Typeable (Proxy (..), Typeable, typeRep, typeRepFingerprint)
import GHC.Exts (Any)
import GHC.Fingerprint (Fingerprint)
import GHC.StaticPtr (StaticPtr)
import Unsafe.Coerce (unsafeCoerce)
import Herd.Core.Base (TaskRef)
import Herd.Task (tryUser)
import Herd.Task.Closure
import Herd.Task.Reducer (partitionOfKey)

-- | A partition held on a worker: its bytes, and its value decoded for
-- the type that last asked.
--
-- A partition a function made is held as its value, its encoding made
-- only if something asks for the bytes (a collect): partitions stay
-- where they are, so most are never encoded, and a step that keeps a
-- large input inside its result (a graph beside new ranks) shares it
-- instead of copying it.
data Held = Held
  { heldBytes  :: B.ByteString   -- ^ its encoding (made when first asked for)
  , heldSize   :: !Int           -- ^ the encoding's length
  , _heldCache :: !(IORef (Maybe (Fingerprint, Any)))
  }

-- | A partition of these bytes, not decoded yet (the bytes are its own:
-- copy a slice of a packet first).
newHeld :: B.ByteString -> IO Held
newHeld b = Held b (B.length b) <$> newIORef Nothing

-- | A partition made here, kept as its value. Its size is computed now,
-- which evaluates it (for the types partitions are made of: vectors,
-- maps, records of them) so that what the function throws is thrown
-- here.
heldOf :: forall p. (Store p, Typeable p) => p -> IO Held
heldOf v = do
  n <- evaluate (getSize v)
  Held (encode v) n <$> newIORef (Just (typeRepFingerprint (typeRep (Proxy :: Proxy p)), unsafeCoerce v))

-- | The partition's value as this type, decoded at most once per type in
-- a row.
heldAs :: forall p. (Store p, Typeable p) => Held -> IO (Either String p)
heldAs (Held b _ cache) = do
  known <- readIORef cache
  case known of
    Just (fp, v) | fp == want -> pure (Right (unsafeCoerce v))
    _ -> case decode b :: Either PeekException p of
      Left _ -> pure (Left ("a partition does not decode as " ++ show (typeRep (Proxy :: Proxy p))))
      Right v -> Right v <$ writeIORef cache (Just (want, unsafeCoerce v))
  where want = typeRepFingerprint (typeRep (Proxy :: Proxy p))

-- | The workers' side of a partition function: given the partition's
-- index, the held inputs (partition @j@ of each input dataset) and the
-- argument's bytes, what to keep as the output's partition @j@ (if
-- anything) and the answer's bytes.
newtype PartitionRunner = PartitionRunner
  { runPartition :: Int -> [Held] -> B.ByteString -> IO (Either String (Maybe Held, B.ByteString)) }

-- | The caller's side: how to encode the argument, decode an answer.
data PartCodecs c r = PartCodecs
  { encodeArgument :: c -> B.ByteString
  , decodeAnswer   :: B.ByteString -> Either String r
  }

-- | A function on partitions.
type PartitionFn c r = Closure (PartCodecs c r) PartitionRunner

-- | A function from each partition of one dataset to the partition of
-- another ('partitionMap').
type DatasetMap p q = Closure (PartCodecs (Proxy (p, q)) ()) PartitionRunner

-- | A function of two co-partitioned datasets' partitions ('partitionZip').
type DatasetZip p q r = Closure (PartCodecs (Proxy (p, q, r)) ()) PartitionRunner

-- | A function making each partition from an argument, the partition
-- count and its index ('partitionGen').
type DatasetGen c p = Closure (PartCodecs (c, Int) ()) PartitionRunner

-- | A function of each partition and an argument whose results come back
-- ('partitionQuery').
type DatasetQuery p c r = Closure (PartCodecs c r) PartitionRunner

-- | Make each partition of the result from the partition of the input.
partitionMap :: forall p q. (Store p, Store q, Typeable p, Typeable q) => (p -> q) -> DatasetMap p q
partitionMap f = partitionClosure (Proxy :: Proxy (p, q)) (ignoring ()) $ \_ ins _ -> case ins of
  [a] -> withHeld a $ \(x :: p) -> kept (f x)
  _ -> pure (Left "a partition map takes one input partition")

-- | Make each partition of the result from the partitions of two
-- co-partitioned inputs.
partitionZip :: forall p q r. (Store p, Store q, Store r, Typeable p, Typeable q, Typeable r) => (p -> q -> r) -> DatasetZip p q r
partitionZip f = partitionClosure (Proxy :: Proxy (p, q, r)) (ignoring ()) $ \_ ins _ -> case ins of
  [a, b] -> withHeld a $ \(x :: p) -> withHeld b $ \(y :: q) -> kept (f x y)
  _ -> pure (Left "a partition zip takes two input partitions")

-- | Make partition @j@ of @n@ as @f c n j@, on the worker that holds it.
partitionGen :: forall c p. (Store c, Store p, Typeable c, Typeable p) => (c -> Int -> Int -> p) -> DatasetGen c p
partitionGen f = partitionClosure (Proxy :: Proxy (c, Int, p)) (PartCodecs encode (const (Right ()))) $ \j _ arg ->
  case decode arg :: Either PeekException (c, Int) of
    Left _ -> pure (Left "a generator's argument does not decode")
    Right (c, n) -> compacted (f c n j) >>= kept

-- A made partition in a compact region of its own, where it can be: the
-- collector then neither copies nor traces it, where PageRank's graph of
-- about 100 MB a worker was copied by each major collection (now and then
-- an iteration took 2-3x as long as the others). A partition the runtime
-- cannot compact (one holding functions, mutable or pinned data) is held
-- as it is.
compacted :: p -> IO p
compacted x = do
  r <- try (compact x)
  pure (either (\(_ :: CompactionFailed) -> x) getCompact r)

-- | Make partition @j@ from the bytes of the @j@-th file named, read on
-- the worker that holds it (every host must have the files: a shared
-- file system, or copies in the same place), so its bytes never pass
-- through the master; the function is given the file's name too. A
-- file that cannot be read fails the step naming the file.
partitionRead :: forall p. (Store p, Typeable p) => (FilePath -> B.ByteString -> p) -> DatasetGen [FilePath] p
partitionRead parse = partitionClosure (Proxy :: Proxy ([FilePath], Int, p)) (PartCodecs encode (const (Right ()))) $ \j _ arg ->
  case decode arg :: Either PeekException ([FilePath], Int) of
    Left _ -> pure (Left "a reader's argument does not decode")
    Right (paths, _) -> case drop j paths of
      path : _ -> try (B.readFile path) >>= \read' -> case read' of
        Left (e :: IOException) -> pure (Left ("cannot read " ++ path ++ " on this worker: " ++ show e))
        Right bytes -> kept (parse path bytes)
      [] -> pure (Left ("no file for partition " ++ show j ++ " of " ++ show (length paths)))

-- | Apply the function to each partition with the argument; the results
-- come back, the partitions stay.
partitionQuery :: forall p c r. (Store p, Store c, Store r, Typeable p, Typeable c, Typeable r) => (p -> c -> r) -> DatasetQuery p c r
partitionQuery f = partitionClosure (Proxy :: Proxy (p, c, r)) (PartCodecs encode decodeR) $ \_ ins arg -> case ins of
  [a] -> withHeld a $ \(x :: p) -> case decode arg :: Either PeekException c of
    Left _ -> pure (Left "a query's argument does not decode")
    Right c -> tryUser (evaluate (encode (f x c))) >>= pure . fmap (\b -> (Nothing, b))
  _ -> pure (Left "a partition query takes one input partition")
  where decodeR b = either (const (Left "a query's answer does not decode")) Right (decode b :: Either PeekException r)

-- | An action each worker runs once ('onEachWorker').
type EveryWorker c r = Closure (PartCodecs c r) PartitionRunner

-- | An action to run on each worker, given an argument; its results come
-- back (Dask's @client.run@: load something on every worker, look at each
-- one's environment).
onEachWorker :: forall c r. (Store c, Store r, Typeable c, Typeable r) => (c -> IO r) -> EveryWorker c r
onEachWorker act = partitionClosure (Proxy :: Proxy (c, r, ())) (PartCodecs encode decodeR) $ \_ _ arg ->
  case decode arg :: Either PeekException c of
    Left _ -> pure (Left "the action's argument does not decode")
    Right c -> fmap (\b -> (Nothing, b)) <$> tryUser (act c >>= evaluate . encode)
  where decodeR b = either (const (Left "the action's answer does not decode")) Right (decode b :: Either PeekException r)

-- | Hold the argument's bytes as the partition (the caller encoded it).
putPartition :: StaticPtr (PartitionFn B.ByteString ())
putPartition = static (named "put a partition" (partitionClosure (Proxy :: Proxy B.ByteString) (PartCodecs id (const (Right ())))
                 (\_ _ arg -> (\h -> Right (Just h, B.empty)) <$> newHeld (B.copy arg))))

-- | Give the partition's bytes back; it stays held.
collectPartition :: StaticPtr (PartitionFn () B.ByteString)
collectPartition = static (named "collect a partition" (partitionClosure (Proxy :: Proxy ()) (PartCodecs (const B.empty) Right)
                     (\_ ins _ -> pure (case ins of
                                          [a] -> Right (Nothing, heldBytes a)
                                          _ -> Left "collecting takes one input partition"))))

-- A partition closure whose types are those of the proxy.
partitionClosure :: forall t c r. Typeable t => Proxy t -> PartCodecs c r
                 -> (Int -> [Held] -> B.ByteString -> IO (Either String (Maybe Held, B.ByteString))) -> PartitionFn c r
partitionClosure _ codecs run = Closure
  { closureKind = PartitionClosure
  , closureLabel = Nothing
  , closureIn = typeRepFingerprint (typeRep (Proxy :: Proxy (t, Bool)))
  , closureOut = typeRepFingerprint (typeRep (Proxy :: Proxy t))
  , closureTypes = show (typeRep (Proxy :: Proxy t))
  , closureCodecs = codecs
  , closureRunner = PartitionRunner run
  }
{-# INLINE partitionClosure #-}

ignoring :: r -> PartCodecs c r
ignoring r = PartCodecs (const B.empty) (const (Right r))

withHeld :: (Store p, Typeable p) => Held -> (p -> IO (Either String a)) -> IO (Either String a)
withHeld h k = heldAs h >>= either (pure . Left) k

-- The function's value kept as the output partition (what it throws, as
-- it is forced, is the answer).
kept :: (Store q, Typeable q) => q -> IO (Either String (Maybe Held, B.ByteString))
kept v = fmap (\h -> (Just h, B.empty)) <$> tryUser (heldOf v)

-- | Find a partition function's runner in this binary.
lookupPartitionRunner :: TaskRef -> IO (Either String PartitionRunner)
lookupPartitionRunner ref = either (Left . describeClosureError) Right <$> lookupClosure PartitionClosure ref

-- | The workers' side of a shuffle: cut a held partition into this many
-- parts (part @j@ goes to the output's partition @j@), and combine one
-- output partition's parts, in input order, into the held partition.
--
-- A cut gives each part on its own, made (evaluated) when it is asked
-- for, as a value that is encoded only if it must travel: the worker asks
-- first for the parts other workers own, so they travel while it makes
-- its own, and keeps its own as they are.
data ShuffleRunner = ShuffleRunner
  { shuffleSplit   :: Int -> Held -> IO (Either String (Int -> IO (Either String Held)))
  , shuffleCombine :: [Held] -> IO (Either String Held)
  }

-- | The caller's side of a shuffle: only its types.
data ShuffleCodecs p part q = ShuffleCodecs

-- | A shuffle from partitions of type @p@, through parts of type @part@,
-- to partitions of type @q@. Build one with 'shuffler' or
-- 'keyedShuffler' inside a @static@ form.
type Shuffler p part q = Closure (ShuffleCodecs p part q) ShuffleRunner

-- | Cut each input partition into @n@ parts with the first function
-- (given @n@; part @j@ goes to output partition @j@), and make each
-- output partition from its parts, one per input partition in order,
-- with the second.
shuffler :: forall p part q. (Store p, Store part, Store q, Typeable p, Typeable part, Typeable q)
         => (Int -> p -> [part]) -> ([part] -> q) -> Shuffler p part q
shuffler split combine = Closure
  { closureKind = ShuffleClosure
  , closureLabel = Nothing
  , closureIn = typeRepFingerprint (typeRep (Proxy :: Proxy (p, part)))
  , closureOut = typeRepFingerprint (typeRep (Proxy :: Proxy (part, q)))
  , closureTypes = show (typeRep (Proxy :: Proxy p)) ++ " -> [" ++ show (typeRep (Proxy :: Proxy part)) ++ "] -> "
                   ++ show (typeRep (Proxy :: Proxy q))
  , closureCodecs = ShuffleCodecs
  , closureRunner = ShuffleRunner splitRun combineRun
  }
  where
    splitRun n h = withHeld h $ \(x :: p) -> tryUser $ do
      let parts = split n x
      count <- evaluate (length parts)
      if count == n then pure (partOf (V.fromListN n parts))
        else evaluate (error ("the shuffle's split gave " ++ show count ++ " parts, not " ++ show n))
    partOf parts j = case parts V.!? j of
      Just part -> tryUser (heldOf part)
      Nothing -> pure (Left ("a shuffle has no part " ++ show j ++ " of " ++ show (V.length parts)))
    combineRun hs = do
      decoded <- mapM (\h -> heldAs h :: IO (Either String part)) hs
      case sequence decoded of
        Left _ -> pure (Left "a shuffle's part does not decode as its type")
        Right parts -> tryUser (heldOf (combine parts))
{-# INLINE shuffler #-}

-- | Each input partition's elements mapped to (key, value) pairs and
-- combined by key where the partition is; then every key's values from
-- all partitions combined in its output partition (the partition of a
-- key is the one 'Herd.Master.Job.Reduce.reduceByKey' uses). The
-- operator must be associative; values are combined in input order.
keyedShuffler :: forall a k v. (Ord k, Store a, Store k, Store v, Typeable a, Typeable k, Typeable v)
              => (a -> [(k, v)]) -> (v -> v -> v) -> Shuffler [a] [(k, v)] (M.Map k v)
keyedShuffler f op = shuffler split combine
  where
    split n xs =
      let combined = foldl' (\m x -> foldl' (\acc (k, v) -> M.insertWith (flip op) k v acc) m (f x)) M.empty xs
          cut = M.foldrWithKey (\k v acc -> IM.insertWith (++) (partitionOfKey n (encode k)) [(k, v)] acc) IM.empty combined
      in [ IM.findWithDefault [] j cut | j <- [0 .. n - 1] ]
    combine parts = foldl' (\m l -> M.unionWith op m (M.fromDistinctAscList l)) M.empty parts
{-# INLINE keyedShuffler #-}

-- | Find a shuffle's runner in this binary.
lookupShuffleRunner :: TaskRef -> IO (Either String ShuffleRunner)
lookupShuffleRunner ref = either (Left . describeClosureError) Right <$> lookupClosure ShuffleClosure ref
