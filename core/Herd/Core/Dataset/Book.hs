-- | The master's book of datasets ("Herd.Master.Job.Dataset"): for each
-- dataset its partition count, how it was made (its 'Recipe', to make
-- lost partitions again) and where its partitions are held; and the
-- cluster's placement for each partition count ("Herd.Core.Dataset.Place").
-- Pure.
--
-- Promises: numbers grow, so a dataset's inputs have lower numbers than
-- it ('Herd.Core.Dataset.Place.recoveryPlan' relies on it); a partition
-- is recorded as held only on the worker its placement names.
module Herd.Core.Dataset.Book
  ( Recipe (..)
  , Book
  , emptyBook
  , bookLineage
  , bookRecipe
  , bookParts
  , newDataset
  , placementFor
  , recordHeld
  , forgetHeld
  , releaseDataset
  , setParts
  , setRecipe
  ) where

import qualified Data.ByteString as B
import qualified Data.Map.Strict as M
import Herd.Core.Base (TaskRef, WorkerId)
import Herd.Core.Dataset.Place

-- | How to make a dataset's partitions.
data Recipe
  = FromCaller !(M.Map Int FilePath)
    -- ^ the caller's partitions, each encoded in a file on the master's
    -- disk (kept there, not in memory, to make a lost one again)
  | Generated !TaskRef !B.ByteString       -- ^ partition @j@ made by this generator (with this argument) on its worker
  | Mapped !TaskRef ![DatasetId] !B.ByteString
    -- ^ partition @j@ from partition @j@ of each input, by this function with this argument
  | ShuffledBy !TaskRef !DatasetId         -- ^ every partition from every partition of the input, by this shuffle
  deriving (Eq, Show)

-- | Every dataset of a cluster, and its placements.
data Book = Book
  { bookNodes      :: !(M.Map DatasetId (Node, Recipe))
  , bookPlacements :: !(M.Map Int (M.Map Int WorkerId))   -- ^ partition count -> partition -> worker
  , bookNext       :: !DatasetId
  }

-- | No dataset; the first is number 1 (0 names none on the wire).
emptyBook :: Book
emptyBook = Book M.empty M.empty 1

-- | What recovery plans over.
bookLineage :: Book -> Lineage
bookLineage = M.map fst . bookNodes

-- | How this dataset was made, if it is known.
bookRecipe :: DatasetId -> Book -> Maybe Recipe
bookRecipe d = fmap snd . M.lookup d . bookNodes

-- | This dataset's partition count, if it is known.
bookParts :: DatasetId -> Book -> Maybe Int
bookParts d = fmap (nodeParts . fst) . M.lookup d . bookNodes

-- | A new dataset of this many partitions, nothing held yet.
newDataset :: Int -> Recipe -> Book -> (DatasetId, Book)
newDataset n recipe book = (d, book { bookNodes = M.insert d (Node (originOf recipe) n M.empty, recipe) (bookNodes book), bookNext = d + 1 })
  where
    d = bookNext book
    originOf r = case r of
      FromCaller _ -> Source
      Generated _ _ -> Source
      Mapped _ ins _ -> Narrow ins
      ShuffledBy _ i -> Shuffled i

-- | The placement of @n@ partitions on these live workers: the one kept
-- for @n@, repaired for workers gone, or a new one.
placementFor :: [WorkerId] -> Int -> Book -> (M.Map Int WorkerId, Book)
placementFor live n book = (placed, book { bookPlacements = M.insert n placed (bookPlacements book) })
  where
    placed = case M.lookup n (bookPlacements book) of
      Just old | M.size old == n, not (null live) -> repairPlacement live old
      _ -> placeNew live n

-- | These partitions of the dataset are held now, where the placement says.
recordHeld :: DatasetId -> M.Map Int WorkerId -> Book -> Book
recordHeld d held book = book { bookNodes = M.adjust (\(node, r) -> (node { nodeHeld = M.union held (nodeHeld node) }, r)) d (bookNodes book) }

-- | These partitions of the dataset are no longer held (a worker said so,
-- or a step that made them failed).
forgetHeld :: DatasetId -> [Int] -> Book -> Book
forgetHeld d ps book = book { bookNodes = M.adjust (\(node, r) -> (node { nodeHeld = foldr M.delete (nodeHeld node) ps }, r)) d (bookNodes book) }

-- | The dataset has this many partitions after all (one made from a
-- stream, whose length is known at its end).
setParts :: DatasetId -> Int -> Book -> Book
setParts d n book = book { bookNodes = M.adjust (\(node, r) -> (node { nodeParts = n }, r)) d (bookNodes book) }

-- | The dataset is made by this recipe after all (a source whose files
-- are known once it was read).
setRecipe :: DatasetId -> Recipe -> Book -> Book
setRecipe d r book = book { bookNodes = M.adjust (\(node, _) -> (node, r)) d (bookNodes book) }

-- | The dataset's partitions are dropped; its recipe stays while it may
-- be needed to make a later dataset's partitions again.
releaseDataset :: DatasetId -> Book -> Book
releaseDataset d book = book { bookNodes = M.adjust (\(node, r) -> (node { nodeHeld = M.empty }, r)) d (bookNodes book) }
