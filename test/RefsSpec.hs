-- | Results that stay on the workers ("Herd.Master.Job.Refs"): kept where they were
-- made, used where they live, fetched unchanged, recomputed exactly when
-- their worker is killed, and gone once released.
module RefsSpec (spec) where

import Control.Concurrent (threadDelay)
import Control.Concurrent.Async (wait, withAsync)
import Control.Exception (try)
import qualified Data.ByteString.Char8 as BC
import Herd
import Herd.Config
import Herd.Monitor
import System.Posix.Signals (sigKILL, signalProcess)
import Test.Hspec
import qualified Data.Map.Strict as M
import TestTasks (countEvolver, refPlus, refSlowFailAt13, refSlowInc, refSquare, rendezvousEvolver, rendezvousRef)
import Control.Concurrent.Async (concurrently)
import Control.Exception (finally)
import Control.Monad (forM_)
import System.Timeout (timeout)
import Herd.Examples.ParticleFilter (FilterSetup (..), initialParticles, particleStep, runFilter, runSequential)
import System.Directory (createDirectoryIfMissing, getTemporaryDirectory, removeDirectoryRecursive)
import System.FilePath ((</>))

config :: Config
config = defaultConfig { configWorkers = Just 2, configSecret = SecretValue (BC.pack "refs-spec-secret-0123456789") }

