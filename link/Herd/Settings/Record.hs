-- | The record of a cluster's settings and its defaults ("Herd.Settings"
-- re-exports it with the checks of "Herd.Settings.Validate").
module Herd.Settings.Record
  ( Config (..)
  , Pinning (..)
  , MemoryLimit (..)
  , hasRemoteLaunch
  , listenHostFor
  , defaultConfig
  , defaultWorkerRtsOptions
  , packetPolicyOf
  , localTransport
  ) where

import Herd.Sys.Log (logToStderr)
import Herd.Sys.Secret (SecretSource (..))
import Herd.Core.Packet.Policy (PacketPolicy (..), defaultPacketPolicy)
import Herd.Sys.HeapReserve (defaultWorkerHeapReserve)
import System.Info (os)
import Herd.Core.Base (Batching (..), MasterLoop (..), TransportKind (..))
import Herd.Core.Config.Parse
import Herd.Core.Adapt.Slurm (SlurmAdapt)

-- | How much memory a worker the master starts may hold.
data MemoryLimit
  = MemoryLimitAuto     -- ^ 90% of each host's memory shared out among that host's workers (default)
  | MemoryLimitMiB Int  -- ^ this many MiB of resident memory each
  | NoMemoryLimit       -- ^ no limit: a runaway task meets the kernel's out-of-memory killer
  deriving (Eq, Show)

-- | Which CPUs local workers are pinned to.
data Pinning
  = PinPhysicalCores   -- ^ one worker per physical core; hyperthread siblings skipped (default)
  | PinLogicalCores    -- ^ one worker per logical CPU, hyperthread siblings included
  | PinCores [Int]     -- ^ exactly these CPU numbers, in this order
  | NoPinning          -- ^ let the kernel place workers
  deriving (Eq, Show)

