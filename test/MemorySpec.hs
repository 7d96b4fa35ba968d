-- | Memory governance: the master reads its local workers' resident
-- memory, shows it, and kills a worker over its limit; the task that
-- keeps blowing the limit is named, and the other tasks finish.
module MemorySpec (spec) where

import Control.Concurrent (threadDelay)
import Data.List (isInfixOf)
import qualified Data.ByteString.Char8 as BC
import Herd
import Herd.Config
import Herd.Monitor
import Herd.Node.Memory (hostMemoryBytes, residentBytes, resolveMemoryLimit)
import Herd.Core.Launch.MemoryPolicy (MemoryVerdict (..), memoryVerdict, softShare)
import qualified Data.Map.Strict as M
import qualified Data.Set as S
import Test.QuickCheck
import System.Posix.Process (getProcessID)
import Test.Hspec
import System.Process (terminateProcess)
import HandAgent (withHandAgent)
import TestTasks (memoryHogTask)

-- A farm where task 10 holds 400 MiB, twice the limit, on every worker it
-- runs on: that task is named for killing its workers after the limit of
-- deaths, saying why, and every other task gives its result.
hogNamed :: Cluster -> Expectation
hogNamed cluster = do
  answers <- farmEither cluster memoryHogTask ([1 .. 10] ++ [-400] ++ [11 .. 20])
  [ y | Right y <- answers ] `shouldBe` [1 .. 20]
  case answers !! 10 of
    Left (TaskKilledWorkers 10 _ deaths why) -> do
      deaths `shouldBe` configMaxTaskDeaths defaultConfig
      why `shouldSatisfy` ("exceeded its memory limit" `isInfixOf`)
    other -> expectationFailure ("task 10 should be named for killing its workers, got " ++ show other)

spec :: Spec
spec = describe "worker memory limits" $ do
  it "holds exactly the workers between the soft share and the limit, kills those over it, and names only changes" $
    property $ \(Positive capK) (wasList :: [Int]) (raw :: [(Int, NonNegative Int)]) ->
      let cap = capK * 1000
          readings = M.toList (M.fromList [ (w `mod` 20, rss `mod` (2 * cap + 2)) | (w, NonNegative rss) <- raw ])
          was = S.fromList (map (`mod` 20) wasList)
          present = S.fromList (map fst readings)
          v = memoryVerdict (Just cap) was present readings
          soft = floor (softShare * fromIntegral cap) :: Int
      in conjoin
           [ verdictHeld v === S.fromList [ w | (w, r) <- readings, r > soft, r <= cap ]
           , verdictKill v === [ (w, r) | (w, r) <- readings, r > cap ]
           , S.fromList (verdictHold v) === verdictHeld v `S.difference` was
           , S.fromList (verdictRelease v) === (was `S.difference` verdictHeld v) `S.intersection` present
           , memoryVerdict Nothing was present readings === MemoryVerdict S.empty [] (S.toList (was `S.intersection` present)) [] ]

  it "reads a process's resident memory and shares out the host's" $ do
    me <- fromIntegral <$> getProcessID
    residentBytes me >>= (`shouldSatisfy` maybe False (> 1024 * 1024))
    residentBytes 0 `shouldReturn` Nothing
    Just total <- hostMemoryBytes
    resolveMemoryLimit MemoryLimitAuto 2 `shouldReturn` Just (total `div` 10 * 9 `div` 2)
    resolveMemoryLimit (MemoryLimitMiB 300) 2 `shouldReturn` Just (300 * 1024 * 1024)
    resolveMemoryLimit NoMemoryLimit 2 `shouldReturn` Nothing
    resolveMemoryLimit MemoryLimitAuto 0 `shouldReturn` Nothing

  it "kills a worker over its limit, names the task that keeps blowing it, and finishes the others" $ do
    let cfg = defaultConfig { configWorkers = Just 2, configWorkerMemoryLimit = MemoryLimitMiB 200
                            , configSecret = SecretValue (BC.pack "memory-spec-secret-0123456789") }
    withCluster cfg $ \cluster -> do
      status <- clusterStatus cluster
      statusMemoryLimit status `shouldBe` Just (200 * 1024 * 1024)
      hogNamed cluster
      -- the workers' memory is on the dashboard's rows, below the limit
      -- (a replacement is read at the watcher's next pass)
      let readings = do
            after <- clusterStatus cluster
            pure [ m | r <- statusWorkers after, rowState r /= Lost, Just m <- [rowMemory r] ]
          poll k = do
            live <- readings
            if not (null live) || k <= (0 :: Int) then pure live else threadDelay 100000 >> poll (k - 1)
      live <- poll 50
      live `shouldSatisfy` (not . null)
      live `shouldSatisfy` all (< 200 * 1024 * 1024)

  it "a host agent governs its workers the same way, over its one link: the task is named, the rest finish" $ do
    let secret = "memory-spec-agent-secret-0123456789"
        cfg = defaultConfig { configWorkers = Just 0, configWorkerMemoryLimit = MemoryLimitMiB 200
                            , configSecret = SecretValue (BC.pack secret) }
    withCluster cfg $ \cluster -> do
      let waitFor k cond = do
            ok <- cond
            if ok || k <= (0 :: Int) then pure ok else threadDelay 100000 >> waitFor (k - 1) cond
      withHandAgent cluster secret 2 $ \agent -> do
        waitFor 200 ((== 2) <$> clusterWorkerCount cluster) `shouldReturn` True
        statusLinks <$> clusterStatus cluster `shouldReturn` 1
        hogNamed cluster
        -- the agent restarted what it killed, and reports its workers' memory
        waitFor 200 ((== 2) <$> clusterWorkerCount cluster) `shouldReturn` True
        let live = do
              after <- clusterStatus cluster
              pure [ m | r <- statusWorkers after, rowState r /= Lost, Just m <- [rowMemory r] ]
        waitFor 50 ((== 2) . length <$> live) `shouldReturn` True
        live >>= (`shouldSatisfy` all (< 200 * 1024 * 1024))
        answers' <- farm cluster memoryHogTask [1 .. 8]
        answers' `shouldBe` [1 .. 8]
        terminateProcess agent

