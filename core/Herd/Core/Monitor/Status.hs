-- | A running cluster as a watcher sees it: one snapshot of its workers,
-- jobs, links, evolve call and recent log lines, built from the master's
-- core and the shell's tables. Pure: the dashboard's IO only gathers the
-- inputs ("Herd.Master.Cluster") and renders the result
-- ("Herd.Master.Monitor.Render").
--
-- Promises: every connected worker has a row, and so has every lost one
-- the ledger still keeps ('keptLost'), marked lost with why; a row's
-- figures are the ledger's, so they only grow while the worker is
-- connected; a job's done, in-flight and pending tasks add up to its
-- total.
module Herd.Core.Monitor.Status
  ( Status (..)
  , WorkerRow (..)
  , WorkerState (..)
  , workerStateName
  , JobRow (..)
  , CallView (..)
  , HostRow (..)
  , StealCounts (..)
  , Inputs (..)
  , buildStatus
  ) where

import qualified Data.Map.Strict as M
import Data.Maybe (isJust)
import Herd.Core.Base (WorkerId)
import Herd.Core.Adapt.Track (AdaptSummary)
import Herd.Core.Master
import Herd.Core.Session (SessionView (..))
import Herd.Core.Master.Workers (ConnectionCounters (..), WorkerInfo (..))
import Herd.Core.Monitor.Ledger
import Herd.Core.Packet.Policy (FlushReason, allFlushReasons)
import Herd.Core.Packet.Stats (PeerStats (..))
import qualified Herd.Core.Farm as S
import Herd.Core.Shared (sharesHeldBy, sharesLive, sharesSpilledBy)
import Herd.Core.Steal (StealCounts (..), noStealCounts, stealCounts, stealsBrokered, stealsThieves)

-- | What a worker is doing.
data WorkerState
  = Busy   -- ^ it has tasks, a stream or evolve steps to run
  | Idle   -- ^ connected, with nothing to do
  | Lost   -- ^ its link is gone
  deriving (Eq, Show, Enum, Bounded)

-- | The word the page and the JSON use.
workerStateName :: WorkerState -> String
workerStateName s = case s of
  Busy -> "busy"
  Idle -> "idle"
  Lost -> "lost"

-- | One worker's row.
data WorkerRow = WorkerRow
  { rowWorker    :: !WorkerId            -- ^ its number
  , rowInfo      :: !(Maybe WorkerInfo)  -- ^ what its handshake said ('Nothing' if forgotten)
  , rowState     :: !WorkerState         -- ^ what it is doing
  , rowAccount   :: !Account             -- ^ the ledger's figures
  , rowWaiting   :: !Double              -- ^ waiting seconds so far
  , rowInFlight  :: !Int                 -- ^ farm tasks sent, not yet answered
  , rowStreams   :: !Int                 -- ^ open stream processes
  , rowStates    :: !Int                 -- ^ states of the running evolve call held there
  , rowLink      :: !(Maybe PeerStats)   -- ^ its link's packet statistics (connected workers)
  , rowMemory    :: !(Maybe Int)         -- ^ its resident memory in bytes, as last read (workers the master watches)
  , rowShared    :: !Int                 -- ^ shared values it said it holds
  , rowSpilled   :: !Int                 -- ^ of those, the ones it keeps on its disk
  , rowSteals    :: !StealCounts         -- ^ what its "Herd.Par" children went through: stolen, ran for others, run again
  } deriving (Eq, Show)

-- | One running farm job.
data JobRow = JobRow
  { jobRowId       :: !Int      -- ^ the job's number
  , jobRowFunction :: !String   -- ^ its function's name
  , jobRowTotal    :: !Int      -- ^ its tasks
  , jobRowDone     :: !Int      -- ^ tasks answered
  , jobRowInFlight :: !Int      -- ^ tasks sent, not yet answered
  , jobRowPending  :: !Int      -- ^ tasks not yet sent
  , jobRowElapsed  :: !Double   -- ^ seconds since it was submitted
  , jobRowRate     :: !Double   -- ^ tasks per second so far
  , jobRowLeft     :: !(Maybe Double)  -- ^ seconds left at that rate ('Nothing' before the first result)
  } deriving (Eq, Show)

