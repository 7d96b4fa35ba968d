-- | Statistics of a farm run, as values and as a table.
--
-- Per worker: tasks done, batches, busy time (measured by the worker around
-- its computation) and waiting time (the rest of the time it was present
-- during the job: waiting for work or for the network). Waiting time is
-- the figure that showed FP Complete where their master stalled.
module Herd.Stats
  ( JobStats (..)
  , WorkerStats (..)
  , renderStats
  , totalBusy
  ) where

import Herd.Report (fixed, renderTable)
import Herd.Scheduler (JobStats (..), WorkerStats (..))

-- | Busy seconds summed over workers.
totalBusy :: JobStats -> Double
totalBusy = sum . map statBusy . jobWorkerStats

-- | A table of per-worker statistics, with a header line.
renderStats :: JobStats -> String
renderStats s =
  "tasks " ++ show (jobTaskCount s) ++ " in " ++ fixed 3 (jobElapsed s) ++ " s\n" ++
  renderTable ["worker", "tasks", "batches", "busy s", "waiting s", "busy %", "note"]
    [ [ show (statWorker w), show (statTasks w), show (statBatches w), fixed 3 (statBusy w)
      , fixed 3 (statWaiting w)
      , fixed 1 (100 * statBusy w / max 1e-9 (statBusy w + statWaiting w))
      , if statLost w then "lost" else "" ]
    | w <- jobWorkerStats s ]
