-- | Cancellation on real workers: a caller that gives up stops its job's
-- tasks where they run, and the losing copy of a straggler is stopped
-- once the other copy's results are taken, so its worker takes the next
-- job's work. No timing is asserted: each check is a state reached long
-- before the tasks would have ended on their own.
module CancelSpec (spec) where

import Control.Concurrent (threadDelay)
import Control.Exception (try)
import Data.List (isInfixOf)
import qualified Data.ByteString.Char8 as BC
import System.Directory (createDirectoryIfMissing, getTemporaryDirectory, removeDirectoryRecursive)
import System.Environment (setEnv)
import System.Posix.Process (getProcessID)
import System.Timeout (timeout)
import Test.Hspec
import Herd
import Herd.Config
import Herd.Monitor
import System.Process (terminateProcess)
import HandAgent (withHandAgent)
import TestTasks (sleepMsTask, slowOnceTask)

config :: Config
config = defaultConfig { configWorkers = Just 2, configSecret = SecretValue (BC.pack "cancel-spec-secret-0123456789") }

-- Poll for up to ten seconds (tenths), whatever the machine's load.
eventually :: IO Bool -> IO Bool
eventually cond = go (100 :: Int)
  where
    go k = do
      ok <- cond
      if ok || k <= 0 then pure ok else threadDelay 100000 >> go (k - 1)

-- No connected worker has a farm task in flight, and none is busy.
allIdle :: Cluster -> IO Bool
allIdle cluster = do
  st <- clusterStatus cluster
  let live = [ r | r <- statusWorkers st, rowState r /= Lost ]
  pure (length live == 2 && all (\r -> rowInFlight r == 0 && rowState r == Idle) live)

spec :: Spec
spec = describe "cancellation" $ do
  it "stops every task of a farm whose caller gave up, on its workers, long before the tasks would end" $
    withCluster config $ \cluster -> do
      gaveUp <- timeout 1000000 (farm cluster sleepMsTask [20000, 20000])
      gaveUp `shouldBe` Nothing
      -- the tasks sleep 20 s; their workers are idle again well before
      eventually (allIdle cluster) `shouldReturn` True
      results <- farm cluster sleepMsTask [1 .. 8]
      results `shouldBe` [1 .. 8]

  it "stops them on a host agent's workers too, through its one link" $ do
    let secret = "cancel-spec-agent-secret-0123456789"
        cfg = config { configWorkers = Just 0, configSecret = SecretValue (BC.pack secret) }
    withCluster cfg $ \cluster -> withHandAgent cluster secret 2 $ \agent -> do
      eventually ((== 2) <$> clusterWorkerCount cluster) `shouldReturn` True
      gaveUp <- timeout 1000000 (farm cluster sleepMsTask [20000, 20000])
      gaveUp `shouldBe` Nothing
      eventually (allIdle cluster) `shouldReturn` True
      farm cluster sleepMsTask [1 .. 8] `shouldReturn` [1 .. 8]
      terminateProcess agent

  it "stops a task past its deadline, failing it saying so, and answers every other task" $
    withCluster config { configTaskDeadline = Just 0.5 } $ \cluster -> do
      answers <- farmEither cluster sleepMsTask [10, 60000, 20, 30]
      [ y | Right y <- answers ] `shouldBe` [10, 20, 30]
      case answers !! 1 of
        Left (TaskFailed 1 _ why) -> why `shouldSatisfy` ("ran past its deadline of 0.5 s" `isInfixOf`)
        other -> expectationFailure ("task 1 should have failed for its deadline, got " ++ show other)
      eventually (allIdle cluster) `shouldReturn` True
      farm cluster sleepMsTask [1 .. 8] `shouldReturn` [1 .. 8]

  it "stops the losing copy of a straggler, so its worker takes part in the next farm" $ do
    tmp <- getTemporaryDirectory
    pid <- getProcessID
    let dir = tmp ++ "/herd-cancel-spec-" ++ show pid
    createDirectoryIfMissing True dir
    setEnv "HERD_TEST_SLOW_ONCE" dir
    withCluster config $ \cluster -> do
      before <- clusterStatus cluster
      -- input -1 sleeps 30 s where it runs first; its copy answers at once
      results <- farm cluster slowOnceTask ([0 .. 39] ++ [-1] ++ [40 .. 59])
      results `shouldBe` [0 .. 39] ++ [-1] ++ [40 .. 59]
      after <- clusterStatus cluster
      statusCopies after - statusCopies before `shouldSatisfy` (>= 1)
      -- the worker that ran the first copy was told to stop it
      eventually (allIdle cluster) `shouldReturn` True
      (more, stats) <- farmMeasured cluster sleepMsTask [300, 300, 300, 300]
      more `shouldBe` [300, 300, 300, 300]
      length [ () | ws <- jobWorkerStats stats, statTasks ws > 0 ] `shouldBe` 2
    removeDirectoryRecursive dir

  it "copies no straggler in a call whose settings switch copies off, and the cluster's other calls still may" $
    withCluster config $ \cluster -> do
      quiet <- withCallSettings (\s -> s { callStragglerCopies = False }) cluster
      callStragglerCopies (callSettings quiet) `shouldBe` False
      callStragglerCopies (callSettings cluster) `shouldBe` True
      before <- clusterStatus cluster
      -- one task of 2 s among 5 ms ones: a straggler the default would copy
      results <- farm quiet sleepMsTask (replicate 40 5 ++ [2000] ++ replicate 20 5)
      results `shouldBe` replicate 40 5 ++ [2000] ++ replicate 20 5
      after <- clusterStatus cluster
      statusCopies after - statusCopies before `shouldBe` 0

  it "refuses call settings out of range, naming the field" $
    withCluster config $ \cluster -> do
      r <- try (withCallSettings (\s -> s { callMaxTaskDeaths = 0 }) cluster)
      case r of
        Left (ConfigError field _) -> field `shouldBe` "configMaxTaskDeaths"
        Left other -> expectationFailure ("expected a ConfigError, got " ++ show other)
        Right _ -> expectationFailure "a death limit of 0 was accepted"