spec :: Spec
spec = describe "results that stay on the workers" $ do
  it "are refused, naming both clusters, by a cluster that did not make them, as are its states and shared values" $
    withCluster config { configWorkers = Just 1 } $ \one ->
    withCluster config { configWorkers = Just 1 } $ \two -> do
      True <- waitForWorkers one 1 30
      True <- waitForWorkers two 1 30
      let foreignTo what act = do
            r <- try act
            case r of
              Left e@(ForeignHandle h owner here) -> do
                h `shouldContain` what
                owner `shouldNotBe` here
                show e `shouldContain` owner
              Left other -> expectationFailure ("a foreign " ++ what ++ " should be refused as foreign, got " ++ show other)
              Right _ -> expectationFailure ("a foreign " ++ what ++ " was taken")
      held <- putRefs one [1 .. 10 :: Int]
      foreignTo "Ref" (fetchMany two held)
      foreignTo "Ref" (mapRefs two refSquare held)
      foreignTo "Ref" (releaseMany two held)
      -- nothing of the cluster that made them was touched
      fetchMany one held `shouldReturn` [1 .. 10]
      ids <- resetStates one countEvolver [1 .. 4]
      foreignTo "state" (evolveMany two countEvolver (M.fromList [ (i, 1) | i <- ids ]))
      outs <- evolveMany one countEvolver (M.fromList [ (i, 1) | i <- ids ])
      M.size outs `shouldBe` 4
      shared <- share one (42 :: Int)
      foreignTo "Shared" (unshare two shared)
      unshare one shared

  it "run beside an evolve call on the same cluster, both exact" $
    withCluster config $ \cluster -> do
      True <- waitForWorkers cluster 2 30
      tmp <- getTemporaryDirectory
      let dir = tmp </> ("herd-rendezvous-" ++ show (clusterAddress cluster))
          file name = dir </> name
      createDirectoryIfMissing True dir
      flip finally (removeDirectoryRecursive dir) $ do
        -- the evolve state on worker 1 (the call may use only it); the Refs
        -- on workers 1 and 2: the one on worker 2 waits for the evolve
        -- step's file, the evolve step for its: they meet only if both
        -- calls run at once (run in turn, each waits 20 s in vain)
        let one = defaultEvolveOptions { evolveWorkerLimit = Just 1 }
        ids <- resetStatesWith one cluster rendezvousEvolver [(file "evolve", file "ref")]
        refs <- putRefs cluster [(file "spare", file "spare"), (file "ref", file "evolve")]
        (evolved, fetched) <- concurrently
          (evolveManyWith one cluster rendezvousEvolver (M.fromList [ (i, ()) | i <- ids ]))
          (mapRefs cluster rendezvousRef refs >>= fetchMany cluster)
        map (map snd) (M.elems (fst evolved)) `shouldBe` [[True]]
        fetched `shouldBe` [True, True]
        -- the Refs outlive a reset of the evolve states
        again <- resetStates cluster countEvolver [1, 2, 3]
        fetchMany cluster refs `shouldReturn` [(file "spare", file "spare"), (file "ref", file "evolve")]
        -- and an evolve call after a Ref call steps with its own function,
        -- not the one the Ref call named last on the workers
        outs <- evolveMany cluster countEvolver (M.fromList [ (i, 1) | i <- again ])
        map (map snd) (M.elems outs) `shouldBe` [[10], [20], [30]]

  it "are kept where made, used where they live, fetched unchanged, and gone once released" $
    withCluster config $ \cluster -> do
      True <- waitForWorkers cluster 2 30
      squares <- farmRefs cluster refSquare [1 .. 200]
      populationSize cluster `shouldReturn` 200
      incs <- mapRefs cluster refSlowInc squares
      fetchMany cluster incs `shouldReturn` [ x * x + 1 | x <- [1 .. 200] ]
      -- the inputs are still there, unchanged
      fetchMany cluster squares `shouldReturn` [ x * x | x <- [1 .. 200] ]
      fetch cluster (head incs) `shouldReturn` 2
      populationSize cluster `shouldReturn` 400
      releaseMany cluster squares
      populationSize cluster `shouldReturn` 200
      r <- try (fetch cluster (head squares))
      case r of
        Left (UnknownStates _) -> pure ()
        other -> expectationFailure ("a released Ref should be refused, got " ++ show (either show show other))
      fetchMany cluster incs `shouldReturn` [ x * x + 1 | x <- [1 .. 200] ]

  it "answer queries where they are held, keep their values, and refuse a Ref named twice in one call" $
    withCluster config $ \cluster -> do
      True <- waitForWorkers cluster 2 30
      held <- putRefs cluster [10, 20 .. 500 :: Int]
      queryRefs cluster refPlus (zip held [1 ..]) `shouldReturn` zipWith (+) [10, 20 .. 500] [1 ..]
      queryRefs cluster refPlus [ (r, 7) | r <- held ] `shouldReturn` map (+ 7) [10, 20 .. 500]
      fetchMany cluster held `shouldReturn` [10, 20 .. 500]
      r <- try (queryRefs cluster refPlus [(head held, 1), (head held, 2)])
      case r of
        Left (ArgumentError 1 _ why) -> why `shouldContain` "named twice"
        other -> expectationFailure ("a Ref named twice should be refused, got " ++ show (either show show other))

  it "lose only the inputs of a call whose function threw; the others stay" $
    withCluster config $ \cluster -> do
      True <- waitForWorkers cluster 2 30
      kept <- putRefs cluster [100 .. 119 :: Int]
      doomed <- putRefs cluster [1 .. 20 :: Int]
      _ <- mapRefs cluster refSquare kept   -- the workers know refSquare now
      -- (its workers still have others of the call queued when 13 throws:
      -- what they report of them later is not the next call's business)
      r <- try (mapRefs cluster refSlowFailAt13 doomed)
      case r of
        Left (EvolveFailed _ _ why) -> why `shouldContain` "unlucky thirteen"
        other -> expectationFailure ("a throwing step should fail the call, got " ++ show (either show (const "results") other))
      -- the failed call told the workers its own function: the next call
      -- with refSquare tells them refSquare again
      squares <- mapRefs cluster refSquare kept
      fetchMany cluster squares `shouldReturn` [ x * x | x <- [100 .. 119] ]
      fetchMany cluster kept `shouldReturn` [100 .. 119]
      populationSize cluster `shouldReturn` 60
      r2 <- try (fetch cluster (head doomed))
      case r2 of
        Left (UnknownStates _) -> pure ()
        other -> expectationFailure ("a Ref of the failed call should be refused, got " ++ show (either show show other))

  it "run evolve calls and Ref calls side by side, round after round, none waiting for ever (states moved between workers)" $
    withCluster config { configWorkers = Just 4 } $ \cluster -> do
      True <- waitForWorkers cluster 4 30
      let setup = FilterSetup 300 3 7 0 20000
          reference = runSequential setup
          evolveRounds = forM_ [1 .. 8 :: Int] $ \_ -> do
            ids <- resetStates cluster particleStep (initialParticles setup)
            r <- timeout 60000000 (runFilter setup (evolveMany cluster particleStep) ids)
            r `shouldBe` Just reference
          refRounds = forM_ [1 .. 150 :: Int] $ \k -> do
            refs <- putRefs cluster [k .. k + 15]
            r <- timeout 60000000 (queryRefs cluster refPlus [ (x, 1) | x <- refs ])
            releaseMany cluster refs
            r `shouldBe` Just [ x + 1 | x <- [k .. k + 15] ]
      _ <- concurrently evolveRounds refRounds
      pure ()

  it "give exactly the results of a run without kills when a worker holding them is killed mid-job" $
    withCluster config $ \cluster -> do
      True <- waitForWorkers cluster 2 30
      squares <- farmRefs cluster refSquare [1 .. 60]
      -- a worker holding half of them killed while the next step runs
      withAsync (mapRefs cluster refSlowInc squares) $ \job -> do
        threadDelay 200000
        victim : _ <- clusterWorkerInfo cluster
        signalProcess sigKILL (fromIntegral (infoPid victim))
        incs <- wait job
        fetchMany cluster incs `shouldReturn` [ x * x + 1 | x <- [1 .. 60] ]
      fetchMany cluster squares `shouldReturn` [ x * x | x <- [1 .. 60 :: Int] ]
      statusLostTotal <$> clusterStatus cluster `shouldReturn` 1