-- | The snapshot.
data Status = Status
  { statusUptime    :: !Double          -- ^ seconds since the cluster started
  , statusLoop      :: !String          -- ^ the master loop
  , statusWorkers   :: ![WorkerRow]     -- ^ by worker number
  , statusJobs      :: ![JobRow]          -- ^ the running farm jobs
  , statusStreams   :: !Int             -- ^ open stream processes
  , statusEvolve    :: !(Maybe SessionView)  -- ^ the running evolve call
  , statusCounters  :: !ConnectionCounters  -- ^ the master's connection counters
  , statusTasksDone :: !Int             -- ^ farm tasks answered since the start
  , statusLostTotal :: !Int             -- ^ workers lost since the start
  , statusWorkingSeconds :: !Double     -- ^ seconds the cluster had work
  , statusFlushes   :: ![(FlushReason, Int)]  -- ^ packets the master sent, by the rule that sent them
  , statusLog       :: ![(Double, String)]    -- ^ recent log lines, oldest first, with seconds since the start
  , statusMemoryLimit :: !(Maybe Int)   -- ^ the resident bytes a watched worker may hold
  , statusLinks     :: !Int             -- ^ links the master keeps open: a host agent's carries all its workers
  , statusShared    :: !Int             -- ^ shared values live now ("Herd.Core.Shared")
  , statusSharedSends :: !Int           -- ^ times a shared value was put on a link (a host agent's once for all its workers), since the start
  , statusSharedBytes :: !Int           -- ^ the bytes of those sends
  , statusRelayedParts :: !Int          -- ^ keyed reductions' parts the master relayed between workers, since the start
  , statusRelayedBytes :: !Int          -- ^ the bytes of those parts
  , statusHandedParts :: !Int           -- ^ parts workers on the master's host handed each other in files, since the start
  , statusHandedBytes :: !Int           -- ^ the bytes of those parts (never through the master)
  , statusCopies    :: !Int             -- ^ straggler copies of farm batches started since the start
  , statusStealsBrokered :: !Int        -- ^ "Herd.Par" children the master handed from one worker to another (a host agent's own steals are not among them)
  , statusCalls     :: ![CallView]      -- ^ every running call: farms, streams, evolve and Ref calls, reductions
  , statusHosts     :: ![HostRow]       -- ^ the hosts, each with the herd workers sharing its memory
  , statusAdapt     :: !(Maybe AdaptSummary)  -- ^ adaptive SLURM jobs by phase, when the cluster scales itself
  } deriving (Eq, Show)

-- | One host and the herd workers that share its memory budget.
data HostRow = HostRow
  { hostRowName    :: !String      -- ^ its name
  , hostRowWorkers :: !Int         -- ^ herd workers on it: the master's own and its agents'
  , hostRowLimit   :: !(Maybe Int) -- ^ the resident bytes each may hold (known on the master's host)
  } deriving (Eq, Show)

-- | What a snapshot is built from.
data Inputs = Inputs
  { inNow       :: !Double   -- ^ the monotonic clock now (the core's time base)
  , inStarted   :: !Double   -- ^ when the cluster started, on that clock
  , inLoop      :: !String   -- ^ the master loop's name
  , inCore      :: !Core     -- ^ the master's core as of now
  , inConnected :: !(M.Map WorkerId WorkerInfo)  -- ^ handshake records of connected workers
  , inDeparted  :: !(M.Map WorkerId WorkerInfo)  -- ^ handshake records of lost workers
  , inLinks     :: !(M.Map WorkerId PeerStats)  -- ^ each connected worker's link statistics
  , inCounters  :: !ConnectionCounters  -- ^ the acceptor's counters
  , inLog       :: ![(Double, String)]  -- ^ recent log lines
  , inMemory    :: !(M.Map WorkerId Int)  -- ^ the watched workers' resident bytes, as last read
  , inMemoryLimit :: !(Maybe Int)         -- ^ what each may hold
  , inLinksOpen :: !Int                   -- ^ links the master keeps open
  , inShareSends :: !(Int, Int)           -- ^ shared values put on links since the start, and their bytes
  , inRelayed :: !(Int, Int)              -- ^ reductions' parts relayed between workers since the start, and their bytes
  , inHanded :: !(Int, Int)               -- ^ parts handed over in files on the master's host, and their bytes
  , inHosts :: ![HostRow]                 -- ^ the hosts' shares of memory, as the memory watch last made them
  , inAdapt :: !(Maybe AdaptSummary)      -- ^ the adaptive driver's jobs, if it runs
  }

-- | Build the snapshot.
buildStatus :: Inputs -> Status
buildStatus i = Status
  { statusUptime = inNow i - inStarted i
  , statusLoop = inLoop i
  , statusWorkers = map row (ledgerAccounts ledger)
  , statusJobs = map job (coreJobView core)
  , statusStreams = sum (M.elems streams)
  , statusEvolve = session
  , statusCounters = inCounters i
  , statusTasksDone = ledgerTasksDone ledger
  , statusLostTotal = ledgerLostCount ledger
  , statusWorkingSeconds = ledgerWorkingSeconds (inNow i) ledger
  , statusFlushes = [ (r, n) | r <- allFlushReasons
                             , let n = sum [ M.findWithDefault 0 r (flushesBy p) | p <- M.elems (inLinks i) ], n > 0 ]
  , statusLog = inLog i
  , statusMemoryLimit = inMemoryLimit i
  , statusLinks = inLinksOpen i
  , statusShared = length (sharesLive shares)
  , statusSharedSends = fst (inShareSends i)
  , statusSharedBytes = snd (inShareSends i)
  , statusRelayedParts = fst (inRelayed i)
  , statusRelayedBytes = snd (inRelayed i)
  , statusHandedParts = fst (inHanded i)
  , statusHandedBytes = snd (inHanded i)
  , statusCopies = S.copiesMade (coreSched core)
  , statusStealsBrokered = stealsBrokered (coreSteals core)
  , statusCalls = calls
  , statusHosts = inHosts i
  , statusAdapt = inAdapt i
  }
  where
    core = inCore i
    ledger = coreLedger core
    shares = coreShares core
    streams = coreStreamCount core
    session = coreSessionView core
    held = maybe M.empty (M.fromList . viewStates) session
    calls = coreCalls core
    inCall = M.fromList [ (w, ()) | c <- calls, w <- callWorkers c ]
    thieves = stealsThieves (coreSteals core)
    row (w, a) =
      let lost = isJust (accountLeft a)
          inFlight = if lost then 0 else S.inFlightFor w (coreSched core)
          nStreams = if lost then 0 else M.findWithDefault 0 w streams
          nStates = if lost then 0 else M.findWithDefault 0 w held
          state | lost = Lost
                | inFlight > 0 || nStreams > 0 || nStates > 0 || M.member w inCall || w `elem` thieves = Busy
                | otherwise = Idle
      in WorkerRow
           { rowWorker = w
           , rowInfo = maybe (M.lookup w (inDeparted i)) Just (M.lookup w (inConnected i))
           , rowState = state
           , rowAccount = a
           , rowWaiting = accountWaiting (inNow i) ledger a
           , rowInFlight = inFlight
           , rowStreams = nStreams
           , rowStates = nStates
           , rowLink = if lost then Nothing else M.lookup w (inLinks i)
           , rowMemory = if lost then Nothing else M.lookup w (inMemory i)
           , rowShared = if lost then 0 else M.findWithDefault 0 w (sharesHeldBy shares)
           , rowSpilled = if lost then 0 else M.findWithDefault 0 w (sharesSpilledBy shares)
           , rowSteals = M.findWithDefault noStealCounts w (stealCounts (coreSteals core)) }
    job (name, p) =
      let elapsed = max 0 (inNow i - S.progressStarted p)
          done = S.progressDone p
          rate = if elapsed > 0 then fromIntegral done / elapsed else 0
          pending = S.progressPending p
      in JobRow
           { jobRowId = fromIntegral (S.progressJob p)
           , jobRowFunction = name
           , jobRowTotal = S.progressTotal p
           , jobRowDone = done
           , jobRowInFlight = S.progressTotal p - done - pending
           , jobRowPending = pending
           , jobRowElapsed = elapsed
           , jobRowRate = rate
           , jobRowLeft = if done > 0 && rate > 0
                            then Just (fromIntegral (S.progressTotal p - done) / rate) else Nothing }
