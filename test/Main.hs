-- | The test suite. This executable is also the worker binary of its own
-- integration tests, and the master of the orphan test, so it first checks
-- whether it was started in one of those roles.
module Main (main) where

import qualified ClusterSpec
import qualified CodecSpec
import qualified ConfigSpec
import qualified HeapReserveSpec
import qualified EvolveSpec
import qualified SimulateSpec
import qualified RecoverySpec
import qualified FuzzSpec
import qualified TlsSpec
import qualified CallerThreadSpec
import qualified OptionsSpec
import qualified DocsSpec
import qualified MemorySpec
import qualified CancelSpec
import qualified SharedSpec
import qualified ReduceSpec
import qualified DatasetSpec
import qualified DatasetPlanSpec
import qualified ShuffleRunnerSpec
import qualified KMeansSpec
import qualified ExchangeSpec
import qualified AgentSpec
import qualified RefsSpec
import qualified DashboardSpec
import qualified LogSpec
import qualified EvolveScheduleSpec
import qualified LineageSpec
import qualified HostEvolveSpec
import qualified HostLossSpec
import qualified HostBalanceSpec
import qualified AdaptSpec
import qualified AdaptTrackSpec
import qualified ParSpec
import qualified StealSpec
import qualified FutureSpec
import qualified TwoLevelSpec
import qualified BalanceSpec
import qualified AuthSpec
import Herd.Simulate.Host (runSimulatedHost)
import Herd.Node (serveIfWorkerWith)
import qualified SchedulerSpec
import qualified CoreSpec
import qualified WorkerStepSpec
import qualified PacketSpec
import qualified PacketRunSpec
import System.Environment (lookupEnv)
import Test.Hspec
import qualified WireSpec
import qualified BatchSpec
import qualified MessageSpec
import qualified TransportSpec
import qualified MessagePathSpec
import qualified SocketSpec
import qualified FlowSpec
import qualified StreamBatchSpec
import qualified LargeMessageSpec
import qualified ConformanceSpec

main :: IO ()
main = do
  -- the simulated-host tests start this binary as their hosts
  serveIfWorkerWith (Just runSimulatedHost)
  role <- lookupEnv "HERD_TEST_ROLE"
  case role of
    Just "orphan-master" -> ClusterSpec.orphanMasterMain
    Just "uncaught-error" -> LogSpec.uncaughtErrorMain
    _ -> hspec $ do
      CodecSpec.spec
      WireSpec.spec
      BatchSpec.spec
      MessageSpec.spec
      ConfigSpec.spec
      AuthSpec.spec
      SchedulerSpec.spec
      CoreSpec.spec
      SharedSpec.spec
      ShuffleRunnerSpec.spec
      ReduceSpec.spec
      DatasetPlanSpec.spec
      DatasetSpec.spec
      KMeansSpec.spec
      ExchangeSpec.spec
      AgentSpec.spec
      RefsSpec.spec
      WorkerStepSpec.spec
      PacketSpec.spec
      PacketRunSpec.spec
      TransportSpec.spec
      MessagePathSpec.spec
      SocketSpec.spec
      FlowSpec.spec
      StreamBatchSpec.spec
      LargeMessageSpec.spec
      ConformanceSpec.spec
      EvolveScheduleSpec.spec
      LineageSpec.spec
      HostEvolveSpec.spec
      HostLossSpec.spec
      HostBalanceSpec.spec
      AdaptSpec.spec
      AdaptTrackSpec.spec
      ParSpec.spec
      StealSpec.spec
      FutureSpec.spec
      TwoLevelSpec.spec
      BalanceSpec.spec
      ClusterSpec.spec
      HeapReserveSpec.spec
      EvolveSpec.spec
      SimulateSpec.spec
      RecoverySpec.spec
      FuzzSpec.spec
      TlsSpec.spec
      CallerThreadSpec.spec
      OptionsSpec.spec
      DocsSpec.spec
      MemorySpec.spec
      CancelSpec.spec
      DashboardSpec.spec
      LogSpec.spec
