{-# LANGUAGE ScopedTypeVariables #-}
-- | The records of the master's shell ("Herd.Master.Shell"): what its one
-- lock guards (the core and the callers waiting on it), the tables other
-- threads read without that lock (workers, links, counters), and the
-- accessors the cluster's other modules use. No stepping happens here.
module Herd.Master.ShellState
  ( ShellState (..)
  , Shell (..)
  , Registration (..)
  , newShell
  , setReader
  , shellWorkers
  , shellDeparted
  , shellCore
  , shellPeers
  , shellCounters
  , bumpCounter
  , Sends (..)
  , countSend
  , LossHooks (..)
  , noLossHooks
  , HostHandle (..)
  ) where

import Control.Concurrent.MVar
import Control.Concurrent.STM
import qualified Data.ByteString as B
import Data.IORef
import qualified Data.Map.Strict as M
import qualified Data.Set as S
import Data.Word (Word64)
import Herd.Settings
import Herd.Core.Error
import Herd.Core.Master
import Herd.Core.Session (SessionOutcome)
import Herd.Master.Link
import Herd.Reader
import Herd.Master.Types
import Herd.Packet
import Herd.Core.Farm (JobId, WorkerId)
import Herd.Core.Wire.Host (HostControl)
import Herd.Core.Wire.HostCall (HostCallMessage)
import Control.Exception (IOException, try)
import Herd.Sys.Clock (monotonicSeconds)
import System.Directory (createDirectory)
import Herd.Sys.Scratch (handOverBase)
import System.FilePath ((</>))
import System.Posix.Process (getProcessID)

-- | Things sent and their bytes, since the start: strict, as the shell
-- counts one per part or value for as long as the cluster runs (a lazy
-- pair grew a chain of additions per part: 14 MB of thunks in 40 s of
-- @reduceByKey@ calls).
data Sends = Sends !Int !Int
  deriving (Eq, Show)

-- | One more sent, of this many bytes.
countSend :: Int -> Sends -> Sends
countSend bytes (Sends k b) = Sends (k + 1) (b + bytes)


-- | What the shell's lock guards.
data ShellState = ShellState
  { ssCore     :: !Core                        -- ^ the master's core
  , ssLinks    :: !(M.Map WorkerId WorkerLink)  -- ^ each live worker's link
  , ssFarms    :: !(M.Map JobId (JobSpec, TQueue [FarmNews]))  -- ^ farm callers' queues
  , ssNews     :: ![(TQueue [FarmNews], FarmNews)]  -- ^ farm news not handed over yet, newest first, with its caller's queue
  , ssNewsCount :: !Int                                          -- ^ how many
  , ssSessions :: !(M.Map Word64 (Either HerdError SessionOutcome -> IO ()))  -- ^ evolve callers' answers
  , ssStreams  :: !(M.Map Word64 StreamEnds)    -- ^ stream callers
  , ssOpening  :: !(M.Map Word64 (MVar (Either HerdError (Sender, TVar Int))))  -- ^ streams being opened
  , ssTouched  :: !(S.Set WorkerId)             -- ^ links with buffered messages
  , ssGathered :: !(M.Map Word64 [(Int, B.ByteString)])  -- ^ stream output runs of this step, newest first
  , ssHostShares :: !(M.Map Int (Sender, S.Set Word64))
    -- ^ per host link (by number): its sender, and the shared values its agent was sent
  , ssShareSends :: !Sends
    -- ^ shared values put on a link (a worker's own, or a host's once for
    -- all its workers) since the start, and their bytes
  , ssExchanges :: !(M.Map Word64 (Either HerdError [B.ByteString] -> IO ()))
    -- ^ keyed reductions' callers' answers ("Herd.Core.Exchange")
  , ssRelayed :: !Sends
    -- ^ keyed reductions' parts the master relayed from worker to worker
    -- since the start, and their bytes (a host agent keeps its own
    -- workers' parts on the host)
  , ssHanded :: !Sends
    -- ^ parts workers on the master's host handed each other in files
    -- ('Herd.Core.Wire.PartInFile'), and their bytes: never through the master
  }

-- | The shell of one cluster.
data Shell = Shell
  { shConfig   :: !Config                       -- ^ the cluster's configuration
  , shState    :: !(MVar ShellState)            -- ^ the lock, and what it guards
  , shReader   :: !(IORef Reader)               -- ^ the master loop reading the links
  , shWorkers  :: !(TVar (M.Map WorkerId WorkerInfo))  -- ^ the connected workers
  , shDeparted :: !(TVar (M.Map WorkerId WorkerInfo))  -- ^ lost workers, the newest 'Herd.Core.Monitor.Ledger.keptLost'
  , shPeers    :: !(TVar (M.Map WorkerId (Sender, IORef PeerStats)))  -- ^ each link's sender and received counts
  , shCounters :: !(IORef ConnectionCounters)   -- ^ the acceptor's counters
  , shLosses   :: !(IORef LossHooks)            -- ^ who replaces lost workers
  , shMemory   :: !(TVar (Maybe Int, M.Map WorkerId Int))
    -- ^ the resident bytes a watched worker may hold, and each watched worker's, as last read
  , shHosts    :: !(TVar (M.Map Int HostHandle))
    -- ^ each open host link, by its number
  , shHostCalls :: !(TVar (M.Map Word64 (TQueue (Int, Either String HostCallMessage))))
    -- ^ the host-scheduled calls running, by number: where their hosts'
    -- messages go, and each lost host's name ('Left' why)
  , shHostView :: !(TVar [(String, Int, Maybe Int)])
    -- ^ each host's herd workers and (on the master's host) the memory
    -- limit each may hold, as the memory watch last shared them out
  , shShared   :: !(TVar Int)
    -- ^ the bytes of the shared values live now: a link's writer may hold
    -- that much more than its cap ("Herd.Master.Link")
  , shShareSizes :: !(TVar (M.Map Word64 Int))
    -- ^ the size of each shared value live now, by number
  , shPartsDir :: !(Maybe FilePath)
    -- ^ where workers on this host hand each other large reduction parts
    -- as files ('Herd.Core.Wire.PartsDirectory'); removed with the shell
  }

-- | An open host agent's link, as the shell and the memory watch use it.
data HostHandle = HostHandle
  { hostName    :: !String                  -- ^ the host's name, from its hello
  , hostClose   :: IO ()                    -- ^ close the link (the cluster is closing)
  , hostTell    :: HostControl -> IO ()     -- ^ say this to the agent, now
  , hostMembers :: IO Int                   -- ^ its workers linked now
  , hostCallTo  :: HostCallMessage -> IO ()  -- ^ send a host-call message to the agent, now
  }

-- | What the shell asks of whoever restarts lost workers
-- ("Herd.Node.Supervise"), under its lock.
data LossHooks = LossHooks
  { lossClaim   :: WorkerInfo -> IO ()  -- ^ this worker's link went down
  , lossAwaited :: IO Int               -- ^ how many lost workers are being replaced now
  }

-- | Nobody replaces lost workers.
noLossHooks :: LossHooks
noLossHooks = LossHooks (\_ -> pure ()) (pure 0)

-- | What a caller registers with the shell before its first event: where
-- the answer goes.
data Registration
  = RegisterFarm !JobId !JobSpec !(TQueue [FarmNews])
  | RegisterStream !Word64 !StreamEnds !(MVar (Either HerdError (Sender, TVar Int)))
  | RegisterSession !Word64 (Either HerdError SessionOutcome -> IO ())
  | Forget !(Maybe JobId) !(Maybe Word64)   -- ^ the caller of a farm or a stream went away
  | ForgetSession !Word64                   -- ^ the caller of a session went away
  | RegisterExchange !Word64 (Either HerdError [B.ByteString] -> IO ())
  | ForgetExchange !Word64                  -- ^ the caller of a keyed reduction went away
  | NoRegistration

-- | A shell with no links; its reader is set with 'setReader' before any
-- link joins.
newShell :: Config -> IO Shell
newShell cfg = Shell cfg <$> newMVar (ShellState emptyCore M.empty M.empty [] 0 M.empty M.empty M.empty S.empty M.empty M.empty (Sends 0 0) M.empty (Sends 0 0) (Sends 0 0))
                         <*> newIORef noReader <*> newTVarIO M.empty <*> newTVarIO M.empty <*> newTVarIO M.empty
                         <*> newIORef noCounters <*> newIORef noLossHooks <*> newTVarIO (Nothing, M.empty) <*> newTVarIO M.empty
                         <*> newTVarIO M.empty
                         <*> newTVarIO []
                         <*> newTVarIO 0 <*> newTVarIO M.empty <*> newPartsDir
  where noReader = Reader (configMasterLoop cfg) (\_ _ _ _ -> pure ()) (\_ _ -> pure ()) (pure ()) (pure 0)

-- | Give the shell its reader.
setReader :: Shell -> Reader -> IO ()
setReader sh = writeIORef (shReader sh)

-- | The connected workers.
shellWorkers :: Shell -> TVar (M.Map WorkerId WorkerInfo)
shellWorkers = shWorkers

-- | What the handshakes of lost workers said (the newest 'Herd.Core.Monitor.Ledger.keptLost').
shellDeparted :: Shell -> TVar (M.Map WorkerId WorkerInfo)
shellDeparted = shDeparted

-- | The core as of now: a snapshot, read without stopping the master
-- for longer than one step.
shellCore :: Shell -> IO Core
shellCore sh = ssCore <$> readMVar (shState sh)

-- | Each link's packet sender and received-packet counts.
shellPeers :: Shell -> TVar (M.Map WorkerId (Sender, IORef PeerStats))
shellPeers = shPeers

-- | The connection counters.
shellCounters :: Shell -> IORef ConnectionCounters
shellCounters = shCounters

-- | Change a counter.
bumpCounter :: Shell -> (ConnectionCounters -> ConnectionCounters) -> IO ()
bumpCounter sh f = atomicModifyIORef' (shCounters sh) (\x -> (f x, ()))

-- A fresh directory for the parts workers on this host hand each other,
-- in memory where the host allows ("Herd.Sys.Scratch": a part stays there
-- only until its receiver takes it); 'Nothing' if it cannot be made
-- (parts then go over the links).
newPartsDir :: IO (Maybe FilePath)
newPartsDir = do
  base <- handOverBase
  pid <- getProcessID
  salt <- (`mod` 1000000) . round . (* 1e6) <$> monotonicSeconds :: IO Int
  let dir = base </> ("herd-parts-" ++ show pid ++ "-" ++ show salt)
  made <- try (createDirectory dir)
  pure (either (\(_ :: IOException) -> Nothing) (const (Just dir)) made)
