-- | One narrow step of a dataset ("Herd.Master.Job.Dataset"), as the
-- master's core runs it: a partition function run on each listed
-- partition, each on the worker the dataset layer placed it on (where
-- its inputs are held), every answer gathered. Nothing moves: a step
-- whose worker is lost, or no longer holds an input, ends with
-- 'PartitionsLost' for the layer to recompute and try again.
--
-- Pure. Promises (checked in "DatasetPlanSpec"): a step ends exactly
-- once; it succeeds only with one answer from each listed partition's
-- worker, in partition order; a message from another worker, or for a
-- partition already answered, changes nothing.
module Herd.Core.Dataset.Stage
  ( StageJob (..)
  , StageRun (..)
  , Stage
  , SOut (..)
  , stageStart
  , stageMessage
  , stageLost
  , stageOf
  , stageView
  ) where

import qualified Data.ByteString as B
import qualified Data.Map.Strict as M
import qualified Data.Text as T
import Data.Word (Word64)
import Herd.Core.Base (TaskRef (..), WorkerId)
import Herd.Core.Error (HerdError (..))
import Herd.Core.Wire (FromWorker (..), ToWorker (..))

-- | A step as the dataset layer hands it to the core.
data StageJob = StageJob
  { sjRef  :: !TaskRef      -- ^ the partition function ("Herd.Task.Partition")
  , sjRuns :: ![StageRun]   -- ^ one per partition, distinct partitions
  } deriving (Eq, Show)

-- | One partition's run.
data StageRun = StageRun
  { srPartition :: !Int
  , srWorker    :: !WorkerId      -- ^ where its inputs are held
  , srInputs    :: ![Word64]      -- ^ the datasets whose partition it reads
  , srOutput    :: !Word64        -- ^ the dataset it makes a partition of (0: none)
  , srArgument  :: !B.ByteString
  } deriving (Eq, Show)

-- | A step running.
data Stage = Stage
  { stRef     :: !TaskRef
  , stPending :: !(M.Map Int WorkerId)
  , stAnswers :: !(M.Map Int B.ByteString)
  } deriving (Eq, Show)

-- | What the core must do for a step.
data SOut
  = SSend !WorkerId !ToWorker
  | SEnded !(Either HerdError [B.ByteString])
    -- ^ the step is over: each partition's answer, in partition order, or why not
  deriving (Eq, Show)

-- | Start the step on these live workers; 'Nothing' once it is over
-- (at once when a run's worker is not live, or there is no run).
stageStart :: Word64 -> StageJob -> [WorkerId] -> (Maybe Stage, [SOut])
stageStart sid job live = case [ srPartition r | r <- sjRuns job, srWorker r `notElem` live ] of
  [] | null (sjRuns job) -> (Nothing, [SEnded (Right [])])
     | otherwise -> ( Just (Stage (sjRef job) (M.fromList [ (srPartition r, srWorker r) | r <- sjRuns job ]) M.empty)
                    , [ SSend (srWorker r) (PartRun sid (fromIntegral (srPartition r)) (sjRef job) (srInputs r) (srOutput r) (srArgument r))
                      | r <- sjRuns job ] )
  lost -> (Nothing, [SEnded (Left (PartitionsLost (refName (sjRef job)) lost "their workers are gone"))])

-- | The step a worker's message belongs to, if it is a step's.
stageOf :: FromWorker -> Maybe Word64
stageOf msg = case msg of
  PartRan sid _ _ -> Just sid
  PartThrew sid _ _ -> Just sid
  PartMissing sid _ -> Just sid
  _ -> Nothing

-- | A worker's word.
stageMessage :: WorkerId -> FromWorker -> Stage -> (Maybe Stage, [SOut])
stageMessage w msg st = case msg of
  PartRan _ j answer | ours j ->
    let st' = st { stPending = M.delete (fromIntegral j) (stPending st), stAnswers = M.insert (fromIntegral j) answer (stAnswers st) }
    in if M.null (stPending st') then (Nothing, [SEnded (Right (M.elems (stAnswers st')))]) else (Just st', [])
  PartThrew _ j why | ours j -> (Nothing, [SEnded (Left (TaskFailed (fromIntegral j) (refName (stRef st)) (T.unpack why)))])
  PartMissing _ j | ours j -> (Nothing, [SEnded (Left (PartitionsLost (refName (stRef st)) [fromIntegral j] ("worker " ++ show w ++ " no longer holds an input")))])
  _ -> (Just st, [])
  where ours j = M.lookup (fromIntegral j) (stPending st) == Just w

-- | A worker was lost: the step ends if it had a partition not answered.
stageLost :: WorkerId -> String -> Stage -> (Maybe Stage, [SOut])
stageLost w why st = case [ j | (j, o) <- M.toList (stPending st), o == w ] of
  [] -> (Just st, [])
  lost -> (Nothing, [SEnded (Left (PartitionsLost (refName (stRef st)) lost why))])

-- | What a watcher is shown: the function, the partitions not answered,
-- and their workers.
stageView :: Stage -> (String, Int, [WorkerId])
stageView st = (refName (stRef st), M.size (stPending st), M.elems (M.fromList [ (o, o) | o <- M.elems (stPending st) ]))
