-- | Where a dataset's partitions live ("Herd.Master.Job.Dataset"), and
-- how lost ones are made again. Pure.
--
-- Placement: every dataset of @n@ partitions puts partition @j@ on the
-- same worker (the cluster's placement for @n@), so datasets of one
-- partition count are co-partitioned and a zip or a join needs no
-- shuffle. A placement is spread evenly when made and changes only for
-- a worker lost: its partitions go to the live workers holding fewest, the
-- others stay where they are (so the same job run twice moves the same
-- bytes).
--
-- Recovery: each dataset remembers how it was made ('Origin') and where
-- its partitions are held. A partition is missing when its worker is
-- gone (or said it no longer holds it); 'recoveryPlan' lists what to make
-- again, inputs before what reads them: a narrow step's partitions from
-- the same partitions of its inputs, a shuffle's whole output from its
-- whole input, a source's partitions from the caller's bytes or its
-- generator.
module Herd.Core.Dataset.Place
  ( -- * Placement
    placeNew
  , repairPlacement
    -- * Lineage and recovery
  , DatasetId
  , Origin (..)
  , Node (..)
  , Lineage
  , missingOf
  , Redo (..)
  , recoveryPlan
  ) where

import Data.List (foldl', sortOn)
import qualified Data.Map.Strict as M
import qualified Data.Set as S
import Data.Word (Word64)
import Herd.Core.Base (WorkerId)

-- | A placement of @n@ partitions on these workers: round the workers in
-- order, so each holds @n / workers@ or one more.
placeNew :: [WorkerId] -> Int -> M.Map Int WorkerId
placeNew workers n = case S.toList (S.fromList workers) of
  [] -> M.empty
  ws -> M.fromList (zip [0 .. n - 1] (cycle ws))

-- | The placement after losses: partitions on live workers stay; each
-- other one, lowest first, goes to the live worker holding fewest (the
-- lowest on a tie). Empty when no worker is live.
repairPlacement :: [WorkerId] -> M.Map Int WorkerId -> M.Map Int WorkerId
repairPlacement workers placed
  | S.null live = M.empty
  | otherwise = foldl' move kept (M.keys (M.difference placed kept))
  where
    live = S.fromList workers
    kept = M.filter (`S.member` live) placed
    move m j = M.insert j (leastHolding m) m
    leastHolding m =
      let load = M.fromListWith (+) ([ (w, 0 :: Int) | w <- S.toList live ] ++ [ (w, 1) | w <- M.elems m ])
      in snd (head (sortOn id [ (c, w) | (w, c) <- M.toList load ]))

-- | A dataset's number.
type DatasetId = Word64

-- | How a dataset was made.
data Origin
  = Source                 -- ^ from the caller's partitions, or a generator: each partition alone
  | Narrow ![DatasetId]    -- ^ partition @j@ from partition @j@ of each of these
  | Shuffled !DatasetId    -- ^ every partition from every partition of this one
  deriving (Eq, Show)

-- | A dataset as the recovery plan sees it.
data Node = Node
  { nodeOrigin :: !Origin
  , nodeParts  :: !Int
  , nodeHeld   :: !(M.Map Int WorkerId)   -- ^ the partitions held, and where
  } deriving (Eq, Show)

-- | Every dataset still known, by number.
type Lineage = M.Map DatasetId Node

-- | The partitions of a dataset that are not held on a live worker.
missingOf :: (WorkerId -> Bool) -> Node -> S.Set Int
missingOf live node = S.fromList [ j | j <- [0 .. nodeParts node - 1], maybe True (not . live) (M.lookup j (nodeHeld node)) ]

-- | One thing to make again: these partitions of this dataset (all of
-- them, for a shuffle).
data Redo = Redo
  { redoDataset    :: !DatasetId
  , redoPartitions :: ![Int]
  } deriving (Eq, Show)

-- | What to make again, in order, so that the listed partitions of the
-- dataset are held on live workers: each dataset at most once, in the
-- order of their numbers (a dataset's inputs were made before it, so
-- have lower numbers). A dataset not in the lineage needs nothing (its
-- steps fail naming it).
recoveryPlan :: (WorkerId -> Bool) -> Lineage -> DatasetId -> [Int] -> [Redo]
recoveryPlan live lineage target wanted =
  [ Redo d (S.toList ps) | (d, ps) <- M.toAscList (go M.empty [(target, S.fromList wanted)]) ]
  where
    go asked [] = asked
    go asked ((d, want) : rest) = case M.lookup d lineage of
      Nothing -> go asked rest
      Just node ->
        let already = M.findWithDefault S.empty d asked
            fresh = S.difference (S.intersection want (missingOf live node)) already
            everyOf n = S.fromList [0 .. nodeParts n - 1]
        in if S.null fresh then go asked rest else
             let redo = case nodeOrigin node of
                   Shuffled _ -> everyOf node
                   _ -> S.union already fresh
                 inputs = case nodeOrigin node of
                   Source -> []
                   Narrow ins -> [ (i, fresh) | i <- ins ]
                   Shuffled i -> [ (i, maybe S.empty everyOf (M.lookup i lineage)) ]
             in go (M.insert d redo asked) (inputs ++ rest)
