-- | A cluster's settings: one plain record, 'Config', and the choices its
-- fields take. Start from 'defaultConfig' and change what you need:
--
-- > withCluster defaultConfig { configWorkers = Just 8, configMemoryLimit = MemoryLimitMiB 4096 } body
--
-- 'Herd.withCluster' refuses a bad field with 'Herd.ConfigError' naming
-- it; the command line ("Herd.Options") sets the same fields from flags.
module Herd.Config
  ( Config (..)
  , defaultConfig
    -- * Choices
  , Pinning (..)
  , MemoryLimit (..)
  , Batching (..)
  , HostSpec (..)
  , SecretSource (..)
  , MasterLoop (..)
  , masterLoopName
  , TransportKind (..)
  , transportName
  , parseTransportKind
    -- * Adaptive SLURM jobs
  , SlurmAdapt (..)
  , defaultSlurmAdapt
  , AdaptLimits (..)
  , defaultAdaptLimits
  ) where

import Herd.Core.Adapt (AdaptLimits (..), defaultAdaptLimits)
import Herd.Core.Adapt.Slurm (SlurmAdapt (..), defaultSlurmAdapt)

import Herd.Settings
import Herd.Transport (parseTransportKind, transportName)
