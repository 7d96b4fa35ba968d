-- | Reductions combined on the workers: 'farmReduce' maps a function over
-- a list and combines the results with an associative function, and
-- 'reduceByKey' does the same per key (word counts, histograms, group-by
-- sums). Either way the inputs are cut into groups, a few per worker, and
-- a worker maps and combines a whole group.
--
-- * 'farmReduce' sends each group's one partial result to the master,
--   which combines those.
-- * 'reduceByKey' exchanges between the workers ("Herd.Core.Exchange"):
--   a worker cuts its group's map into one part per partition of the keys
--   and sends each part straight to the worker that owns the partition
--   (the master's links relay it; its core never reads the bytes); each
--   owner combines its partition's parts, and only the final maps come to
--   the caller, each key once. The combining runs on every worker at once
--   and the master merges nothing.
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
module Herd.Reduce
  ( Reducer
  , Combining
  , reducer
  , farmReduce
  , KeyedReducer
  , keyedReducer
  , reduceByKey
  , reduceGroups
  ) where

import Control.Exception (throwIO)
import Control.Monad (forM)
import Data.List (foldl', foldl1')
import qualified Data.Map.Strict as M
import Data.Store (Store)
import Data.Typeable (Typeable)
import GHC.StaticPtr (StaticPtr, deRefStaticPtr)
import Herd.Closure (Closure (..), closureRef)
import Herd.Farm (TaskFn (..), farmFn)
import Herd.Core.Error (HerdError (..))
import Herd.Master (Cluster, clusterWorkerCount, runExchange)
import Herd.Reduce.Keyed (KeyedCodecs (..), KeyedReducer, keyedReducer)
import Herd.Task (TaskRef (..))
import Herd.Task (Runner, TaskCodecs, task)

-- | What the caller of a reduction needs: the group task's codecs and the
-- combining function, to combine the groups' partial results.
data Combining a b = Combining (TaskCodecs [a] b) (b -> b -> b)

-- | A function and an associative way to combine its results: a task over
-- a group of inputs, which the workers run, and the combining function,
-- which the caller also uses on the groups' results. Build one with
-- 'reducer' inside a @static@ form.
type Reducer a b = Closure (Combining a (Maybe b)) Runner

-- | Map with the function, combine with the operator (which must be
-- associative), a group at a time.
reducer :: (Store a, Store b, Typeable a, Typeable b) => (a -> b) -> (b -> b -> b) -> Reducer a b
reducer f op = withCombining (task (\xs -> if null xs then Nothing else Just (foldl1' op (map f xs)))) orBoth
  where
    orBoth (Just x) (Just y) = Just (op x y)
    orBoth x Nothing = x
    orBoth Nothing y = y
{-# INLINE reducer #-}

-- | The function mapped over every input and the results combined, on the
-- workers a group at a time, then the groups' results here, in input
-- order; 'Nothing' for no input.
farmReduce :: Cluster -> StaticPtr (Reducer a b) -> [a] -> IO (Maybe b)
farmReduce = reduceWith Nothing

-- | Every input's pairs, combined by key: each group on its worker, then
-- each partition of the keys on the worker that owns it; the partitions'
-- maps come back here.
reduceByKey :: Ord k => Cluster -> StaticPtr (KeyedReducer a k v) -> [a] -> IO (M.Map k v)
reduceByKey cluster ptr xs = do
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
    answer <- runExchange cluster ref encoded
    case answer of
      Left (TaskFailed g _ why) -> throwIO (TaskFailed (inputOf g) name why)
      Left (TaskKilledWorkers g _ n why) -> throwIO (TaskKilledWorkers (inputOf g) name n why)
      Left err -> throwIO err
      Right parts -> M.unions <$> mapM (either (throwIO . ResultDecodeError 0 name) pure . decodePartition codecs) parts

-- A task with the combining function beside its codecs.
withCombining :: Closure (TaskCodecs [a] b) Runner -> (b -> b -> b) -> Closure (Combining a b) Runner
withCombining t op = t { closureCodecs = Combining (closureCodecs t) op }

-- Farm the groups, combine their results in order.
reduceWith :: b -> Cluster -> StaticPtr (Closure (Combining a b) Runner) -> [a] -> IO b
reduceWith none cluster ptr xs = do
  let Combining codecs op = closureCodecs (deRefStaticPtr ptr)
  workers <- clusterWorkerCount cluster
  partials <- farmFn cluster (TaskFn (closureRef ptr) codecs) (reduceGroups workers xs)
  pure (case partials of { [] -> none; p : ps -> foldl' op p ps })

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
