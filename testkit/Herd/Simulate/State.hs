-- | The simulated host's state ("Herd.Simulate.Host"): the host, its
-- simulated workers and their timers' events, touched only by the host's
-- one thread ("Herd.Simulate.Play" acts on them).
module Herd.Simulate.State
  ( Host (..)
  , Sim (..)
  , Farm (..)
  , Due (..)
  , stateRef
  ) where

import qualified Data.ByteString as B
import Data.IORef
import qualified Data.IntMap.Strict as IM
import qualified Data.IntSet as IS
import qualified Data.Map.Strict as M
import Data.Sequence (Seq)
import Data.Word (Word64)
import Herd.Core.Agent.Evolve (HostPopulation)
import Herd.Core.Agent.Steal (HostSteals)
import Herd.Core.Wire (ToWorker)
import Herd.Core.Worker.Evolve (Finished, Held)
import Herd.Core.Worker.Step (Batches, Outcome)
import Herd.Node.Join (Joined)
import Herd.Node.Store (Assembly)
import Herd.Packet (Sender)
import Herd.Simulate.ParWorker (Outbox, ParWorker)
import Herd.Simulate.Wheel (Wheel)
import Herd.Sys.Epoll (Epoll)
import Herd.Task (Runner, TaskRef)
import Herd.Task.Evolver (EvolveRunner)
import Herd.Transport (Connection)
import Herd.Wire.Scratch (Scratch)
import Herd.Wire.Writer (Encoder)

-- | A farm run's timer is pending ('True'); the messages that came after
-- it wait, oldest first.
data Farm = Farm !Bool !(Seq ToWorker)

-- | One simulated worker, known by the number the master gave it.
data Sim = Sim
  { sJoined  :: !Joined
  , sBatches :: !(IORef (Batches Runner))
  , sHeld    :: !(IORef (Held EvolveRunner))
  , sFarm    :: !(IORef Farm)
  , sSender  :: !Sender               -- ^ gathers its answers into packets, flushed at the end of the round
  , sFedAt   :: !(IORef Double)     -- ^ when the master's latest message to it was read
  , sShares  :: !Assembly           -- ^ shared values arriving ("Herd.Node.Store")
  , sPar     :: !ParWorker          -- ^ its thread, for Par computations others steal from
  }

-- | A timer's event: a worker's evolve job or farm run is done.
data Due
  = EvolveDue !Int !Double !Finished           -- ^ the worker, when it is due, what it made
  | FarmDue !Int !Double ![Encoder] !Outcome

-- | The host's state, touched only by its one thread.
data Host = Host
  { hConn     :: !Connection
    -- ^ the host link to the master ("Herd.Core.Wire.Host"): every worker's packets travel on it
  , hSender   :: !Sender
    -- ^ gathers the workers' packets (and control messages) into the link's packets
  , hPending  :: !(IORef Int)
    -- ^ workers asked for and not numbered by the master yet
  , hSims     :: !(IORef (IM.IntMap Sim))
  , hWheel    :: !(IORef (Wheel Due))
  , hDirty    :: !(IORef IS.IntSet)
  , hEpoll    :: !Epoll
  , hScratch  :: !Scratch
  , hRunners  :: !(IORef (M.Map TaskRef (Either String Runner)))
  , hEvolvers :: !(IORef (M.Map TaskRef (Either String EvolveRunner)))
  , hShares   :: !(IORef (M.Map Word64 [(Word64, B.ByteString)]))
    -- ^ the shared values' pieces the master sent the host, newest first:
    -- every worker gets them, those added later too
  , hClock    :: !(IORef Double)
    -- ^ when what is being handled happened: a worker's next job starts
    -- then, not when this one thread got round to it, so the host's own
    -- delays do not pile up in a worker's simulated time
  , hPopulation :: !(IORef HostPopulation)
    -- ^ the host's part of a two-level population: the agent's own
    -- scheduler ("Herd.Core.Agent.Evolve"), run as a real agent runs it
  , hHosted   :: !(IORef Bool)
    -- ^ the master spoke of a host call: the workers' evolve answers are
    -- the agent's, not the master's
  , hOutbox   :: !Outbox
    -- ^ what the workers' threads ("Herd.Simulate.ParWorker") say
  , hSteals   :: !(IORef HostSteals)
    -- ^ the host's broker of stolen Par children, as a real agent has
    -- ("Herd.Core.Agent.Steal"): its workers steal from each other first
  }

-- | One step of a pure machine kept in a reference: its new state is
-- written (evaluated) and what it decided returned.
stateRef :: IORef a -> (a -> (a, b)) -> IO b
stateRef ref f = do
  (a', b) <- f <$> readIORef ref
  writeIORef ref $! a'
  pure b
