-- | The errors herd reports to its callers.
--
-- Every failure a caller can see is one constructor of 'HerdError', thrown
-- as an exception from the API call that hit it. Each carries enough to act
-- on: the task index, the function's name, the worker, or the offending
-- setting.
module Herd.Core.Error
  ( HerdError (..)
  ) where

import Control.Exception (Exception (..))

-- | Something went wrong in a herd call.
data HerdError
  = TaskFailed
      { failedTaskIndex :: !Int      -- ^ position of the task in the input list (from 0)
      , failedFunction  :: !String   -- ^ the static function's name
      , failedMessage   :: !String   -- ^ the exception the function threw, shown
      }
    -- ^ The user's function threw an exception on one task.
  | JobKilledWorkers
      { jobKilledDeaths   :: !Int     -- ^ workers that died while running its tasks
      , jobKilledFunction :: !String  -- ^ the static function's name
      , jobKilledLastWhy  :: !String  -- ^ how the last of them was lost
      }
    -- ^ So many workers died while running a farm's tasks, each charged to
    -- tasks not yet named, that the job stopped
    -- ('Herd.Settings.configMaxJobDeaths'). The cluster stays usable.
  | TaskKilledWorkers
      { killerTaskIndex :: !Int      -- ^ position of the task in the input list (from 0)
      , killerFunction  :: !String   -- ^ the static function's name
      , killerDeaths    :: !Int      -- ^ workers that died while running it
      , killerLastWhy   :: !String   -- ^ how the last of them was lost
      }
    -- ^ Workers kept dying while running one task (a crash in a C library,
    -- the out-of-memory killer, an exit): after
    -- 'Herd.Settings.configMaxTaskDeaths' deaths it is not tried again. The
    -- cluster stays usable; lost local workers are restarted.
  | RemoteFunctionError
      { remoteFunction :: !String    -- ^ the static function's name
      , remoteReason   :: !String    -- ^ why the worker refused it
      }
    -- ^ A worker could not run the function: its static key is unknown to
    -- the worker's binary, or its argument and result types differ.
  | AllWorkersLost
      { lostDetail :: !String }
    -- ^ Every worker went away while work remained.
  | NoWorkers
    -- ^ A job was submitted to a cluster that has no worker.
  | ResultDecodeError
      { decodeTaskIndex :: !Int, decodeFunction :: !String, decodeReason :: !String }
    -- ^ A result came back that does not decode as the function's result type.
  | ConfigError
      { configField :: !String, configReason :: !String }
    -- ^ A configuration value, flag or environment variable is invalid.
  | LaunchError
      { launchReason :: !String }
    -- ^ Workers could not be started or did not connect in time.
  | ClusterClosed
    -- ^ The cluster was used after 'Herd.withCluster' returned.
  | ArgumentError
      { argumentTaskIndex :: !Int, argumentFunction :: !String, argumentMessage :: !String }
    -- ^ Evaluating or encoding one of the caller's arguments threw.
  | StreamFailed
      { streamFunction :: !String, streamReason :: !String }
    -- ^ A stream process failed: its function threw, its worker was lost,
    -- or it could not be started.
  | EvolveFailed
      { evolveFunction :: !String, evolveState :: !String, evolveReason :: !String }
    -- ^ The evolve function threw on a state (named), or its state or input
    -- did not decode. The population is gone: call 'Herd.Master.Job.Evolve.resetStates'.
  | UnknownStates
      { unknownStates :: ![String] }
    -- ^ 'Herd.Master.Job.Evolve.evolveMany' was given states that do not exist (never
    -- made, already evolved, or lost); nothing was run.
  | StatesLost
      { lostStates :: ![String], lostReason :: !String }
    -- ^ These states were on workers that were lost. The rest of the
    -- population is gone too: call 'Herd.Master.Job.Evolve.resetStates'.
  | PartitionsLost
      { lostFunction :: !String, lostPartitions :: ![Int], lostWhy :: !String }
    -- ^ A dataset step ("Herd.Master.Job.Dataset") needed these partitions
    -- and their worker was lost, or no longer holds them. The dataset
    -- layer recomputes them from their lineage and runs the step again; a
    -- caller sees this only when that keeps failing.
  | ForeignHandle
      { foreignHandle :: !String, foreignOwner :: !String, foreignCluster :: !String }
    -- ^ A handle (a 'Herd.Master.Job.Refs.Ref', a shared value, a state id)
    -- made by one cluster was given to another: which handle, the cluster
    -- that made it, and the one it was given to. Nothing was run.
  deriving (Eq)

-- | 1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, ..., 21st.
ordinal :: Int -> String
ordinal n = show n ++ suffix
  where
    suffix | n `mod` 100 `elem` [11, 12, 13] = "th"
           | otherwise = case n `mod` 10 of { 1 -> "st"; 2 -> "nd"; 3 -> "rd"; _ -> "th" }

-- | The sentence 'displayException' gives, not the record: GHC 9.0 prints
-- an uncaught exception with 'show', so a program that does not catch a
-- 'HerdError' still tells its user what went wrong in words.
instance Show HerdError where
  showsPrec _ e = showString (displayException e)

instance Exception HerdError where
  displayException err = case err of
    TaskFailed i f m -> "herd: task " ++ position i ++ " of " ++ f ++ " failed: " ++ m
    TaskKilledWorkers i f d w -> "herd: task " ++ position i ++ " of " ++ f ++ " was running on " ++ show d
      ++ " workers that died (the last: " ++ w ++ "); it is not tried again"
    JobKilledWorkers d f w -> "herd: the farm of " ++ f ++ " stopped after " ++ show d
      ++ " workers died running its tasks (the last: " ++ w ++ "; configMaxJobDeaths)"
    RemoteFunctionError f r -> "herd: worker cannot run " ++ f ++ ": " ++ r
    AllWorkersLost d -> "herd: every worker was lost before the job finished (" ++ d ++ ")"
    NoWorkers -> "herd: the cluster has no workers"
    ResultDecodeError i f r -> "herd: result of task " ++ position i ++ " of " ++ f ++ " does not decode: " ++ r
    ConfigError f r -> "herd: invalid " ++ f ++ ": " ++ r
    LaunchError r -> "herd: could not start workers: " ++ r
    ClusterClosed -> "herd: the cluster is closed"
    ArgumentError i f m -> "herd: argument " ++ position i ++ " for " ++ f ++ " cannot be encoded: " ++ m
    StreamFailed f r -> "herd: stream process " ++ f ++ " failed: " ++ r
    EvolveFailed f st r -> "herd: evolving state " ++ st ++ " with " ++ f ++ " failed: " ++ r
    UnknownStates ss -> "herd: no such states: " ++ listSome ss
    StatesLost ss r -> "herd: states lost with their worker (" ++ r ++ "): " ++ listSome ss
      ++ "; the population must be reset"
    PartitionsLost f ps r -> "herd: " ++ f ++ " lost partitions " ++ unwords (map show (take 20 ps))
      ++ (if length ps > 20 then " and " ++ show (length ps - 20) ++ " more" else "") ++ ": " ++ r
    ForeignHandle h owner here -> "herd: " ++ h ++ " belongs to " ++ owner ++ ", not to " ++ here
      ++ ", which it was given to; a handle is used only with the cluster that made it"
    where
      -- indices count from 0; the ordinal says which input that is
      position i = show i ++ " (the " ++ ordinal (i + 1) ++ " input)"
      listSome ss = unwords (take 20 ss) ++ (if length ss > 20 then " and " ++ show (length ss - 20) ++ " more" else "")
