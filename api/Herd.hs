-- | herd: run a pure function over a lot of work on every core, and on
-- many machines, as separate GHC runtimes (one pinned to each physical
-- core) that a master coordinates by message passing. One runtime stops
-- scaling near 8-10 cores; many runtimes do not.
--
-- = A complete program
--
-- The function goes in a module other than @Main@, as a 'Task' inside a
-- @static@ form at top level (GHC can fail to link a @static@ form in
-- @Main@ under @-O@):
--
-- > {-# LANGUAGE StaticPointers #-}
-- > module Work (collatzTask) where
-- >
-- > import GHC.StaticPtr (StaticPtr)
-- > import Herd
-- >
-- > collatzSteps :: Int -> Int
-- > collatzSteps = go 0
-- >   where go steps 1 = steps
-- >         go steps k = go (steps + 1) (if even k then k `div` 2 else 3 * k + 1)
-- >
-- > collatzTask :: StaticPtr (Task Int Int)
-- > collatzTask = static (named "collatzSteps" (task collatzSteps))
--
-- and @main@ is one call, 'Herd.Options.herdMain', which gives the program
-- herd's command-line flags (@--workers@, @--hosts@, @--slurm@, @--tls@,
-- @--dashboard@ ...) beside its own:
--
-- > module Main (main) where
-- >
-- > import Herd
-- > import Herd.Options (herdMain)
-- > import Options.Applicative
-- > import Work (collatzTask)
-- >
-- > main :: IO ()
-- > main = herdMain "The longest Collatz sequence below 100000" (pure 100000) $ \n cluster -> do
-- >   steps <- farm cluster collatzTask [1 .. n - 1]
-- >   print (maximum (zip steps [1 :: Int ..]))
--
-- Link it with @-threaded -rtsopts@. The same executable is master and
-- worker: the master starts its workers by running the executable again,
-- and in those processes 'Herd.Options.herdMain' (or 'withCluster')
-- serves the master and never runs your code. Anything @main@ does
-- before 'withCluster' runs in every worker too; 'Herd.Options.herdMain'
-- is the whole of @main@ so that nothing can, and a program that needs
-- its own start calls 'serveIfWorker' first thing.
--
-- Arguments and results cross the wire with @store@: your own types need
-- 'Data.Store.Store' instances (@instance Store T@ with a 'GHC.Generics.Generic'
-- instance is enough).
--
-- = What herd promises
--
-- * No result is lost or duplicated: each task's result is delivered
--   exactly once; a lost worker's unfinished tasks run on another.
-- * A task that kills its workers is named ('TaskKilledWorkers') after
--   'Herd.Config.configMaxTaskDeaths' deaths, not retried forever.
-- * No caller waits forever: if every worker is lost and none is coming
--   back, the call throws; every call is answered exactly once.
-- * No worker process is leaked: workers exit when the master does, even
--   when it is killed with SIGKILL.
-- * Nobody joins without the secret: every connection proves a shared
--   secret (mutual HMAC-SHA256) before anything else it sends is read, and
--   nothing from a peer is decoded before it passes the handshake.
--
-- = Where to read on
--
-- The guide (@docs/guide.md@) walks through the API by task; operations
-- (@docs/operations.md@) covers launching on clusters, secrets and TLS,
-- the dashboard and tuning. Settings are in "Herd.Config", statistics and
-- the live status in "Herd.Monitor", the command line in "Herd.Options".
module Herd
  ( -- * Starting a cluster
    -- | 'withCluster' starts the master and its workers and runs the body
    -- with the cluster; 'Herd.Options.herdMain' does the same from the
    -- command line. Its settings, a plain record, are in "Herd.Config";
    -- statistics, the status and the dashboard in "Herd.Monitor".
    withCluster
  , Config
  , defaultConfig
  , Cluster
  , clusterAddress
  , clusterJoinCommand
  , clusterWorkerCount
  , clusterWorkerInfo
  , WorkerInfo (..)
  , waitForWorkers
  , serveIfWorker
    -- ** Settings for some calls
  , CallSettings (..)
  , callSettings
  , withCallSettings
    -- * Tasks: the functions workers run
    -- | Each kind of function (a 'Task', a 'Process', an 'Evolver', a
    -- 'RefTask', a 'Reducer') is built by its own function inside a
    -- @static@ form, and 'named' names any of them.
  , Task
  , task
  , showingInputs
  , named
  , simulatedWork
    -- * Farms: a function over a list
    -- | 'farm' gives results in input order and fails with the first task
    -- that fails; 'farmEither' gives each task its own answer;
    -- 'farmAsCompleted' hands results over as they arrive
    -- ('Herd.Monitor.farmMeasured' also measures it).
  , farm
  , farmAsCompleted
  , farmEither
    -- * Shared values: sent once to every worker, taken by handle
    -- | 'share' sends a value to every worker once (and to every worker
    -- that joins later); tasks take the 'Shared' handle in their argument
    -- and read the value with 'sharedValue', decoded once per worker.
  , Shared
  , sharedValue
  , share
  , unshare
  , withShared
    -- * Results that stay on the workers
    -- | 'farmRefs' leaves each result on the worker that made it, behind a
    -- 'Ref' ('putRefs' holds values as they are); 'mapRefs' runs a function
    -- where each value lives and leaves its result there ('mapRefsWith'
    -- with an argument per value); 'queryRefs' brings the result back; 'fetch' and 'fetchMany' bring values back; 'release'
    -- and 'releaseMany' drop them. A value lost with its worker is
    -- recomputed from the task and input that made it. A 'Ref' belongs to
    -- the cluster that made it; another refuses it ('ForeignHandle').
  , Ref
  , RefTask
  , RefCodecs
  , refTask
  , putRefs
  , farmRefs
  , mapRefs
  , RefTaskWith
  , RefWithCodecs
  , refTaskWith
  , mapRefsWith
  , RefQuery
  , QueryCodecs
  , refQuery
  , queryRefs
  , fetch
  , fetchMany
  , release
  , releaseMany
    -- * Reductions combined on the workers
    -- | 'farmReduce' combines the results with an associative function,
    -- 'reduceByKey' per key; each worker combines whole groups of inputs,
    -- the workers exchange partitions of the keys, and only the final
    -- value or maps come back.
  , Reducer
  , reducer
  , farmReduce
  , KeyedReducer
  , keyedReducer
  , reduceByKey
    -- * Stream processes: a list function on a worker, element by element
  , Process
  , process
  , withStream
  , instantiate
    -- * Stateful evolution: states kept on the workers between calls
    -- | The particle filter's API: 'resetStates' spreads states over the
    -- workers, 'evolveMany' steps those you give inputs to, and only the
    -- step's outputs come back. The @With@ forms take per-call options.
  , Evolve
  , Evolver
  , evolver
  , StateId
  , stateIdWord
  , resetStates
  , evolveMany
  , EvolveOptions (..)
  , defaultEvolveOptions
  , resetStatesWith
  , evolveManyWith
  , EvolveStats (..)
  , populationSize
    -- * Errors
    -- | Every failure herd reports is a 'HerdError', shown as a sentence.
  , HerdError (..)
  ) where

import Herd.Settings (Config, defaultConfig)
import Herd.Core.Error
import Herd.Master.Job.Evolve
import Herd.Master.Job.Farm
import Herd.Master
import Herd.Master.CallSettings
import Herd.Task.WorkCost (simulatedWork)
import Herd.Master.Job.Shared
import Herd.Master.Job.Reduce
import Herd.Master.Job.Refs
import Herd.Master.Job.Stream
import Herd.Task
import Herd.Node (serveIfWorker)
