-- | Checking a cluster's settings before anything starts: the first field
-- out of range is named, with what it must be and what it was.
module Herd.Settings.Validate
  ( validateConfig
  ) where

import Data.List (nub)
import Herd.Core.Config.Parse (maxSimulatedPerHost, parseDashboardAddress)
import Herd.Settings.Record
import Herd.Core.Adapt.Slurm (validSlurmAdapt)
import Herd.Core.Base (Batching (..), TransportKind (..))
import Herd.Core.Error (HerdError (..))
import Herd.Sys.HeapReserve (heapReserveMostMiB)
import System.Info (os)

-- | Check every field, naming the first that is invalid.
validateConfig :: Config -> Either HerdError Config
validateConfig c
  | Just n <- configWorkers c, n < 0 =
      bad "configWorkers" ("must be 0 or more, got " ++ show n)
  | Just n <- configWorkers c, n > 4096 =
      bad "configWorkers" ("at most 4096 local workers, got " ++ show n)
  | PinCores [] <- configPinning c =
      bad "configPinning" "PinCores needs at least one CPU number"
  | PinCores cs <- configPinning c, any (< 0) cs =
      bad "configPinning" ("CPU numbers must be 0 or more, got " ++ show cs)
  | PinCores cs <- configPinning c, nub cs /= cs =
      bad "configPinning" ("CPU numbers must not repeat, got " ++ show cs)
  | configMaxFrameBytes c < 4096 || configMaxFrameBytes c > 2 ^ (31 :: Int) - 1 =
      bad "configMaxFrameBytes" ("must be between 4096 and 2147483647, got "
                                 ++ show (configMaxFrameBytes c))
  | FixedBatch n <- configBatching c, n < 1 =
      bad "configBatching" ("a fixed batch needs at least 1 task, got " ++ show n)
  | not (configBatchTarget c > 0 && configBatchTarget c <= 60) =
      bad "configBatchTarget" ("must be in (0, 60] seconds, got " ++ show (configBatchTarget c))
  | configPacketBytes c < 64 || configPacketBytes c > configMaxFrameBytes c - 8 =
      bad "configPacketBytes" ("must be between 64 and configMaxFrameBytes - 8 ("
                               ++ show (configMaxFrameBytes c - 8) ++ "), got " ++ show (configPacketBytes c))
  | not (configPacketTimeout c > 0 && configPacketTimeout c <= 10) =
      bad "configPacketTimeout" ("must be in (0, 10] seconds, got " ++ show (configPacketTimeout c))
  | configStreamWindow c < 2 || configStreamWindow c > 1000000 =
      bad "configStreamWindow" ("must be between 2 and 1000000 elements, got " ++ show (configStreamWindow c))
  | not (configStartTimeout c > 0) =
      bad "configStartTimeout" "must be positive"
  | not (configHandshakeTimeout c > 0) =
      bad "configHandshakeTimeout" "must be positive"
  | configListenPort c < 0 || configListenPort c > 65535 =
      bad "configListenPort" ("must be 0..65535, got " ++ show (configListenPort c))
  | Just "" <- configListenHost c =
      bad "configListenHost" "must not be empty"
  | Just "" <- configAdvertiseHost c =
      bad "configAdvertiseHost" "must not be empty"
  | not (configLivenessTimeout c >= 1 && configLivenessTimeout c <= 3600) =
      bad "configLivenessTimeout" ("must be between 1 and 3600 seconds, got "
                                   ++ show (configLivenessTimeout c))
  | configMaxPendingHandshakes c < 1 =
      bad "configMaxPendingHandshakes" "must be at least 1"
  | null (configSshCommand c) || any null (configSshCommand c) =
      bad "configSshCommand" "must name the ssh program"
  | configShip c && null (configHosts c) =
      bad "configShip" "shipping the executable needs hosts to ship it to (configHosts)"
  | configSlurm c && not (null (configHosts c)) =
      bad "configSlurm" "use either SLURM or a list of ssh hosts, not both"
  | Just a <- configSlurmAdapt c, Left why <- validSlurmAdapt a =
      bad "configSlurmAdapt" why
  | configSlurmAdapt c /= Nothing && configSlurm c =
      bad "configSlurmAdapt" "use either a SLURM allocation (configSlurm) or adaptive SLURM jobs, not both"
  | configSimulatedWorkers c < 0 =
      bad "configSimulatedWorkers" ("must be 0 or more, got " ++ show (configSimulatedWorkers c))
  | configSimulatedHosts c < 1 || configSimulatedHosts c > 256 =
      bad "configSimulatedHosts" ("must be from 1 to 256, got " ++ show (configSimulatedHosts c))
  | configSimulatedWorkers c > maxSimulatedPerHost * configSimulatedHosts c =
      bad "configSimulatedWorkers" ("at most " ++ show maxSimulatedPerHost ++ " per simulated host (configSimulatedHosts = "
                                    ++ show (configSimulatedHosts c) ++ "), got " ++ show (configSimulatedWorkers c))
  | configTls c && configSimulatedWorkers c > 0 =
      bad "configTls" "simulated hosts do not speak TLS: use it without configSimulatedWorkers"
  | not (configFrameDeadline c == 0 || (configFrameDeadline c >= 0.1 && configFrameDeadline c <= 86400)) =
      bad "configFrameDeadline" ("must be 0 (never) or from 0.1 to 86400 seconds, got " ++ show (configFrameDeadline c))
  | Just d <- configTaskDeadline c, not (d >= 0.001 && d <= 1e6) =
      bad "configTaskDeadline" ("must be from 0.001 to 1000000 seconds, got " ++ show d)
  | configMaxJobDeaths c < 1 || configMaxJobDeaths c > 1000000 =
      bad "configMaxJobDeaths" ("must be from 1 to 1000000, got " ++ show (configMaxJobDeaths c))
  | configMaxTaskDeaths c < 1 || configMaxTaskDeaths c > 1000 =
      bad "configMaxTaskDeaths" ("must be from 1 to 1000, got " ++ show (configMaxTaskDeaths c))
  | Just mib <- configMasterHeapReserve c, not (reserveInRange mib) =
      bad "configMasterHeapReserve" (reserveRange mib)
  | not (reserveInRange (configWorkerHeapReserve c)) =
      bad "configWorkerHeapReserve" (reserveRange (configWorkerHeapReserve c))
  | MemoryLimitMiB mib <- configWorkerMemoryLimit c, mib < 16 || mib > 16777216 =
      bad "configWorkerMemoryLimit" ("must be from 16 to 16777216 MiB, got " ++ show mib)
  | configWorkerNice c < 0 || configWorkerNice c > 19 =
      bad "configWorkerNice" ("must be from 0 to 19, got " ++ show (configWorkerNice c))
  | any (\o -> null o || head o /= '-') (configWorkerRtsOptions c) =
      bad "configWorkerRtsOptions" ("each option must start with '-', got "
                                    ++ show (configWorkerRtsOptions c))
  | Just k <- configTransport c, k /= TcpTransport, os /= "linux" =
      bad "configTransport" ("the " ++ show k ++ " transport needs Linux (abstract sockets, memfd)")
  | Just addr <- configDashboard c, Left why <- parseDashboardAddress addr =
      bad "configDashboard" why
  | otherwise = Right c
  where
    bad field why = Left (ConfigError field why)
    reserveInRange mib = mib >= 0 && mib <= heapReserveMostMiB
    reserveRange mib = "must be from 0 to " ++ show heapReserveMostMiB ++ " MiB, got " ++ show mib
