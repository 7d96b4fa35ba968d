-- | Partitioned datasets that stay on the workers: partitions made on
-- the workers or from the caller's values, narrow steps and shuffles
-- that leave their results where they run, and queries whose small
-- answers are all that comes back. See "Herd.Master.Job.Dataset" for
-- the promises, and the guide's section on datasets.
--
-- > {-# LANGUAGE StaticPointers #-}
-- > rows   :: StaticPtr (DatasetGen Int [Int])
-- > rows   = static (partitionGen (\top n j -> [j, j + n .. top]))   -- top level, not in Main
-- > counts :: StaticPtr (Shuffler [Int] [(Int, Int)] (Map Int Int))
-- > counts = static (keyedShuffler (\x -> [(x `mod` 10, 1)]) (+))
-- > sizes  :: StaticPtr (DatasetQuery (Map Int Int) () Int)
-- > sizes  = static (partitionQuery (\m () -> sum m))
-- >
-- > ds <- generateDataset cluster rows 999 8      -- held on the workers
-- > byDigit <- shuffleDataset cluster counts 4 ds -- worker to worker
-- > total <- sum <$> queryDataset cluster sizes () byDigit
module Herd.Dataset
  ( -- * Datasets
    Dataset
  , datasetPartitions
    -- * Making datasets
  , fromPartitions
  , generateDataset
  , DatasetGen
  , partitionGen
  , readDataset
  , partitionRead
    -- * Narrow steps: where the partitions are
  , mapDataset
  , DatasetMap
  , partitionMap
  , zipDatasets
  , DatasetZip
  , partitionZip
    -- * Shuffles: worker to worker
  , shuffleDataset
  , Shuffler
  , shuffler
  , keyedShuffler
    -- * Answers
  , queryDataset
  , DatasetQuery
  , partitionQuery
  , collectDataset
  , releaseDatasets
    -- * What a call cost
  , Traffic (..)
  , withTraffic
    -- * Once on every worker
  , runOnEveryWorker
  , EveryWorker
  , onEachWorker
  ) where

import Herd.Master.Job.Dataset
import Herd.Task.Partition
import Herd.Master.Job.Traffic
import Herd.Master.Job.EveryWorker
