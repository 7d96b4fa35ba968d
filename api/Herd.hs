-- | herd: run a pure function over a lot of work on every core, as many
-- separate GHC runtimes (one pinned to each physical core) coordinated by a
-- master over message passing.
--
-- = A farm in one page
--
-- Wrap the function in a 'Task' inside a @static@ form, at top level of a
-- module other than @Main@:
--
-- > {-# LANGUAGE StaticPointers #-}
-- > module Work (fibTask) where
-- > import GHC.StaticPtr (StaticPtr)
-- > import Herd
-- > fib :: Int -> Int
-- > fib n = if n < 2 then n else fib (n - 1) + fib (n - 2)
-- > fibTask :: StaticPtr (Task Int Int)
-- > fibTask = static (task fib)
--
-- Then start a cluster and farm out the work:
--
-- > main :: IO ()
-- > main = withCluster defaultConfig $ \cluster -> do
-- >   ys <- farm cluster fibTask [30 .. 40]   -- results in input order
-- >   print ys
--
-- The same executable is master and worker: 'withCluster' starts one worker
-- process per physical core by re-running the executable, and in those
-- processes it serves the master instead of running the body. Link with
-- @-threaded -rtsopts@ so workers get their RTS options.
--
-- = Promises
--
-- * No result is lost or duplicated: each task's result is delivered
--   exactly once; a lost worker's unfinished tasks run on another.
-- * No worker process is leaked: workers exit when the master does, even
--   when the master is killed with SIGKILL.
-- * No caller waits forever: if every worker is lost, the call throws.
-- * Nobody joins without the secret: every connection proves a shared
--   secret (mutual HMAC-SHA256 challenge-response, "Herd.Auth") before
--   anything else it sends is read.
-- * Nothing from a peer is decoded before it passes the handshake
--   (protocol version and build identity), and every length in a frame is
--   checked against the bytes present before anything is allocated.
-- * A silent link is noticed: after 'configLivenessTimeout' without an
--   answer from the worker's host, its tasks run elsewhere.
--
-- = Beyond one machine
--
-- Set 'configHosts' to start workers over ssh, 'configSlurm' inside a
-- SLURM allocation, or let workers join by hand ('clusterJoinCommand');
-- see the README's "Running on a cluster".
module Herd
  ( -- * Clusters
    withCluster
  , Cluster
  , clusterAddress
  , clusterJoinCommand
  , clusterWorkerCount
  , clusterWorkerInfo
  , WorkerInfo (..)
  , waitForWorkers
  , ConnectionCounters (..)
  , clusterCounters
  , serveIfWorker
    -- * Configuration
  , Config (..)
  , defaultConfig
  , Pinning (..)
  , Batching (..)
  , HostSpec (..)
  , SecretSource (..)
    -- * Tasks
  , Task
  , task
  , named
    -- * Farms
  , farm
  , farmWithStats
  , farmAsCompleted
  , farmEither
    -- * Stream processes
  , Process
  , process
  , namedProcess
  , withStream
  , instantiate
    -- * Stateful evolution (the particle filter's API)
  , Evolve
  , Evolver
  , evolver
  , namedEvolver
  , StateId
  , resetStates
  , evolveMany
  , EvolveOptions (..)
  , defaultEvolveOptions
  , resetStatesWith
  , evolveManyWith
  , EvolveStats (..)
  , populationSize
  , MasterLoop (..)
  , masterLoopName
  , TransportKind (..)
  , transportName
  , parseTransportKind
    -- * Statistics
  , FarmStats
  , JobStats (..)
  , WorkerStats (..)
  , renderStats
  , renderPacketStats
  , PeerStats (..)
  , clusterPacketStats
  , meanPerPacket
  , FlushReason (..)
    -- * Watching a running cluster
    -- | Set 'configDashboard' to serve a live page, JSON and Prometheus
    -- metrics (see the README's "Watching a cluster"); from code,
    -- 'clusterStatus' is the same snapshot.
  , clusterDashboard
  , clusterStatus
  , Status (..)
  , WorkerRow (..)
  , WorkerState (..)
  , JobRow (..)
  , Account (..)
  , Departure (..)
  , SessionView (..)
  , statusJson
  , prometheusText
    -- * Simulated work
    -- | For scale tests: a function declares the time it stands for, slept
    -- in a real worker and simulated in a simulated host (see
    -- 'configSimulatedWorkers').
  , simulatedWork
    -- * Errors
  , HerdError (..)
  ) where

import Herd.Config
import Herd.Transport (transportName, parseTransportKind)
import Herd.Core.Error
import Herd.Evolve
import Herd.Farm
import Herd.Master
import Herd.Core.Master.Session (SessionView (..))
import Herd.Core.Monitor.Ledger (Account (..), Departure (..))
import Herd.Monitor.Render (prometheusText, statusJson)
import Herd.Core.Monitor.Status (JobRow (..), Status (..), WorkerRow (..), WorkerState (..))
import Herd.Packet (PeerStats (..), meanPerPacket)
import Herd.Core.Packet.Policy (FlushReason (..))
import Herd.WorkCost (simulatedWork)
import Herd.Stats
import Herd.Stream
import Herd.Task
import Herd.Worker (serveIfWorker)
