{-# LANGUAGE BangPatterns #-}
-- | What the master keeps of an evolve population between calls: where
-- each state lives, what its next step is expected to cost, and how to
-- make it again if its worker is lost (its lineage back to bytes the master
-- has seen). Pure.
module Herd.Core.Evolve.Registry
  ( StateId (..)
  , stateIdBits
  , Registry (..)
  , Placed (..)
  , placedAt
  , costOr
  , emptyRegistry
  , refIdBase
  , Origin (..)
  , lineage
  , lineageDepth
  , pruneOrigins
  , keepOrigins
  , needsTelling
  , toldAfter
  ) where

import qualified Data.ByteString as B
import Data.List (foldl')
import Herd.Core.Evolve.StateMap (StateId (..), StateMap, stateIdBits)
import qualified Herd.Core.Evolve.StateMap as SM
import qualified Data.IntSet as IS
import qualified Data.Set as S
import Data.Word (Word64)
import Herd.Core.Base (TaskRef, WorkerId)

-- | Where every state of a cluster's population lives, what its next
-- evolution is expected to cost, and how to make it again; kept by the
-- master between calls.
data Registry = Registry
  { regStates   :: !(StateMap Placed)   -- ^ every live state: where it is, what its making cost
  , regMeanCost :: !(Maybe Double)          -- ^ mean step time of the last call
  , regRoundTrip :: !(Maybe Double)
    -- ^ how long asking a state back took, as last measured (seconds)
  , regNextId   :: !Word64                  -- ^ next id for an uploaded state
  , regOrigin   :: StateMap Origin
    -- ^ for live states and the ancestors they need (and, until the next
    -- pruning, some they no longer need); lazy, so that a pruning due
    -- after a call runs during the next one ('keepOrigins')
  , regDepth    :: !Int
    -- ^ at least the steps of the longest lineage (calls since the master
    -- last saw the live states' bytes): checkpoints are due past a bound
  , regPruned   :: Int
    -- ^ origins kept by the last pruning ('keepOrigins'; lazy with them)
  , regTold     :: !(Maybe (TaskRef, S.Set WorkerId))
    -- ^ the evolve function the workers were last told, and which workers
    -- have it: a call names it only to the others (a worker keeps its
    -- function, and telling 2048 workers again each call cost the first
    -- dispatch 2048 messages)
  , regAbandoned :: !(S.Set StateId)
    -- ^ states of calls that failed: their workers may still be evolving
    -- them, and later calls ignore what they say of them
  , regHosted :: !Bool
    -- ^ the states are placed on hosts, not workers: each host agent
    -- schedules its own ("Herd.Core.Evolve.Hosts"; 'placedOn' is the
    -- host link's number)
  } deriving (Eq, Show)

-- | Where a live state is, and the measured time of the step that made
-- it (0 or less: not measured). One map for both: an answer moves a
-- state's entry once, where two maps took two deletes and two inserts
-- (a large share of the core's allocation per state, by @herd bench
-- evolvecore@).
data Placed = Placed
  { placedOn   :: !WorkerId
  , placedCost :: !Double
  } deriving (Eq, Show)

-- | Live states on these workers, their costs not measured.
placedAt :: [(StateId, WorkerId)] -> StateMap Placed
placedAt xs = SM.fromList [ (s, Placed w 0) | (s, w) <- xs ]

-- | A state's measured cost if it has one, else the given default.
costOr :: Double -> Maybe Placed -> Double
costOr _ (Just p) | placedCost p > 0 = placedCost p
costOr fallback _ = fallback

-- | No states.
emptyRegistry :: Registry
emptyRegistry = Registry SM.empty Nothing Nothing 1 SM.empty 0 0 Nothing S.empty False

-- | The first id of a second population's uploads (the Refs'): 2^63,
-- above every id the first population uploads (from 1) and every id a
-- worker makes (its number, below 2^23, above 'stateIdBits'), so the two
-- populations' states never share an id on a worker.
refIdBase :: Word64
refIdBase = 2 ^ (63 :: Int)

-- | How a state came to be, so that it can be made again if its worker is
-- lost: the master saw its bytes (uploaded, or moved through the master),
-- or it is a child of another state.
data Origin
  = Seen !B.ByteString
  | ChildOf !StateId !TaskRef !B.ByteString !Int
    -- ^ the parent, the evolve function and the parent's input, and the
    -- child's position among the parent's children
  deriving (Eq, Show)

-- | The bytes to start from and the steps to replay to make a state again,
-- oldest first; 'Nothing' when some ancestor's origin is unknown.
lineage :: StateMap Origin -> StateId -> Maybe (B.ByteString, [(TaskRef, B.ByteString, Int)])
lineage origins = go []
  where
    go path s = case SM.lookup s origins of
      Just (Seen bytes) -> Just (bytes, path)
      Just (ChildOf parent ref input k) -> go ((ref, input, k) : path) parent
      Nothing -> Nothing

-- | The steps a recovery of this state would replay (0 for one whose
-- bytes the master has seen, or whose origin is unknown).
lineageDepth :: StateMap Origin -> StateId -> Int
lineageDepth origins = go 0
  where
    go !n s = case SM.lookup s origins of
      Just (ChildOf parent _ _ _) -> go (n + 1) parent
      _ -> n

-- | Keep only the origins these states need.
pruneOrigins :: [StateId] -> StateMap Origin -> StateMap Origin
pruneOrigins live origins = SM.filterWithKey (\s _ -> IS.member (key s) needed) origins
  where
    -- an IntSet of the ids (a Word64 fits an Int's bits): the walk runs
    -- between two calls, on the caller's path, once per live state
    needed = foldl' visit IS.empty live
    key (StateId w) = fromIntegral w :: Int
    visit seen s
      | IS.member (key s) seen = seen
      | otherwise = case SM.lookup s origins of
          Just (ChildOf parent _ _ _) -> visit (IS.insert (key s) seen) parent
          Just (Seen _) -> IS.insert (key s) seen
          Nothing -> seen

-- | Install a call's origins, given where the live states are: pruned to
-- what their lineages need once they have grown past twice what the last
-- pruning kept (or twice the live states), else kept whole, dead branches
-- and all. Pruning walks every live lineage, which on the caller's path
-- each call grew with the calls made; pruning on doubling costs amortized
-- time proportional to what a call
-- adds, and at most doubles the memory. The pruning is left unevaluated:
-- the next call's first answer runs it, in the master's loop, while every
-- worker has work queued ("Herd.Core.Evolve.Call").
keepOrigins :: StateMap a -> StateMap Origin -> Registry -> Registry
keepOrigins live origins reg
  | SM.size origins > 2 * max (SM.size live) (regPruned reg) =
      let pruned = pruneOrigins (SM.keys live) origins
      in reg { regOrigin = pruned, regPruned = SM.size pruned }
  | otherwise = reg { regOrigin = origins }

-- | Whether a worker must be told this evolve function before it is asked
-- to evolve with it.
needsTelling :: TaskRef -> Registry -> WorkerId -> Bool
needsTelling ref reg w = case regTold reg of
  Just (told, ws) | told == ref -> not (S.member w ws)
  _ -> True

-- | Who has this function after a call that told these workers (or found
-- them told).
toldAfter :: TaskRef -> [WorkerId] -> Registry -> Maybe (TaskRef, S.Set WorkerId)
toldAfter ref ws reg = case regTold reg of
  Just (told, before) | told == ref -> Just (ref, S.union before (S.fromList ws))
  _ -> Just (ref, S.fromList ws)