-- | Settings of a cluster.
data Config = Config
  { configWorkers          :: Maybe Int
    -- ^ local worker processes to start; 'Nothing' starts one per selected
    -- core, or none when workers are started on other hosts (ssh or
    -- SLURM); @Just 0@ starts none (workers then join by hand)
  , configPinning          :: Pinning
    -- ^ CPUs the local workers are pinned to
  , configWorkerRtsOptions :: [String]
    -- ^ RTS options of local workers, passed in @GHCRTS@ (so the binary
    -- must be linked with @-rtsopts@ for them to apply)
  , configMaxFrameBytes    :: Int
    -- ^ largest frame accepted from a peer, checked before allocating
  , configBatching         :: Batching
    -- ^ batch sizing policy
  , configBatchTarget      :: Double
    -- ^ seconds of work an adaptive batch aims for
  , configStartTimeout     :: Double
    -- ^ seconds to wait for local workers to connect
  , configHandshakeTimeout :: Double
    -- ^ seconds a new connection gets to complete the handshake
  , configListenHost       :: Maybe String
    -- ^ address the master listens on; by default loopback when every
    -- worker is local, all interfaces when workers are started on other
    -- hosts (ssh or SLURM)
  , configAdvertiseHost    :: Maybe String
    -- ^ address workers are told to connect to; by default the listen
    -- address, or this machine's host name when listening on all interfaces
  , configSecret           :: SecretSource
    -- ^ the shared secret every connection must prove (see "Herd.Transport.Auth")
  , configLivenessTimeout  :: Double
    -- ^ seconds of silence on a link (no data and no answer to the
    -- kernel's keepalive probes) after which its worker counts as lost
  , configMaxPendingHandshakes :: Int
    -- ^ connections allowed to be in the handshake at once; more are
    -- closed at once, so a flood cannot exhaust the master
  , configHosts            :: [HostSpec]
    -- ^ hosts to start workers on over ssh (see "Herd.Master.Launch.Ssh")
  , configSshCommand       :: [String]
    -- ^ the ssh client and its options (default @ssh -o BatchMode=yes@, so a
    -- host that asks for a password fails instead of waiting for one)
  , configShip             :: Bool
    -- ^ copy this executable to each ssh host first (to @~/.herd/bin@)
    -- instead of assuming it exists there at the same path
  , configSlurm            :: Bool
    -- ^ start one worker per task of the enclosing SLURM allocation with
    -- @srun@ (see "Herd.Master.Launch.Slurm")
  , configSlurmAdapt       :: Maybe SlurmAdapt
    -- ^ adaptive scaling under SLURM (@--slurm-adapt MIN..MAX@): the
    -- master submits batch jobs, each a host agent connecting back, while
    -- work waits, and cancels those idle for long, within the limits
    -- ("Herd.Master.Launch.Adapt"). 'Nothing' (the default): none
  , configAllowPartialStart :: Bool
    -- ^ when some hosts fail to start, go on with the workers that did
    -- (the default is to stop with an error naming the hosts)
  , configListenPort       :: Int
    -- ^ port the master listens on; 0 picks a free one
  , configLog              :: String -> IO ()
    -- ^ where log lines go (default: standard error)
  , configChunking         :: Bool
    -- ^ gather small messages into packets (Eden's dynamic chunking); off
    -- sends every message as its own packet, to measure against
  , configPacketBytes      :: Int
    -- ^ capacity of each peer's send buffer, in bytes
  , configPacketTimeout    :: Double
    -- ^ seconds the oldest buffered message may wait before its packet leaves
  , configStreamWindow     :: Int
    -- ^ stream elements in flight per direction of a stream process before
    -- the sender waits for the receiver (credit-based flow control); the
    -- sender also waits once those in flight hold 4 MiB
    -- ("Herd.Task.StreamFlow")
  , configMasterLoop       :: MasterLoop
    -- ^ the loop that drives the evolve API ("Herd.Master.Job.Evolve")
  , configWorkerNice       :: Int
    -- ^ nice value of local workers (0 to 19). Raise it when running more
    -- workers than cores, so that the master, whom every worker waits on,
    -- is not queued behind them
  , configTransport        :: Maybe TransportKind
    -- ^ how local workers are linked to the master. 'Nothing' (the
    -- default): shared memory on Linux, TCP elsewhere. Workers on other
    -- hosts always use TCP, the only transport that crosses hosts
  , configDashboard        :: Maybe String
    -- ^ serve a live dashboard of the cluster at this @HOST:PORT@ (port 0:
    -- a free one, logged): the page at @/@, @/api/status@ (JSON) and
    -- @/metrics@ (Prometheus). Read-only; bind it to loopback (the
    -- default address in the command-line tools) unless the network is
    -- trusted. 'Nothing' (the default): no dashboard
  , configSimulatedWorkers :: Int
    -- ^ simulated workers to start besides the real ones (0, the default:
    -- none). They are played by 'configSimulatedHosts' local processes
    -- ("Herd.Simulate.Host"), each worker with its own TCP link, handshake
    -- and worker number, running the real task and evolve functions;
    -- only the time a function declares with 'Herd.Task.WorkCost.simulatedWork'
    -- is simulated. With simulated workers, 'configWorkers' = 'Nothing'
    -- starts no real local worker. A benchmark harness: the program must
    -- play the hosts ('Herd.Node.serveIfWorkerWith' given the player of
    -- @herd-testkit@, as the herd executable does); any other program's
    -- hosts exit with an error that says so
  , configSimulatedHosts   :: Int
    -- ^ processes that play the simulated workers, which are shared out
    -- evenly among them (default 1)
  , configTls              :: Bool
    -- ^ encrypt TCP links with TLS (default 'False'; local links over
    -- Unix sockets and shared memory never leave the host). The master makes
    -- a fresh key and certificate; workers started by hand connect with
    -- @tls:HOST:PORT@. The secret is still proved both ways, bound to the
    -- master's certificate ("Herd.Transport.Tls")
  , configMaxTaskDeaths    :: Int
    -- ^ a farm task that was running on this many workers that died (a
    -- crash, the out-of-memory killer) fails its job with
    -- 'Herd.Error.TaskKilledWorkers' instead of being tried again
    -- (default 3, as Dask's @allowed-failures@)
  , configMaxJobDeaths     :: Int
    -- ^ a farm during which this many workers died running its tasks
    -- stops with 'Herd.Error.JobKilledWorkers' (default 20), so a job whose
    -- every task kills its worker ends in bounded time
  , configFrameDeadline    :: Double
    -- ^ seconds a peer may leave a frame unfinished, sending nothing more
    -- of it, before its link is dropped (default 30; 0: never). A large
    -- frame that keeps arriving is never cut. The epoll master loop (the
    -- default) keeps it
  , configTaskDeadline     :: Maybe Double
    -- ^ seconds a farm task may compute on its worker before it is
    -- stopped and fails as 'Herd.Error.TaskFailed' saying it exceeded its
    -- deadline (default 'Nothing': no deadline; @--task-deadline@). It is
    -- stopped at its next allocation after the worker's watch, which looks every 20 ms, sees it past the deadline
  , configHostScheduling   :: Bool
    -- ^ two-level evolve (default 'False'): the evolve API's states are
    -- placed on hosts, and each host's agent schedules its own workers
    -- (queues, moves between them, recovery of a lost worker's states);
    -- the master sends one message per host and call. Needs every worker
    -- on a host link (host agents or simulated hosts); the master's
    -- own local workers take no part
  , configStragglerCopies  :: Bool
    -- ^ run a second copy of a farm batch that has run far longer than
    -- its job's estimate on an idle worker, and take whichever ends first
    -- (default 'True'); never of a worker held for its memory, nor of a
    -- task that was running on a worker that died
  , configRestartWorkers   :: Bool
    -- ^ restart a local worker process that dies (default 'True'), with a
    -- growing pause between restarts; one that keeps dying is left down
  , configMasterHeapReserve :: Maybe Int
    -- ^ MiB of heap the master touches once when the cluster has started
    -- (on transparent huge pages where the kernel allows) and then lets
    -- go, with the runtime's minimum old generation (@+RTS -O@) raised to
    -- a quarter of it, so its collections copy into pages the process
    -- already has ("Herd.Sys.HeapReserve": on a virtual machine a page's first
    -- touch is dear). Once per process: a later cluster asking no more
    -- touches nothing. 'Nothing' (the default): 256 KiB per worker
    -- connected at the start, at least 128 MiB and at most 256 MiB.
    -- @Just 0@: none
  , configWorkerHeapReserve :: Int
    -- ^ MiB of heap each worker touches once before it joins and then
    -- lets go, its minimum old generation raised to a quarter of it, so
    -- that its collections reuse those pages instead of giving memory
    -- back and touching it afresh ("Herd.Sys.HeapReserve"). Local, ssh and
    -- SLURM workers alike. Default 0, none
    -- ('Herd.Sys.HeapReserve.defaultWorkerHeapReserve'); 64 made large
    -- messages faster and TCP bandwidth slower; 256 made PageRank's
    -- iterations over datasets of 8 MB partitions 6-10% faster
  , configWorkerMemoryLimit :: MemoryLimit
    -- ^ the resident memory each local worker may hold (workers this
    -- master starts on its own host; not yet those of ssh hosts or
    -- SLURM). The master reads each one's resident set a few times a
    -- second; above 80% of its limit a worker gets no new batch while
    -- another can take one; above the limit it is killed and restarted,
    -- and the tasks it ran are charged with its death, so a task that
    -- always blows the limit fails its farm with
    -- 'Herd.Core.Error.TaskKilledWorkers' saying so. Default
    -- 'MemoryLimitAuto'
  }


-- | RTS options every local worker gets unless told otherwise: one
-- capability (a worker is one core; more made messaging slower) and a
-- 32 MB nursery: in @herd bench nursery@ an allocation-heavy farm was
-- clearly slower with a small nursery, and a larger one than 32 MB only
-- cost memory.
defaultWorkerRtsOptions :: [String]
defaultWorkerRtsOptions = ["-N1", "-A32m"]

-- | The transport local workers use under this configuration.
localTransport :: Config -> TransportKind
localTransport c = case configTransport c of
  Just k -> k
  Nothing | os == "linux" -> ShmTransport
          | otherwise -> TcpTransport

-- | Whether workers are started on other hosts (ssh, SLURM, adaptive SLURM).
hasRemoteLaunch :: Config -> Bool
hasRemoteLaunch c = configSlurm c || configSlurmAdapt c /= Nothing || not (null (configHosts c))

-- | The address to listen on, given the defaults described at
-- 'configListenHost'.
listenHostFor :: Config -> String
listenHostFor c = case configListenHost c of
  Just h -> h
  Nothing | hasRemoteLaunch c -> "0.0.0.0"
          | otherwise -> "127.0.0.1"

-- | Sensible defaults: one worker per physical core, pinned, adaptive
-- batches, 64 MiB frame cap, loopback listener on a free port, the secret
-- from @HERD_SECRET@ or @~/.herd/cookie@, links declared dead after 4 s of
-- silence.
defaultConfig :: Config
defaultConfig = Config
  { configWorkers          = Nothing
  , configPinning          = PinPhysicalCores
  , configWorkerRtsOptions = defaultWorkerRtsOptions
  , configMaxFrameBytes    = 64 * 1024 * 1024
  , configBatching         = Adaptive
  , configBatchTarget      = 0.02
  , configStartTimeout     = 30
  , configHandshakeTimeout = 5
  , configListenHost       = Nothing
  , configAdvertiseHost    = Nothing
  , configSecret           = SecretAuto
  , configLivenessTimeout  = 4
  , configMaxPendingHandshakes = 256
  , configHosts            = []
  , configSshCommand       = ["ssh", "-o", "BatchMode=yes"]
  , configShip             = False
  , configSlurm            = False
  , configSlurmAdapt       = Nothing
  , configAllowPartialStart = False
  , configListenPort       = 0
  , configLog              = logToStderr
  , configChunking         = policyChunking defaultPacketPolicy
  , configPacketBytes      = policyCapacity defaultPacketPolicy
  , configPacketTimeout    = policyTimeout defaultPacketPolicy
  , configStreamWindow     = 16384
  , configMasterLoop       = EpollLoop
  , configWorkerNice       = 0
  , configTransport        = Nothing
  , configDashboard        = Nothing
  , configSimulatedWorkers = 0
  , configSimulatedHosts   = 1
  , configTls              = False
  , configMaxTaskDeaths    = 3
  , configMaxJobDeaths     = 20
  , configFrameDeadline    = 30
  , configTaskDeadline     = Nothing
  , configHostScheduling   = False
  , configStragglerCopies  = True
  , configRestartWorkers   = True
  , configMasterHeapReserve = Nothing
  , configWorkerHeapReserve = defaultWorkerHeapReserve
  , configWorkerMemoryLimit = MemoryLimitAuto
  }

-- | The packet policy a configuration asks for.
packetPolicyOf :: Config -> PacketPolicy
packetPolicyOf c = PacketPolicy (configChunking c) (configPacketBytes c) (configPacketTimeout c)

