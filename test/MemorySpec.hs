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
import Herd.Core.Launch.MemoryPolicy (HostShares (..), MemoryVerdict (..), growthShare, memoryVerdict, shareHosts, softShare)
import qualified Data.Map.Strict as M
import qualified Data.Set as S
import Test.QuickCheck
import System.Posix.Process (getProcessID)
import Test.Hspec
import System.Process (terminateProcess)
import HandAgent (withHandAgent)
import TestTasks (growingHogTask, memoryHogTask)

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
  it "holds exactly the workers between the soft share and the limit or growing fast, kills those over it, and names only changes" $
    property $ \(Positive capK) (wasList :: [Int]) (raw :: [(Int, NonNegative Int)]) (before :: [(Int, NonNegative Int)]) ->
      let cap = capK * 1000
          readings = M.toList (M.fromList [ (w `mod` 20, rss `mod` (2 * cap + 2)) | (w, NonNegative rss) <- raw ])
          previous = M.fromList [ (w `mod` 20, rss `mod` (2 * cap + 2)) | (w, NonNegative rss) <- before ]
          was = S.fromList (map (`mod` 20) wasList)
          present = S.fromList (map fst readings)
          v = memoryVerdict (Just cap) was previous present readings
          soft = floor (softShare * fromIntegral cap) :: Int
          grew w r = maybe False (\p -> fromIntegral (r - p) > growthShare * fromIntegral cap) (M.lookup w previous)
      in conjoin
           [ verdictHeld v === S.fromList [ w | (w, r) <- readings, r <= cap, r > soft || grew w r ]
           , verdictKill v === [ (w, r) | (w, r) <- readings, r > cap ]
           , S.fromList (verdictHold v) === verdictHeld v `S.difference` was
           , S.fromList (verdictRelease v) === (was `S.difference` verdictHeld v) `S.intersection` present
           , memoryVerdict Nothing was previous present readings === MemoryVerdict S.empty [] (S.toList (was `S.intersection` present)) [] ]

  it "shares each host's budget among every herd worker on it: the master's own and each agent's" $
    property $ \(NonNegative local) (raw :: [(Int, NonNegative Int)]) ->
      let agents = [ (a, "h" ++ show (h `mod` 3), n) | (a, (h, NonNegative n)) <- zip [1 ..] raw ]
          shares = shareHosts "h0" local agents
          total name = (if name == "h0" then local else 0) + sum [ n | (_, h, n) <- agents, h == name ]
      in conjoin
           [ sharesPerHost shares === M.fromList [ (name, total name) | name <- "h0" : [ h | (_, h, _) <- agents ] ]
           , conjoin [ M.lookup a (sharesElsewhere shares) === Just (total h - n) | (a, h, n) <- agents ] ]

  it "a master's local worker and an agent's two on one host share its budget by three" $ do
    let secret = "memory-spec-share-secret-0123456789"
        cfg = defaultConfig { configWorkers = Just 1, configSecret = SecretValue (BC.pack secret) }
    withCluster cfg $ \cluster -> withHandAgent cluster secret 2 $ \agent -> do
      let waitFor k cond = do
            ok <- cond
            if ok || k <= (0 :: Int) then pure ok else threadDelay 100000 >> waitFor (k - 1) cond
      waitFor 200 ((== 3) <$> clusterWorkerCount cluster) `shouldReturn` True
      third <- resolveMemoryLimit MemoryLimitAuto 3
      let shared = do
            st <- clusterStatus cluster
            pure (statusMemoryLimit st == third && [ hostRowWorkers h | h <- statusHosts st ] == [3])
      waitFor 100 shared `shouldReturn` True
      st <- clusterStatus cluster
      [ hostRowLimit h | h <- statusHosts st ] `shouldBe` [third]
      terminateProcess agent

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

  it "copies no straggler that grows toward its limit, and names a hog of 200 inputs after exactly the limit of deaths" $ do
    let cfg = defaultConfig { configWorkers = Just 2, configWorkerMemoryLimit = MemoryLimitMiB 200
                            , configSecret = SecretValue (BC.pack "memory-spec-secret-0123456789") }
        inputs = [0 .. 149] ++ [-300] ++ [151 .. 199]
    withCluster cfg $ \cluster -> do
      before <- clusterStatus cluster
      answers <- farmEither cluster growingHogTask inputs
      [ y | Right y <- answers ] `shouldBe` filter (>= 0) inputs
      after <- clusterStatus cluster
      statusCopies after - statusCopies before `shouldBe` 0
      statusLostTotal after - statusLostTotal before `shouldBe` configMaxTaskDeaths defaultConfig
      case answers !! 150 of
        Left (TaskKilledWorkers 150 _ deaths why) -> do
          deaths `shouldBe` configMaxTaskDeaths defaultConfig
          why `shouldSatisfy` ("limit 200 MiB" `isInfixOf`)
          why `shouldSatisfy` ("its input: -300" `isInfixOf`)
        other -> expectationFailure ("input 150 should be named for killing its workers, got " ++ show other)
      -- every worker takes part in the next farm
      let waitFor k cond = do
            ok <- cond
            if ok || k <= (0 :: Int) then pure ok else threadDelay 100000 >> waitFor (k - 1) cond
      waitFor 100 ((== 2) <$> clusterWorkerCount cluster) `shouldReturn` True
      (results, stats) <- farmMeasured cluster growingHogTask [0 .. 99]
      results `shouldBe` [0 .. 99]
      length [ () | ws <- jobWorkerStats stats, statTasks ws > 0 ] `shouldBe` 2

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

