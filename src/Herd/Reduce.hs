-- | Reductions combined on the workers: 'farmReduce' maps a function over
-- a list and combines the results with an associative function, and
-- 'reduceByKey' does the same per key (word counts, histograms, group-by
-- sums). Either way the inputs are cut into groups, a few per worker; a
-- worker maps and combines a whole group, so only one partial result per
-- group crosses back to the master, which combines those. A job whose
-- results are many small values that combine into few (a sum, counts over
-- a vocabulary) moves and merges a fraction of what collecting every
-- result at the master would, and the combining runs on every worker at
-- once.
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
-- groups run again elsewhere, as any farm task's, so kills change nothing
-- in the answer; an exception in the function fails the call naming the
-- group's first input.
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

import Data.List (foldl', foldl1')
import qualified Data.Map.Strict as M
import Data.Store (Store)
import Data.Typeable (Typeable)
import GHC.StaticPtr (StaticPtr, deRefStaticPtr)
import Herd.Closure (Closure (..), closureRef)
import Herd.Farm (TaskFn (..), farmFn)
import Herd.Master (Cluster, clusterWorkerCount)
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

-- | A function from an input to (key, value) pairs and an associative way
-- to combine two values of one key, as a task over a group of inputs.
-- Build one with 'keyedReducer' inside a @static@ form.
type KeyedReducer a k v = Closure (Combining a (M.Map k v)) Runner

-- | Each group's pairs combined by key on the worker that ran it.
keyedReducer :: (Ord k, Store a, Store k, Store v, Typeable a, Typeable k, Typeable v)
             => (a -> [(k, v)]) -> (v -> v -> v) -> KeyedReducer a k v
keyedReducer f op = withCombining (task (foldl' (\m x -> foldl' add m (f x)) M.empty)) (M.unionWith op)
  where add acc (k, v) = M.insertWith (flip op) k v acc
{-# INLINE keyedReducer #-}

-- | Every input's pairs, combined by key: each group on its worker, then
-- the groups' maps here, in input order.
reduceByKey :: Cluster -> StaticPtr (KeyedReducer a k v) -> [a] -> IO (M.Map k v)
reduceByKey = reduceWith M.empty

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
