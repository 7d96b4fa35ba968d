-- | A worker's states that it holds and has not been asked to evolve yet,
-- as the evolve scheduler ("Herd.Core.Evolve.Plan") keeps them: costliest
-- first, ties by state, so the order is total and a moved state lands in
-- its place. Pure.
module Herd.Core.Evolve.Unstarted
  ( Held
  , heldFromList
  , heldToList
  , heldSize
  , heldNull
  , heldInsert
  , heldTake
  , longestFirst
  ) where

import Data.List (sortBy)
import Data.Ord (Down (..))
import qualified Data.Set as S
import Herd.Core.Evolve.Registry (StateId)

-- | A worker's states to evolve that it has not been asked for yet, with
-- their estimated costs, costliest first (ties by state). A set, not a
-- sorted list: a state moved to a worker is inserted in its place, and
-- its size is known at once; re-sorting a list of thousands for each
-- moved state made a call that moved thousands quadratic.
newtype Held = Held (S.Set (Down Double, StateId))
  deriving (Eq, Show)

-- | The held states of these (cost, state) pairs.
heldFromList :: [(Double, StateId)] -> Held
heldFromList xs = Held (S.fromList [ (Down c, s) | (c, s) <- xs ])

-- | Costliest first.
heldToList :: Held -> [(Double, StateId)]
heldToList (Held set) = [ (c, s) | (Down c, s) <- S.toAscList set ]

-- | How many states are held.
heldSize :: Held -> Int
heldSize (Held set) = S.size set

-- | Whether none is.
heldNull :: Held -> Bool
heldNull (Held set) = S.null set

-- | Hold one more state.
heldInsert :: Double -> StateId -> Held -> Held
heldInsert c s (Held set) = Held (S.insert (Down c, s) set)

-- | The costliest @n@ states, and the rest.
heldTake :: Int -> Held -> ([(Double, StateId)], Held)
heldTake n (Held set)
  | n <= 0 = ([], Held set)
  | n == 1 = case S.minView set of   -- the common case: one state refills a queue
      Just ((Down c, s), rest) -> ([(c, s)], Held rest)
      Nothing -> ([], Held set)
  | otherwise =
      let (front, rest) = S.splitAt n set
      in ([ (c, s) | (Down c, s) <- S.toAscList front ], Held rest)

-- | Costliest first; ties by state, so the order is total.
longestFirst :: [(Double, StateId)] -> [(Double, StateId)]
longestFirst = sortBy (\(c1, s1) (c2, s2) -> compare c2 c1 <> compare s1 s2)
