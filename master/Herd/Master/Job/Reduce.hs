-- | Reductions combined on the workers: 'farmReduce' maps a function over
-- a list and combines the results with an associative function, and
-- 'reduceByKey' does the same per key (word counts, histograms, group-by
-- sums). The inputs are cut into groups, a few per worker, and a worker
-- maps and combines a whole group. Then the workers exchange
-- ("Herd.Core.Exchange"): a worker cuts its group's map into one part per
-- partition of the keys and sends each part straight to the worker that
-- owns the partition (through the host agent on one host, relayed by the
-- master's links otherwise; the master's core never reads the bytes).
-- Each owner combines its partition's parts once all are in, and only
-- the final maps come to the caller, each key once. 'farmReduce' is a
-- tree: the groups are cut in order into one block per worker, each
-- group's partial goes to its block's owner, the owners combine their
-- blocks at once, and the caller combines one value per block.
--
-- > wordsOf :: Doc -> [(T.Text, Int)]
-- > countTask :: StaticPtr (KeyedReducer Doc T.Text Int)
-- > countTask = static (keyedReducer wordsOf (+))   -- top level, not in Main
-- >
-- > counts <- reduceByKey cluster countTask docs
--
-- Promises: the answer is the one a single process would give, for any
-- associative combining function (a commutative one is not needed: groups
-- are cut in input order and combined in that order); a lost worker's
-- groups run again elsewhere and a lost owner's partitions are sent again
-- to a live worker, so kills change nothing in the answer; an exception
-- in the function fails the call naming the group's first input.
module Herd.Master.Job.Reduce
  ( Reducer
  , reducer
  , farmReduce
  , KeyedReducer
  , keyedReducer
  , reduceByKey
  , reduceGroups
  ) where

import Control.Exception (throwIO)
import Control.Monad (forM)
import qualified Data.Map.Strict as M
import Data.Store (Store)
import Data.Typeable (Typeable)
import GHC.StaticPtr (StaticPtr, deRefStaticPtr)
import Herd.Task.Closure (Closure (..), closureRef)
import Herd.Core.Error (HerdError (..))
import Herd.Master (Cluster, clusterWorkerCount, runExchange)
import Herd.Task.Reducer (KeyedCodecs (..), KeyedReducer, keyedReducer)
import Herd.Task (TaskRef (..))

-- | A function and an associative way to combine its results: a keyed
-- reducer with one key. Build one with 'reducer' inside a @static@ form.
type Reducer a b = KeyedReducer a () b

-- | Map with the function, combine with the operator (which must be
-- associative).
reducer :: (Store a, Store b, Typeable a, Typeable b) => (a -> b) -> (b -> b -> b) -> Reducer a b
reducer f = keyedReducer (\x -> [((), f x)])
{-# INLINE reducer #-}

-- | The function mapped over every input and the results combined, in
-- input order: each group on the worker that ran it, each block of groups
-- on the worker that owns it, then the blocks' results here; 'Nothing'
-- for no input.
farmReduce :: Cluster -> StaticPtr (Reducer a b) -> [a] -> IO (Maybe b)
farmReduce cluster ptr xs = M.lookup () <$> reduceOver True cluster ptr xs

-- | Every input's pairs, combined by key: each group on its worker, then
-- each partition of the keys on the worker that owns it; the partitions'
-- maps come back here.
reduceByKey :: Ord k => Cluster -> StaticPtr (KeyedReducer a k v) -> [a] -> IO (M.Map k v)
reduceByKey = reduceOver False

-- A keyed reduction, its partitions of the keys or (a tree) of the groups.
reduceOver :: Ord k => Bool -> Cluster -> StaticPtr (KeyedReducer a k v) -> [a] -> IO (M.Map k v)
reduceOver tree cluster ptr xs = do
  let codecs = closureCodecs (deRefStaticPtr ptr)
      ref = closureRef ptr
      name = refName ref
  workers <- clusterWorkerCount cluster
  let groups = reduceGroups workers xs
      firstInput = M.fromList (zip [0 ..] (scanl (+) 0 (map length groups)))
      inputOf g = M.findWithDefault 0 g firstInput
  if null groups then pure M.empty else do
    encoded <- forM (zip [0 ..] groups) $ \(g, group) ->
      encodeGroup codecs group >>= either (throwIO . ArgumentError (inputOf g) name) pure
    answer <- runExchange cluster ref tree encoded
    case answer of
      Left (TaskFailed g _ why) -> throwIO (TaskFailed (inputOf g) name why)
      Left (TaskKilledWorkers g _ n why) -> throwIO (TaskKilledWorkers (inputOf g) name n why)
      Left err -> throwIO err
      Right parts -> mergeInOrder codecs <$> mapM (either (throwIO . ResultDecodeError 0 name) pure . decodePartition codecs) parts

-- | The inputs cut into groups, in order: four per worker (so a slow
-- group can be balanced by the others), none empty, at most one per
-- input.
reduceGroups :: Int -> [a] -> [[a]]
reduceGroups workers xs = cut sizes xs
  where
    n = length xs
    g = max 1 (min n (4 * max 1 workers))
    sizes = [ n * (i + 1) `div` g - n * i `div` g | i <- [0 .. g - 1] ]
    cut (s : ss) ys = let (h, t) = splitAt s ys in if null h then cut ss t else h : cut ss t
    cut [] _ = []
