-- | Reductions on the workers ("Herd.Master.Job.Reduce"): groups cut in order, the
-- answer a single process gives (also for a combining function that is
-- not commutative), a throw naming its group, parts kept on a host
-- agent's host, and exact keyed counts when a worker is killed mid-job.
module ReduceSpec (spec) where

import Control.Concurrent (threadDelay)
import Control.Concurrent.Async (withAsync, wait)
import qualified Data.ByteString.Char8 as BC
import qualified Data.Map.Strict as M
import Herd
import Herd.Config
import Herd.Monitor
import Herd.Master.Job.Reduce (reduceGroups)
import System.Posix.Signals (sigKILL, signalProcess)
import Test.Hspec
import Test.QuickCheck
import HandAgent (withHandAgent)
import Control.Monad (forever)
import qualified Data.ByteString as B
import Data.IORef
import Data.List (isPrefixOf)
import System.Directory (doesDirectoryExist, getTemporaryDirectory, listDirectory)
import System.FilePath ((</>))
import TestTasks (bigPartBytes, bigPartReducer, orderedKeyedReducer, showReducer, slowCountPairs, slowCountReducer, throwingKeyedReducer)
import Control.Exception (try)
import Data.List (isInfixOf)

spec :: Spec
spec = describe "reductions on the workers" $ do
  it "cut the inputs in order into at most four non-empty groups per worker" $
    property $ \(NonNegative w) (xs :: [Int]) ->
      let gs = reduceGroups w xs
      in conjoin [ concat gs === xs, property (all (not . null) gs)
                 , property (length gs <= max 1 (4 * max 1 w)), property (null xs || not (null gs)) ]

  it "combine in input order on the workers, and say Nothing for no input" $ do
    let cfg = defaultConfig { configWorkers = Just 2, configSecret = SecretValue (BC.pack "reduce-spec-secret-0123456789") }
    withCluster cfg $ \cluster -> do
      True <- waitForWorkers cluster 2 30
      farmReduce cluster showReducer [1 .. 500] `shouldReturn` Just (concatMap (\x -> show x ++ ",") [1 .. 500 :: Int])
      farmReduce cluster showReducer [] `shouldReturn` Nothing
      farmReduce cluster showReducer [7] `shouldReturn` Just "7,"

  it "exchanges keyed parts between the workers and combines each key's values in input order" $ do
    let cfg = defaultConfig { configWorkers = Just 2, configSecret = SecretValue (BC.pack "reduce-spec-secret-0123456789") }
    withCluster cfg $ \cluster -> do
      True <- waitForWorkers cluster 2 30
      let xs = [1 .. 300 :: Int]
      reduceByKey cluster orderedKeyedReducer xs
        `shouldReturn` M.fromListWith (flip (++)) [ (x `mod` 3, show x ++ ",") | x <- xs ]
      reduceByKey cluster orderedKeyedReducer [] `shouldReturn` M.empty
      -- two direct workers: each one's parts for the other went through the master's links
      relayed <- statusRelayedParts <$> clusterStatus cluster
      relayed `shouldSatisfy` (> 0)
      outcome <- try (reduceByKey cluster throwingKeyedReducer [1 .. 100])
      case outcome of
        Left (TaskFailed i _ why) -> do
          -- 37 is input 36: its group (2 workers, 8 groups of 12 or 13) starts at input 25
          i `shouldBe` 25
          why `shouldSatisfy` ("no 37 here" `isInfixOf`)
        other -> expectationFailure ("expected the throw to fail the call, got " ++ show other)
      -- the cluster is whole for the next call
      reduceByKey cluster orderedKeyedReducer [4, 5] `shouldReturn` M.fromList [(1, "4,"), (2, "5,")]

  it "keeps the parts a host agent's workers send each other on the host" $ do
    let secret = "reduce-spec-agent-secret-0123456789"
        cfg = defaultConfig { configWorkers = Just 0, configSecret = SecretValue (BC.pack secret) }
        xs = [1 .. 300 :: Int]
    withCluster cfg $ \cluster ->
      withHandAgent cluster secret 2 $ \_ -> do
        True <- waitForWorkers cluster 2 30
        reduceByKey cluster orderedKeyedReducer xs
          `shouldReturn` M.fromListWith (flip (++)) [ (x `mod` 3, show x ++ ",") | x <- xs ]
        statusRelayedParts <$> clusterStatus cluster `shouldReturn` 0

  it "keeps the parts past a worker's budget on its disk until they are combined" $ do
    -- eight 12 MiB parts (96 MiB) for the one owner of key 0, whose limit
    -- of 320 MiB gives held values a budget of 80 MiB: at least one part
    -- is written to its spill directory, and gone once combined
    let cfg = defaultConfig { configWorkers = Just 2, configWorkerMemoryLimit = MemoryLimitMiB 320
                            , configSecret = SecretValue (BC.pack "reduce-spec-secret-0123456789") }
        partFiles pid = do
          tmp <- getTemporaryDirectory
          let dir = tmp </> ("herd-spill-" ++ show pid)
          there <- doesDirectoryExist dir
          if there then length . filter ("part-" `isPrefixOf`) <$> listDirectory dir else pure 0
    withCluster cfg $ \cluster -> do
      True <- waitForWorkers cluster 2 30
      pids <- map infoPid <$> clusterWorkerInfo cluster
      seen <- newIORef (0 :: Int)
      let watch = forever $ do
            n <- sum <$> mapM partFiles pids
            modifyIORef' seen (max n)
            threadDelay 20000
      answer <- withAsync watch $ \_ -> reduceByKey cluster bigPartReducer [1 .. 8]
      answer `shouldBe` M.fromList [(0, B.replicate bigPartBytes 1)]
      readIORef seen >>= (`shouldSatisfy` (>= 1))
      sum <$> mapM partFiles pids `shouldReturn` 0
      statusLostTotal <$> clusterStatus cluster `shouldReturn` 0

  it "gives the exact counts per key when a worker is killed mid-job" $ do
    let cfg = defaultConfig { configWorkers = Just 2, configSecret = SecretValue (BC.pack "reduce-spec-secret-0123456789") }
        docs = [ (d, 20) | d <- [1 .. 80] ]
        expected = M.fromListWith (+) (concatMap slowCountPairs docs)
    withCluster cfg $ \cluster -> do
      True <- waitForWorkers cluster 2 30
      withAsync (reduceByKey cluster slowCountReducer docs) $ \job -> do
        threadDelay 300000
        victim : _ <- clusterWorkerInfo cluster
        signalProcess sigKILL (fromIntegral (infoPid victim))
        counts <- wait job
        counts `shouldBe` expected
      lost <- statusLostTotal <$> clusterStatus cluster
      lost `shouldBe` 1
