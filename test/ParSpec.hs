-- | The Par monad ("Herd.Par") and divide and conquer over a cluster
-- ("Herd.Skeleton"): random graphs of futures give what sequential
-- evaluation gives, deep recursions with a get at every level finish,
-- misuse is named, and nfib divided over two workers is exact, also when
-- one of them is killed mid-job.
module ParSpec (spec) where

import Control.Concurrent (threadDelay)
import Control.Concurrent.Async (wait, withAsync)
import Control.Exception (evaluate, try)
import qualified Data.ByteString.Char8 as BC
import qualified Data.IntMap.Strict as IM
import Herd
import Herd.Config
import Herd.Examples.Par
import Herd.Monitor
import Herd.Par
import Herd.Skeleton
import System.Posix.Signals (sigKILL, signalProcess)
import Test.Hspec
import Test.QuickCheck

-- A random graph of futures: node i depends on some earlier nodes; the
-- nodes are started in a random order, so a node often waits for one
-- started after it.
data Graph = Graph [(Int, [Int])] [Int] deriving Show

instance Arbitrary Graph where
  arbitrary = do
    n <- chooseInt (1, 1000)
    g <- mapM (\i -> (,) i <$> (if i == 0 then pure [] else sublistOf' i)) [0 .. n - 1]
    Graph g <$> shuffle [0 .. n - 1]
    where sublistOf' i = do
            k <- chooseInt (0, min 4 i)
            vectorOf k (chooseInt (0, i - 1))

sequentialGraph :: Graph -> [Int]
sequentialGraph (Graph g _) = IM.elems (foldl step IM.empty g)
  where step done (i, deps) = IM.insert i (nodeValue i (map (done IM.!) deps)) done

-- Every node a future made first, then each node's child forked in the
-- start order, getting its inputs and putting its value.
parGraph :: Graph -> [Int]
parGraph (Graph g order) = runPar $ do
  vars <- IM.fromList <$> mapM (\(i, _) -> (,) i <$> new) g
  let deps = IM.fromList g
  mapM_ (\i -> fork (mapM (get . (vars IM.!)) (deps IM.! i) >>= put (vars IM.! i) . nodeValue i)) order
  mapM get (IM.elems vars)

-- A binary recursion of this depth with a get at every level: its leaves.
deep :: Int -> Par Int
deep 0 = pure 1
deep d = do
  v <- spawn (deep (d - 1))
  w <- deep (d - 1)
  x <- get v
  pure (x + w)

spec :: Spec
spec = describe "the Par monad and divide and conquer" $ do
  it "gives a random graph of futures the values sequential evaluation gives" $
    property $ \g -> parGraph g === sequentialGraph g
  it "finishes a depth-20 recursion with a get at every level" $
    runPar (deep 20) `shouldBe` 2 ^ (20 :: Int)
  it "agrees with sequential code on nfib, sumEuler, queens and mandelbrot" $ do
    runPar (nfibPar 10 22) `shouldBe` nfib 22
    map (runPar . nfibPar 0) [0 .. 12] `shouldBe` map nfib [0 .. 12]
    runPar (sumEulerPar 7 (1, 300)) `shouldBe` sumEuler (1, 300)
    runPar (queensPar 3 7 []) `shouldBe` queens 7
    runPar (mandelPar 3 40 (0, 39)) `shouldBe` mandelRows 40 (0, 39)
    runPar (spawnGetLoop 1000) `shouldBe` sum [0 .. 999]
  it "names a variable put twice, and a result that waits forever" $ do
    try (evaluate (runPar (new >>= \v -> put_ v (1 :: Int) >> put_ v 2 >> get v))) `shouldReturn` Left PutTwice
    try (evaluate (runPar (new >>= \v -> get (v :: IVar Int)))) `shouldReturn` Left WaitsForever
  it "divides and combines to the sequential answer, at any piece count" $
    property $ forAll (chooseInt (1, 200)) $ \want -> forAll (chooseInt (4, 18)) $ \n ->
      let tree = divideTree nfibDivide want (n, 2)
          leaves (Piece a) = [a]
          leaves (Parts _ ts) = concatMap leaves ts
      in conquerTree nfibDivide tree [ nfib m | (m, _) <- leaves tree ] === nfib n
  it "solves nfib divided over two workers, exactly, also when one is killed mid-job" $ do
    let cfg = defaultConfig { configWorkers = Just 2, configSecret = SecretValue (BC.pack "par-spec-secret-0123456789") }
    withCluster cfg $ \cluster -> do
      True <- waitForWorkers cluster 2 30
      divideAndConquer cluster nfibDivide nfibTask (25, 0) `shouldReturn` nfib 25
      divideAndConquer cluster sumEulerDivide sumEulerTask (1, 2000) `shouldReturn` sumEuler (1, 2000)
      withAsync (divideAndConquer cluster nfibDivide nfibTask (37, 20)) $ \job -> do
        let firstAnswer = do
              done <- statusTasksDone <$> clusterStatus cluster
              if done > 2 then pure () else threadDelay 5000 >> firstAnswer
        firstAnswer
        victim : _ <- clusterWorkerInfo cluster
        signalProcess sigKILL (fromIntegral (infoPid victim))
        wait job `shouldReturn` nfib 37
      statusLostTotal <$> clusterStatus cluster `shouldReturn` 1
