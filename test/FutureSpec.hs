-- | Futures from the caller ("Herd.Future") on two local workers: a
-- graph of futures gives what sequential evaluation gives, also with a
-- worker killed while it runs; a failing future fails its dependents with
-- its error; a cancelled one throws and leaves the cluster working. Held
-- futures keep their values on the workers: a chain of them gives the
-- sequential value, also when the worker holding it is killed.
module FutureSpec (spec) where

import Control.Concurrent (threadDelay)
import Control.Concurrent.Async (AsyncCancelled (..))
import Control.Exception (fromException, try)
import qualified Data.ByteString.Char8 as BC
import qualified Data.IntMap.Strict as IM
import Data.List (isInfixOf)
import Herd
import Herd.Config
import Herd.Examples.Par (nfib, nfibTask, nodeTask, nodeValue, sumTask)
import Herd.Future
import Herd.Monitor
import System.Posix.Signals (sigKILL, signalProcess)
import Test.Hspec
import Test.QuickCheck
import Test.QuickCheck.Monadic (assert, monadicIO, run)
import TestTasks (refAddAll, refSlowInc, refSquare)

-- A random graph: node i depends on some earlier nodes.
graphGen :: Int -> Gen [(Int, [Int])]
graphGen most = do
  n <- chooseInt (1, most)
  mapM (\i -> (,) i <$> if i == 0 then pure [] else do
                  k <- chooseInt (0, min 3 i)
                  vectorOf k (chooseInt (0, i - 1))) [0 .. n - 1]

sequentialGraph :: [(Int, [Int])] -> [Int]
sequentialGraph g = IM.elems (foldl (\done (i, deps) -> IM.insert i (nodeValue i (map (done IM.!) deps)) done) IM.empty g)

-- Every node a future: a submission of its number and its inputs' futures.
futureGraph :: Cluster -> [(Int, [Int])] -> IO [Int]
futureGraph cluster g = do
  let go done [] = pure done
      go done ((i, deps) : rest) = do
        number <- submit cluster sumTask [i]
        f <- submitWith cluster nodeTask (number : map (done IM.!) deps)
        go (IM.insert i f done) rest
  futures <- go IM.empty g
  mapM await (IM.elems futures)

spec :: Spec
spec = describe "futures from the caller" $ do
  let cfg = defaultConfig { configWorkers = Just 2, configSecret = SecretValue (BC.pack "future-spec-secret-0123456789") }
  it "gives a random graph of futures what sequential evaluation gives, 1000 nodes included" $
    withCluster cfg $ \cluster -> do
      True <- waitForWorkers cluster 2 30
      g <- generate (resize 1000 (graphGen 1000))
      let big = take 1000 (g ++ [ (i, [i - 1]) | i <- [length g .. 999] ])
      futureGraph cluster big `shouldReturn` sequentialGraph big
      result <- quickCheckWithResult stdArgs { maxSuccess = 20, chatty = False } $ forAll (graphGen 60) $ \small -> monadicIO $ do
        got <- run (futureGraph cluster small)
        assert (got == sequentialGraph small)
      isSuccess result `shouldBe` True
  it "fails a future's dependents with its error, and leaves the others" $
    withCluster cfg $ \cluster -> do
      bad <- submit cluster nodeTask [-1]
      good <- submit cluster nodeTask [5]
      after <- submitWith cluster sumTask [bad, good]
      r <- try (await after)
      case r of
        Left (TaskFailed _ _ why) -> why `shouldSatisfy` ("node -1 refuses" `isInfixOf`)
        other -> expectationFailure ("expected the input's TaskFailed, got " ++ show (fmap (const ()) other))
      await good `shouldReturn` nodeValue 5 []
  it "cancels a future that runs, and the cluster goes on" $
    withCluster cfg $ \cluster -> do
      long <- submit cluster nfibTask (48, 20)
      cancel long
      r <- poll long
      fmap (either (\e -> fromException e == Just AsyncCancelled) (const False)) r `shouldBe` Just True
      (await =<< submit cluster sumTask [1, 2, 3]) `shouldReturn` 6
  it "gives the exact values when a worker is killed while futures run" $
    withCluster cfg $ \cluster -> do
      True <- waitForWorkers cluster 2 30
      first <- submit cluster nfibTask (36, 20)
      slow <- mapM (\n -> submit cluster nfibTask (n, 20)) [39 .. 41]
      -- once the small one is in, the others are still running
      await first `shouldReturn` nfibOf 36
      victim : _ <- clusterWorkerInfo cluster
      signalProcess sigKILL (fromIntegral (infoPid victim))
      mapM await slow `shouldReturn` [ nfibOf n | n <- [39 .. 41] ]
      statusLostTotal <$> clusterStatus cluster `shouldReturn` 1
  it "keeps held futures' values on the workers, and makes them again when their worker is killed" $
    withCluster cfg $ \cluster -> do
      True <- waitForWorkers cluster 2 30
      a <- submitHeld cluster refSquare 3
      b <- submitOn cluster refSquare a
      (await b >>= fetch cluster) `shouldReturn` 81
      (await a >>= fetch cluster) `shouldReturn` 9
      -- a chain of 30 steps of 20 ms, its holder killed a third of the way
      start <- submitHeld cluster refSquare 4
      let chain 0 f = pure f
          chain k f = submitOn cluster refSlowInc f >>= chain (k - 1 :: Int)
      end <- chain 30 start
      _ <- await start
      threadDelay 200000
      victim : _ <- clusterWorkerInfo cluster
      signalProcess sigKILL (fromIntegral (infoPid victim))
      (await end >>= fetch cluster) `shouldReturn` 46
      statusLostTotal <$> clusterStatus cluster `shouldReturn` 1
  it "runs a held task where the first of several held futures is, the others' values given to it" $
    withCluster cfg $ \cluster -> do
      True <- waitForWorkers cluster 2 30
      [a, b, c] <- mapM (submitHeld cluster refSquare) [3, 4, 5]
      d <- submitOnWith cluster refAddAll a [b, c]
      (await d >>= fetch cluster) `shouldReturn` 50
      (await a >>= fetch cluster) `shouldReturn` 9
      -- every worker killed: the value is made again from its task, its
      -- input's lineage and the values it was given
      infos <- clusterWorkerInfo cluster
      mapM_ (\i -> signalProcess sigKILL (fromIntegral (infoPid i))) infos
      True <- waitForWorkers cluster 2 30
      (await d >>= fetch cluster) `shouldReturn` 50
  where
    nfibOf :: Int -> Int
    nfibOf = nfib
