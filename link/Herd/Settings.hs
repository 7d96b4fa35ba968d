-- | How a cluster is started and run.
--
-- 'Config' is a plain record: start from 'defaultConfig' and change the
-- fields you need with record update. Every field has a default that needs
-- no tuning; 'validateConfig' names the first field that is out of range,
-- and 'Herd.withCluster' calls it before starting anything.
module Herd.Settings
  ( Config (..)
  , Pinning (..)
  , MemoryLimit (..)
  , Batching (..)
  , MasterLoop (..)
  , parseMasterLoop
  , masterLoopName
  , HostSpec (..)
  , parseHostList
  , parseHostsFile
  , SecretSource (..)
  , hasRemoteLaunch
  , listenHostFor
  , defaultConfig
  , defaultWorkerRtsOptions
  , validateConfig
  , packetPolicyOf
  , TransportKind (..)
  , localTransport
  , parseDashboardAddress
  ) where

import Herd.Sys.Secret (SecretSource (..))
import Herd.Core.Base (Batching (..), MasterLoop (..), TransportKind (..), masterLoopName, parseMasterLoop)
import Herd.Core.Config.Parse
import Herd.Settings.Record
import Herd.Settings.Validate
