-- | Two-level evolve under a real host agent ('configHostScheduling'):
-- the agent's own scheduler runs its workers' evolve calls, also when one
-- of them is killed mid-call, and the answers are the one-core ones.
module TwoLevelSpec (spec) where

import Control.Concurrent (forkIO, threadDelay)
import Data.IORef
import qualified Data.ByteString.Char8 as BC
import System.Posix.Signals (sigKILL, signalProcess)
import System.Process (getPid, terminateProcess)
import Test.Hspec
import Herd
import Herd.Config
import Herd.Examples.ParticleFilter
import HandAgent (withHandAgent)

secret :: String
secret = "two-level-spec-secret-0123456789"

config :: Config
config = defaultConfig { configWorkers = Just 0, configHostScheduling = True, configSecret = SecretValue (BC.pack secret) }

spec :: Spec
spec = describe "two-level evolve under a real host agent" $ do
  it "evolves on the agent's workers, scheduled by the agent, with the one-core results" $
    withCluster config $ \cluster -> withHandAgent cluster secret 2 $ \agent -> do
      waitForWorkers cluster 2 60 `shouldReturn` True
      let setup = defaultSetup { setupParticles = 200, setupSteps = 3, setupWork = 500 }
      ids <- resetStates cluster particleStep (initialParticles setup)
      runFilter setup (evolveMany cluster particleStep) ids `shouldReturn` runSequential setup
      terminateProcess agent

  it "recovers the states of a worker SIGKILLed mid-call on the host, with the exact results" $
    withCluster config $ \cluster -> withHandAgent cluster secret 2 $ \agent -> do
      waitForWorkers cluster 2 60 `shouldReturn` True
      let setup = defaultSetup { setupParticles = 60, setupSteps = 3, setupWork = 1200000 }
      [victim, _] <- clusterWorkerInfo cluster
      ids <- resetStates cluster particleStep (initialParticles setup)
      (run, stats) <- runWithStats setup cluster ids (signalProcess sigKILL (fromIntegral (infoPid victim)))
      run `shouldBe` runSequential setup
      -- the agent recomputed the lost worker's states itself: the master
      -- sent one message per call to its one host, and rehomed nothing
      sum (map esRecovered stats) `shouldSatisfy` (> 0)
      map esHostMessages stats `shouldBe` replicate (setupSteps setup) 1
      sum (map esRehomed stats) `shouldBe` 0
      terminateProcess agent

  it "an agent SIGKILLed mid-call is one loss: the other agent remakes its states from the master's lineage, exactly" $
    withCluster config $ \cluster -> withHandAgent cluster secret 2 $ \first -> withHandAgent cluster secret 2 $ \second -> do
      waitForWorkers cluster 4 60 `shouldReturn` True
      let setup = defaultSetup { setupParticles = 60, setupSteps = 3, setupWork = 1200000 }
      ids <- resetStates cluster particleStep (initialParticles setup)
      Just victim <- getPid first
      (run, stats) <- runWithStats setup cluster ids (signalProcess sigKILL victim)
      run `shouldBe` runSequential setup
      sum (map esRecovered stats) `shouldSatisfy` (> 0)
      -- one event: the dead host's states went to the other host in one message
      sum (map esRehomed stats) `shouldSatisfy` (> 0)
      maximum (map esHostMessages stats) `shouldSatisfy` (<= 4)
      -- the dead agent's workers went with it
      length <$> clusterWorkerInfo cluster `shouldReturn` 2
      terminateProcess second
  where
    -- The kill lands in the second call, a quarter of the first call's
    -- time after it starts: mid-call however fast or contended the
    -- machine is, since the calls are alike.
    runWithStats setup cluster ids kill = do
      calls <- newIORefList
      run <- runFilter setup (\inputs -> do
                before <- readIORefList calls
                case before of
                  [first] -> () <$ forkIO (threadDelay (round (esSeconds first * 250000)) >> kill)
                  _ -> pure ()
                (out, s) <- evolveManyWith defaultEvolveOptions cluster particleStep inputs
                appendIORef calls s
                pure out) ids
      (,) run . reverse <$> readIORefList calls
    newIORefList = newIORef []
    appendIORef r x = modifyIORef' r (x :)
    readIORefList = readIORef
