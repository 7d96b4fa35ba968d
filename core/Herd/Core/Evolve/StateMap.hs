{-# LANGUAGE DeriveTraversable #-}
-- | State ids and the maps keyed by them that the master's evolve code
-- keeps ("Herd.Core.Evolve.Registry", "Herd.Core.Evolve.Call", "Herd.Core.Evolve.Plan").
--
-- A 'StateMap' is an 'IM.IntMap' under the id's bits, not a 'Data.Map'
-- of 'StateId': with thousands of states the master's maps were a large
-- share of its time, each step down a 'Data.Map' a call of @Word64@'s
-- 'compare' through its dictionary, and each insert a rebalancing. Promise: it iterates in the order of @StateId@'s 'Ord'
-- (the ids' unsigned order), as the 'Data.Map' did, so every list made
-- from one is in the order it always was. Pure.
module Herd.Core.Evolve.StateMap
  ( StateId (..)
  , stateIdBits
  , StateMap
  , empty
  , fromList
  , fromMap
  , toMap
  , toList
  , keys
  , elems
  , size
  , null
  , member
  , lookup
  , findWithDefault
  , (!)
  , insert
  , insertWith
  , delete
  , filter
  , filterWithKey
  , foldlWithKey'
  , union
  , withoutKeys
  ) where

import Prelude hiding (filter, lookup, null)
import Data.Bits (xor)
import qualified Data.IntMap.Strict as IM
import qualified Data.Map.Strict as M
import Data.Word (Word64)

-- | A state held by some worker, as the caller names it.
newtype StateId = StateId
  { stateIdWord :: Word64  -- ^ the id as a number (the worker that made it in the high 24 bits)
  }
  deriving (Eq, Ord)

instance Show StateId where
  show (StateId w) = "#" ++ show w

-- | Bits of a state id below the worker's number: a worker makes ids
-- @worker << stateIdBits .|. n@, so ids from different workers never clash.
stateIdBits :: Int
stateIdBits = 40

-- | Values keyed by state id.
newtype StateMap a = StateMap (IM.IntMap a)
  deriving (Eq, Functor, Foldable, Traversable)

instance Show a => Show (StateMap a) where
  show m = "fromList " ++ show (toList m)

-- The id's bits as an Int whose signed order is the id's unsigned order
-- (the top bit flipped), so the IntMap walks keys as @StateId@'s 'Ord'.
key :: StateId -> Int
key (StateId w) = fromIntegral (w `xor` topBit)
{-# INLINE key #-}

unkey :: Int -> StateId
unkey k = StateId (fromIntegral k `xor` topBit)
{-# INLINE unkey #-}

topBit :: Word64
topBit = 0x8000000000000000

-- | No states.
empty :: StateMap a
empty = StateMap IM.empty

-- | From pairs; the last value of a state wins.
fromList :: [(StateId, a)] -> StateMap a
fromList xs = StateMap (IM.fromList [ (key s, x) | (s, x) <- xs ])

-- | From the caller's map.
fromMap :: M.Map StateId a -> StateMap a
fromMap m = StateMap (IM.fromDistinctAscList [ (key s, x) | (s, x) <- M.toAscList m ])

-- | To the caller's map.
toMap :: StateMap a -> M.Map StateId a
toMap m = M.fromDistinctAscList (toList m)

-- | The pairs, in the order of the ids.
toList :: StateMap a -> [(StateId, a)]
toList (StateMap m) = [ (unkey k, x) | (k, x) <- IM.toAscList m ]

-- | The ids, in order.
keys :: StateMap a -> [StateId]
keys (StateMap m) = map unkey (IM.keys m)

-- | The values, in the order of their ids.
elems :: StateMap a -> [a]
elems (StateMap m) = IM.elems m

-- | How many states.
size :: StateMap a -> Int
size (StateMap m) = IM.size m

-- | Whether there are none.
null :: StateMap a -> Bool
null (StateMap m) = IM.null m

-- | Whether this state is there.
member :: StateId -> StateMap a -> Bool
member s (StateMap m) = IM.member (key s) m

-- | This state's value, if there.
lookup :: StateId -> StateMap a -> Maybe a
lookup s (StateMap m) = IM.lookup (key s) m

-- | This state's value, or the default.
findWithDefault :: a -> StateId -> StateMap a -> a
findWithDefault d s (StateMap m) = IM.findWithDefault d (key s) m

-- | This state's value; an error naming it if it is not there (a broken
-- invariant of the caller).
(!) :: StateMap a -> StateId -> a
(!) (StateMap m) s = case IM.lookup (key s) m of
  Just x -> x
  Nothing -> error ("Herd.Core.Evolve.StateMap.!: no state " ++ show s)

-- | Set this state's value.
insert :: StateId -> a -> StateMap a -> StateMap a
insert s x (StateMap m) = StateMap (IM.insert (key s) x m)

-- | Set this state's value, combining with the old one (new first).
insertWith :: (a -> a -> a) -> StateId -> a -> StateMap a -> StateMap a
insertWith f s x (StateMap m) = StateMap (IM.insertWith f (key s) x m)

-- | Without this state.
delete :: StateId -> StateMap a -> StateMap a
delete s (StateMap m) = StateMap (IM.delete (key s) m)

-- | Only the values that pass.
filter :: (a -> Bool) -> StateMap a -> StateMap a
filter p (StateMap m) = StateMap (IM.filter p m)

-- | Only the states that pass.
filterWithKey :: (StateId -> a -> Bool) -> StateMap a -> StateMap a
filterWithKey p (StateMap m) = StateMap (IM.filterWithKey (p . unkey) m)

-- | A strict left fold in the order of the ids.
foldlWithKey' :: (b -> StateId -> a -> b) -> b -> StateMap a -> b
foldlWithKey' f z (StateMap m) = IM.foldlWithKey' (\acc k x -> f acc (unkey k) x) z m

-- | Both maps' states; where both have one, the left's value.
union :: StateMap a -> StateMap a -> StateMap a
union (StateMap a) (StateMap b) = StateMap (IM.union a b)

-- | Without the states of the other map.
withoutKeys :: StateMap a -> StateMap b -> StateMap a
withoutKeys (StateMap a) (StateMap b) = StateMap (IM.difference a b)
