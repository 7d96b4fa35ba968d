-- | Watching a cluster: what a farm measured, what each link's packets
-- carried, and the live status the dashboard serves.
--
-- Set 'Herd.Config.configDashboard' to serve a live page, JSON and
-- Prometheus metrics (docs/operations.md, "Watching a cluster");
-- 'clusterStatus' is the same snapshot from code.
module Herd.Monitor
  ( -- * A farm's statistics
    farmMeasured
  , FarmStats
  , JobStats (..)
  , WorkerStats (..)
  , renderStats
    -- * Links and packets
  , PeerStats (..)
  , clusterPacketStats
  , meanPerPacket
  , FlushReason (..)
  , renderPacketStats
  , ConnectionCounters (..)
  , clusterCounters
    -- * The live status
  , clusterStatus
  , clusterDashboard
  , Status (..)
  , WorkerRow (..)
  , WorkerState (..)
  , JobRow (..)
  , CallView (..)
  , HostRow (..)
  , StealCounts (..)
  , Account (..)
  , Departure (..)
  , SessionView (..)
  , statusJson
  , prometheusText
  ) where

import Herd.Core.Session (SessionView (..))
import Herd.Core.Monitor.Ledger (Account (..), Departure (..))
import Herd.Core.Monitor.Status (CallView (..), HostRow (..), JobRow (..), StealCounts (..), Status (..), WorkerRow (..), WorkerState (..))
import Herd.Core.Packet.Policy (FlushReason (..))
import Herd.Master (ConnectionCounters (..), clusterCounters, clusterDashboard, clusterPacketStats, clusterStatus)
import Herd.Master.Job.Farm (FarmStats, farmMeasured)
import Herd.Master.Monitor.Render (prometheusText, statusJson)
import Herd.Master.Monitor.Stats
import Herd.Packet (PeerStats (..), meanPerPacket)
