-- | The environment variables through which herd starts a process in one of
-- its roles. Only names live here, so every launcher and the worker agree on
-- them. Values travel in the environment, never on a command line, except
-- the secret, which travels in the first line of standard input.
module Herd.Sys.Env
  ( envConnect
  , envCpu
  , envWatchStdin
  , envSecretStdin
  , envSecretFile
  , envGroup
  , envAgent
  , envSlurmTasks
  , envBuildHint
  , envNice
  , envSimulated
  , envHeapReserve
  , herdVariables
  ) where

-- | @HOST:PORT@ of the master; its presence puts a process in worker mode.
envConnect :: String
envConnect = "HERD_WORKER"

-- | The CPU a local worker pins itself to.
envCpu :: String
envCpu = "HERD_WORKER_CPU"

-- | @1@: exit when standard input reaches end of file (the launcher died).
envWatchStdin :: String
envWatchStdin = "HERD_WATCH_STDIN"

-- | @1@: the first line of standard input is the secret, in hex.
envSecretStdin :: String
envSecretStdin = "HERD_SECRET_STDIN"

-- | A file (mode 600, this user's) holding the secret: how an adaptive
-- SLURM job's agent gets it, as a batch job has no pipe from the master.
envSecretFile :: String
envSecretFile = "HERD_SECRET_FILE"

-- | The launch a worker belongs to (@local@, @ssh:HOST@, @slurm@), so the
-- master can count each launch's workers.
envGroup :: String
envGroup = "HERD_GROUP"

-- | A worker count, @auto@ or @slurm@: run as the per-host agent that
-- starts that many local workers (see "Herd.Node.Agent"); @slurm@: the
-- allocation's tasks on this node ('envSlurmTasks', @SLURM_NODEID@).
envAgent :: String
envAgent = "HERD_AGENT"

-- | The allocation's @SLURM_TASKS_PER_NODE@, passed to the agents srun
-- starts (whose own step has one task per node).
envSlurmTasks :: String
envSlurmTasks = "HERD_SLURM_TASKS"

-- | The launcher's build identity and the identity of its executable file
-- (see "Herd.Sys.BuildId"), so a worker started from the very same file need
-- not hash it again.
envBuildHint :: String
envBuildHint = "HERD_BUILD_HINT"

-- | The nice value a local worker gives itself (0 to 19).
envNice :: String
envNice = "HERD_WORKER_NICE"

-- | A worker count: run as a simulated host playing that many workers
-- (see "Herd.Simulate.Host").
envSimulated :: String
envSimulated = "HERD_SIMULATED_WORKERS"

-- | MiB of heap a worker touches once before it joins, then lets go
-- ("Herd.Sys.HeapReserve"; @0@: none). Unset: the worker's default.
envHeapReserve :: String
envHeapReserve = "HERD_WORKER_HEAP_RESERVE"

-- | Every variable above, to strip from an inherited environment.
herdVariables :: [String]
herdVariables = [envConnect, envCpu, envWatchStdin, envSecretStdin, envSecretFile, envGroup, envAgent, envSlurmTasks, envBuildHint, envNice, envSimulated, envHeapReserve]
