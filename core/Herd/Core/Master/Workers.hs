-- | What the master knows of its workers and connections, as the
-- dashboard and the status report show it. Plain data.
module Herd.Core.Master.Workers
  ( WorkerInfo (..)
  , ConnectionCounters (..)
  , noCounters
  ) where

import Herd.Core.Base (TransportKind, WorkerId)

-- | What the master knows about a connected worker.
data WorkerInfo = WorkerInfo
  { infoId   :: !WorkerId
  , infoPid  :: !Int
  , infoHost :: !String
  , infoPeer :: !String   -- ^ the connection's address
  , infoGroup :: !String  -- ^ the launch that started it (@local@, @ssh:HOST@, @slurm@; empty: joined by hand)
  , infoTransport :: !TransportKind  -- ^ how it is linked to the master
  , infoCpu :: !(Maybe Int)  -- ^ the CPU it is pinned to, as it reported
  } deriving (Eq, Show)

-- | What happened to connections since the cluster started.
data ConnectionCounters = ConnectionCounters
  { countAccepted       :: !Int  -- ^ connections accepted
  , countBusyRefused    :: !Int  -- ^ closed at once: too many handshakes in progress
  , countAuthFailures   :: !Int  -- ^ peers that could not prove the secret
  , countHandshakeFailures :: !Int  -- ^ other failed handshakes: timeouts, bad frames, wrong build
  , countJoined         :: !Int  -- ^ workers that passed the handshake
  , countJoining        :: !Int  -- ^ handshakes in progress now
  , countWorkerMessages :: !Int  -- ^ messages from joined workers handed to the core
  , countRestarts       :: !Int  -- ^ local worker processes started again after dying
  } deriving (Eq, Show)

-- | All counters at zero.
noCounters :: ConnectionCounters
noCounters = ConnectionCounters 0 0 0 0 0 0 0 0

