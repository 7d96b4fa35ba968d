{-# LANGUAGE ScopedTypeVariables #-}
-- | Integration tests of recovery with real worker processes: a task that
-- kills the worker running it is named after a bounded number of deaths,
-- lost local workers are restarted and rejoin, and jobs wait for them
-- rather than failing.
module RecoverySpec (spec) where

import Control.Concurrent (forkIO, readMVar, threadDelay)
import Data.List (sort)
import Herd.Master (clusterRegistry)
import Herd.Core.Evolve.Registry (Placed (..), Registry (..), lineageDepth)
import qualified Herd.Core.Evolve.StateMap as SM
import Control.Exception
import qualified Data.Map.Strict as M
import Control.Monad
import Data.IORef
import Data.List (isInfixOf)
import Herd
import Herd.Config
import Herd.Monitor
import System.Posix.Signals (sigCONT, sigKILL, sigSTOP, signalProcess)
import Herd.Sys.Clock (monotonicSeconds)
import System.Timeout (timeout)
import Test.Hspec
import ClusterSpec (withTestClusterConfig, eventually)
import TestTasks

spec :: Spec
spec = describe "recovery of a cluster of local worker processes" $ do
  it "names the input that makes its worker exit, within configMaxTaskDeaths deaths, and the next farm has every worker back" $
    withTestClusterConfig 2 id $ \logs cluster -> do
      r <- try (farm cluster exitAt13Task [0 .. 39])
      case r of
        Left (TaskKilledWorkers i name deaths _) -> do
          i `shouldBe` 13
          name `shouldSatisfy` ("exitAt13" `isInfixOf`)
          deaths `shouldBe` configMaxTaskDeaths defaultConfig
        other -> expectationFailure ("expected TaskKilledWorkers, got " ++ show (fmap length other))
      farm cluster squareTask [1 .. 100] `shouldReturn` map (^ (2 :: Int)) [1 .. 100]
      eventually ((== 2) <$> clusterWorkerCount cluster) `shouldReturn` True
      counters <- clusterCounters cluster
      countRestarts counters `shouldBe` configMaxTaskDeaths defaultConfig
      ls <- readIORef logs
      any ("restarting it" `isInfixOf`) ls `shouldBe` True

  it "restarts a worker killed between jobs, and the next job has the whole machine" $
    withTestClusterConfig 2 id $ \_ cluster -> do
      [victim, _] <- clusterWorkerInfo cluster
      signalProcess sigKILL (fromIntegral (infoPid victim))
      let replaced = do
            ws <- clusterWorkerInfo cluster
            pure (length ws == 2 && infoPid victim `notElem` map infoPid ws)
      eventually replaced `shouldReturn` True
      (ys, stats) <- farmMeasured cluster sleepySquareTask [ (5, x) | x <- [0 .. 39] ]
      ys `shouldBe` [ x * x | x <- [0 .. 39] ]
      length [ s | s <- jobWorkerStats stats, statTasks s > 0 ] `shouldBe` 2
      countRestarts <$> clusterCounters cluster `shouldReturn` 1

  it "finishes a farm whose every worker is killed mid-run: the job waits for their replacements" $
    withTestClusterConfig 2 id $ \_ cluster -> do
      workers <- clusterWorkerInfo cluster
      killed <- newIORef False
      ys <- farmAsCompleted cluster sleepySquareTask [ (20, x) | x <- [0 .. 59] ] $ \_ _ -> do
        already <- atomicModifyIORef' killed (\k -> (True, k))
        unless already $ forM_ workers $ \w -> signalProcess sigKILL (fromIntegral (infoPid w))
      statTasks <$> jobWorkerStats ys `shouldSatisfy` ((== 60) . sum)

  it "leaves a lost worker down when told not to restart" $
    withTestClusterConfig 2 (\c -> c { configRestartWorkers = False }) $ \_ cluster -> do
      [victim, _] <- clusterWorkerInfo cluster
      signalProcess sigKILL (fromIntegral (infoPid victim))
      eventually ((== 1) <$> clusterWorkerCount cluster) `shouldReturn` True
      farm cluster squareTask [1 .. 10] `shouldReturn` map (^ (2 :: Int)) [1 .. 10]
      clusterWorkerCount cluster `shouldReturn` 1
      countRestarts <$> clusterCounters cluster `shouldReturn` 0

  it "finishes a farm with a stopped worker (SIGSTOP) within a few times its clean time, copying its batches" $
    withTestClusterConfig 2 id $ \logs cluster -> do
      let inputs = [ (10, x) | x <- [0 .. 199] ]
      t0 <- monotonicSeconds
      _ <- farm cluster sleepySquareTask inputs
      clean <- subtract t0 <$> monotonicSeconds
      [victim, _] <- clusterWorkerInfo cluster
      stopped <- newIORef False
      t1 <- monotonicSeconds
      results <- newIORef (0 :: Int)
      -- a scheduler that never copies the stopped worker's batches would wait forever
      finished <- timeout 30000000 $ farmAsCompleted cluster sleepySquareTask inputs $ \i y -> do
        when (y /= snd (inputs !! i) ^ (2 :: Int)) $ throwIO (userError ("wrong result for task " ++ show i))
        modifyIORef' results (+ 1)
        already <- atomicModifyIORef' stopped (\s -> (True, s))
        unless already $ signalProcess sigSTOP (fromIntegral (infoPid victim))
      slow <- subtract t1 <$> monotonicSeconds
      signalProcess sigCONT (fromIntegral (infoPid victim))
      void finished `shouldBe` Just ()
      readIORef results `shouldReturn` 200
      slow `shouldSatisfy` (< 4 * clean + 1)
      ls <- readIORef logs
      any ("is slow" `isInfixOf`) ls `shouldBe` True

  it "finishes an evolve call whose every worker is killed mid-call: the states are recomputed on the replacements" $
    withTestClusterConfig 2 id $ \_ cluster -> do
      workers <- clusterWorkerInfo cluster
      ids <- resetStates cluster slowEvolver [1 .. 40]
      _ <- forkIO $ do
        threadDelay 150000
        forM_ workers $ \w -> signalProcess sigKILL (fromIntegral (infoPid w))
      out <- timeout 60000000 (evolveMany cluster slowEvolver (M.fromList [ (i, 20) | i <- ids ]))
      fmap (map (map snd) . M.elems) out `shouldBe` Just (map pure [1 .. 40])

  it "farmEither: gives a Left naming a throwing task and one that kills its workers, and every other result" $
    withTestClusterConfig 2 id $ \_ cluster -> do
      thrown <- farmEither cluster failAt13Task [0 .. 39]
      [ i | (i, Left (TaskFailed j _ _)) <- zip [0 :: Int ..] thrown, i == j ] `shouldBe` [13]
      [ y | Right y <- thrown ] `shouldBe` [ x + 1 | x <- [0 .. 39], x /= 13 ]
      killed <- farmEither cluster exitAt13Task [0 .. 39]
      [ (i, d) | (i, Left (TaskKilledWorkers j _ d _)) <- zip [0 :: Int ..] killed, i == j ] `shouldBe` [(13, 3)]
      [ y | Right y <- killed ] `shouldBe` [ x + 1 | x <- [0 .. 39], x /= 13 ]
      eventually ((== 2) <$> clusterWorkerCount cluster) `shouldReturn` True

  it "names an evolve state whose step kills its workers, within configMaxTaskDeaths deaths, and the cluster recovers" $
    withTestClusterConfig 2 id $ \_ cluster -> do
      ids <- resetStates cluster exitEvolver [1 .. 20]
      r <- timeout 60000000 (try (evolveMany cluster exitEvolver (M.fromList [ (i, 0) | i <- ids ])))
      case r of
        Just (Left (EvolveFailed _ st why)) -> do
          st `shouldBe` show (ids !! 12)
          why `shouldContain` "3 workers that were lost"
        other -> expectationFailure ("expected EvolveFailed, got " ++ show (fmap (fmap (const ())) other))
      eventually ((== 2) <$> clusterWorkerCount cluster) `shouldReturn` True
      -- a fresh population evolves on the restarted workers
      ids' <- resetStates cluster exitEvolver [1 .. 5]
      out <- evolveMany cluster exitEvolver (M.fromList [ (i, 0) | i <- ids' ])
      map (map snd) (M.elems out) `shouldBe` map pure [1 .. 5]

  it "checkpoints evolve states past the bound, so a lost worker's states replay at most that many steps" $ do
    let run bound = withTestClusterConfig 2 id $ \_ cluster -> do
          -- one worker takes part in each call, so no state moves (a move
          -- passes its bytes through the master too): lineages grow by one a call
          let opts = defaultEvolveOptions { evolveCheckpointSteps = bound, evolveWorkerLimit = Just 1 }
              -- each call gives every state one child (itself again)
              chain 0 ids = pure ids
              chain k ids = do
                out <- evolveManyWith opts cluster countEvolver (M.fromList [ (i, 1) | i <- ids ])
                chain (k - 1 :: Int) (map fst (concatMap snd (M.toList (fst out))))
          ids <- resetStatesWith opts cluster countEvolver [1 .. 20]
          ids' <- chain 10 ids
          reg <- readMVar (clusterRegistry cluster)
          let deepest = maximum (0 : map (lineageDepth (regOrigin reg) . SM.StateId . stateIdWord) ids')
          -- their worker is lost: they are recomputed on the other, from the checkpoint
          infos <- clusterWorkerInfo cluster
          let holders = map placedOn (SM.elems (regStates reg))
          forM_ [ i | i <- infos, infoId i `elem` holders ] $ \i -> signalProcess sigKILL (fromIntegral (infoPid i))
          out <- evolveManyWith opts cluster countEvolver (M.fromList [ (i, 1) | i <- ids' ])
          pure (deepest, sort (map snd (concatMap snd (M.toList (fst out)))))
    (deep4, outs4) <- run 4
    deep4 `shouldSatisfy` (<= 4)
    outs4 `shouldBe` sort [ s * 10 | s <- [1 .. 20] ]
    -- without checkpoints every step since the upload would be replayed
    (deep0, _) <- run 0
    deep0 `shouldBe` 10
