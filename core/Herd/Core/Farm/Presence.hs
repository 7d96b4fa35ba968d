-- | What the scheduler records of each worker during one job, and the
-- statistics it reports from that: tasks, batches, busy time as the worker
-- measured it, and waiting time (present during the job, not computing).
-- Pure.
module Herd.Core.Farm.Presence
  ( WorkerStats (..)
  , JobStats (..)
  , Presence
  , presentFrom
  , joined
  , left
  , credited
  , jobStatsOf
  ) where

import qualified Data.Map.Strict as M
import Data.Maybe (fromMaybe, isJust)
import Herd.Core.Base (WorkerId)

-- | What one worker did during a job.
data WorkerStats = WorkerStats
  { statWorker   :: !WorkerId
  , statTasks    :: !Int     -- ^ tasks whose results were accepted
  , statBatches  :: !Int     -- ^ batches accepted
  , statBusy     :: !Double  -- ^ seconds spent computing, as the worker measured
  , statWaiting  :: !Double  -- ^ seconds present during the job but not computing
  , statLost     :: !Bool    -- ^ the worker was lost during the job
  } deriving (Eq, Show)

-- | Statistics of a finished job.
data JobStats = JobStats
  { jobElapsed     :: !Double          -- ^ seconds from submission to the last result
  , jobTaskCount   :: !Int
  , jobWorkerStats :: ![WorkerStats]   -- ^ by worker number
  } deriving (Eq, Show)

-- One worker's part in a job.
data Attended = Attended
  { attFrom    :: !Double
  , attUntil   :: !(Maybe Double)
  , attTasks   :: !Int
  , attBatches :: !Int
  , attBusy    :: !Double
  } deriving (Show)

-- | Each worker's part in one job.
newtype Presence = Presence (M.Map WorkerId Attended)
  deriving (Show)

-- | These workers, present from this time.
presentFrom :: Double -> [WorkerId] -> Presence
presentFrom now ws = Presence (M.fromList [ (w, Attended now Nothing 0 0 0) | w <- ws ])

-- | A worker joined (or came back) at this time.
joined :: Double -> WorkerId -> Presence -> Presence
joined now w (Presence m) = Presence (M.insertWith (\_ old -> old { attUntil = Nothing }) w (Attended now Nothing 0 0 0) m)

-- | A worker was lost at this time.
left :: Double -> WorkerId -> Presence -> Presence
left now w (Presence m) = Presence (M.adjust (\a -> a { attUntil = Just now }) w m)

-- | A worker's batch of this many tasks was accepted, after this many
-- seconds of computing.
credited :: WorkerId -> Int -> Double -> Presence -> Presence
credited w tasks busy (Presence m) = Presence (M.adjust add w m)
  where add a = a { attTasks = attTasks a + tasks, attBatches = attBatches a + 1, attBusy = attBusy a + max 0 busy }

-- | The statistics of a job that started at the given time and had this
-- many tasks, as of now.
jobStatsOf :: Double -> Double -> Int -> Presence -> JobStats
jobStatsOf now start total (Presence m) = JobStats
  { jobElapsed = now - start
  , jobTaskCount = total
  , jobWorkerStats = [ WorkerStats w (attTasks a) (attBatches a) (attBusy a)
                                   (max 0 (fromMaybe now (attUntil a) - attFrom a - attBusy a))
                                   (isJust (attUntil a))
                     | (w, a) <- M.toList m ]
  }
