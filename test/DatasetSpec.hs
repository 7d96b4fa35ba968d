-- | Datasets on a cluster ("Herd.Master.Job.Dataset"): a three-stage
-- pipeline (map, shuffle, join of co-partitioned datasets) gives what
-- one process gives, also when a worker is SIGKILLed between steps or
-- during one; the partition count asked for is the one used; the same
-- job run twice moves the same bytes; a dataset generated on the
-- workers never passes through the master.
module DatasetSpec (spec) where

import Control.Concurrent (threadDelay)
import Control.Concurrent.Async (withAsync, wait)
import Control.Exception (try)
import qualified Data.ByteString.Char8 as BC
import qualified Data.Map.Strict as M
import qualified Data.Set as S
import qualified Data.Vector.Unboxed as VU
import Data.List (isInfixOf)
import System.Directory (createDirectoryIfMissing, doesDirectoryExist, getTemporaryDirectory, removeDirectoryRecursive)
import System.FilePath ((</>))
import Herd
import Herd.Config
import Herd.Dataset
import Herd.Monitor
import System.Posix.Signals (sigKILL, signalProcess)
import Test.Hspec
import GHC.StaticPtr (StaticPtr)
import DatasetTasks

spec :: Spec
spec = describe "datasets held on the workers" $ do
  it "run a map, a shuffle and a join of co-partitioned datasets as one process would" $
    withTwo $ \cluster -> do
      out <- pipeline cluster tripled 500
      out `shouldBe` reference 500
      relayed <- statusRelayedBytes <$> clusterStatus cluster
      relayed `shouldSatisfy` (> 0)   -- the shuffles' parts went worker to worker

  it "give the same answer when a worker is SIGKILLed between steps" $
    withTwo $ \cluster -> do
      nums <- generateDataset cluster numbersGen 400 4
      sums <- shuffleDataset cluster sumByResidue 3 =<< mapDataset cluster tripled nums
      killOne cluster
      counts <- shuffleDataset cluster countByResidue 3 nums
      both <- zipDatasets cluster joined sums counts
      M.unions <$> collectDataset cluster both `shouldReturn` reference 400

  it "give the same answer when a worker is SIGKILLed during a step" $
    withTwo $ \cluster -> do
      withAsync (pipeline cluster slowTripled 300) $ \job -> do
        threadDelay 100000
        killOne cluster
        wait job `shouldReturn` reference 300

  it "hold the caller's partitions, read from a lazy list, and make them again after a SIGKILL" $
    withTwo $ \cluster -> do
      let parts = [ [100 * k .. 100 * k + 99] | k <- [0 .. 6 :: Int] ]
      ds <- fromPartitions cluster parts
      datasetPartitions ds `shouldBe` 7
      killOne cluster
      tripledBack <- collectDataset cluster =<< mapDataset cluster tripled ds
      tripledBack `shouldBe` map (map (* 3)) parts
      empty <- try (fromPartitions cluster ([] :: [[Int]]))
      case empty of
        Left (ArgumentError {}) -> pure ()
        other -> expectationFailure ("no partitions gave " ++ either show (const "a dataset") other)

  it "fail a step whose function throws, naming the partition, and go on" $
    withTwo $ \cluster -> do
      nums <- generateDataset cluster numbersGen 100 4
      bad <- try (mapDataset cluster refuseSeven nums)
      case bad of
        Left (TaskFailed j _ why) -> (j, "a seven" `isInfixOf` why) `shouldBe` (3, True)
        other -> expectationFailure ("a throwing map gave " ++ either show (const "a dataset") other)
      -- the cluster and the input are as they were
      M.unions <$> (collectDataset cluster =<< shuffleDataset cluster countByResidue 3 nums)
        `shouldReturn` M.fromListWith (+) [ (residues x, 1) | x <- [0 .. 100] ]

  it "give the partitions made, whether the runtime can compact them or not" $
    withTwo $ \cluster -> do
      -- unboxed doubles go in a compact region; pinned bytes cannot
      blocks <- generateDataset cluster blockGen 1000 3
      map (VU.sum :: VU.Vector Double -> Double) <$> collectDataset cluster blocks
        `shouldReturn` [ sum [ fromIntegral (i + j) | i <- [0 .. 999 :: Int] ] | j <- [0 .. 2] ]
      labels <- generateDataset cluster labelsGen 2 3
      collectDataset cluster labels `shouldReturn` [ BC.pack (concat (replicate 2 ("part " ++ show j ++ ";"))) | j <- [0 .. 2 :: Int] ]

  it "use the partition count asked for" $
    withTwo $ \cluster -> do
      nums <- generateDataset cluster numbersGen 100 4
      byKey <- shuffleDataset cluster countByResidue 5 nums
      datasetPartitions byKey `shouldBe` 5
      sizes <- queryDataset cluster mapSize () byKey
      length sizes `shouldBe` 5
      sum sizes `shouldBe` 7
      bad <- try (zipDatasets cluster joined byKey =<< shuffleDataset cluster countByResidue 3 nums)
      case bad of
        Left (ArgumentError {}) -> pure ()
        other -> expectationFailure ("zipping 5 partitions with 3 gave " ++ either show (const "a dataset") other)

  it "move the same bytes when the same job runs twice (placement is stable)" $
    withTwo $ \cluster -> do
      let relayed = statusRelayedBytes <$> clusterStatus cluster
      r0 <- relayed
      _ <- pipeline cluster tripled 2000
      r1 <- relayed
      _ <- pipeline cluster tripled 2000
      r2 <- relayed
      r1 - r0 `shouldSatisfy` (> 0)
      r2 - r1 `shouldBe` r1 - r0

  it "hand large shuffle parts between the master's own workers in files, not through the master" $
    withTwo $ \cluster -> do
      before <- clusterStatus cluster
      blocks <- generateDataset cluster blockGen 400000 2   -- 3.2 MB a block
      cut <- shuffleDataset cluster cutBlocks 2 blocks
      sums <- queryDataset cluster blockSum () cut
      after <- clusterStatus cluster
      let block j = [ fromIntegral (i + j) | i <- [0 .. 399999 :: Int] ] :: [Double]
          half h = concat [ take 200000 (drop (200000 * h) (block j)) | j <- [0, 1] ]
      sums `shouldBe` [ sum (half 0), sum (half 1) ]
      -- each block's other half went to the other worker as a file
      statusHandedParts after - statusHandedParts before `shouldBe` 2
      statusHandedBytes after - statusHandedBytes before `shouldSatisfy` (>= 2 * 1600000)
      statusRelayedBytes after - statusRelayedBytes before `shouldBe` 0

  it "run an action once on every worker" $
    withTwo $ \cluster -> do
      answers <- runOnEveryWorker cluster workerPid 21
      infos <- clusterWorkerInfo cluster
      map (snd . snd) answers `shouldBe` [42, 42]
      S.fromList (map (fst . snd) answers) `shouldBe` S.fromList (map infoPid infos)
      map fst answers `shouldBe` map infoId infos

  it "sweep away the parts and datasets directories of masters that are gone" $ do
    tmp <- getTemporaryDirectory
    -- no process has a number this high (Linux's limit is 2^22)
    let stale = [ tmp </> "herd-parts-999999999-1", tmp </> "herd-datasets-999999999-ab" ]
    mapM_ (createDirectoryIfMissing True) stale
    writeFile (head stale </> "part-1-2-0-0-0") "a part left behind"
    withTwo $ \_ -> mapM doesDirectoryExist stale `shouldReturn` [False, False]

  it "never pass a dataset generated on the workers through the master" $
    withTwo $ \cluster -> do
      let linkBytes = do
            s <- clusterStatus cluster
            pure (sum [ bytesSent p + bytesReceived p | r <- statusWorkers s, Just p <- [rowLink r] ])
      before <- linkBytes
      blocks <- generateDataset cluster blockGen 500000 4   -- 16 MB held on the workers
      sums <- queryDataset cluster blockSum () blocks
      after <- linkBytes
      sums `shouldBe` [ sum [ fromIntegral (i + j) | i <- [0 .. 499999 :: Int] ] | j <- [0 .. 3] ]
      after - before `shouldSatisfy` (< 64 * 1024)
  it "read a dataset from files on the workers, never through the master, and read a lost partition again" $
    withTwo $ \cluster -> do
      tmp <- getTemporaryDirectory
      let dir = tmp </> "herd-dataset-spec-files"
          paths = [ dir </> ("numbers-" ++ show j) | j <- [0 .. 3 :: Int] ]
          numbers j = [ j * 100000 .. j * 100000 + 99999 ] :: [Int]
          expected = [ fromIntegral (sum (numbers j)) | j <- [0 .. 3] ] :: [Double]
          linkBytes = do
            s <- clusterStatus cluster
            pure (sum [ bytesSent p + bytesReceived p | r <- statusWorkers s, Just p <- [rowLink r] ])
      createDirectoryIfMissing True dir
      mapM_ (\(j, path) -> writeFile path (unlines (map show (numbers j)))) (zip [0 ..] paths)
      before <- linkBytes
      blocks <- readDataset cluster numbersFile paths   -- 2.6 MB of text, read on the workers
      sums <- queryDataset cluster blockSum () blocks
      after <- linkBytes
      sums `shouldBe` expected
      after - before `shouldSatisfy` (< 64 * 1024)
      killOne cluster
      queryDataset cluster blockSum () blocks `shouldReturn` expected
      missing <- try (readDataset cluster numbersFile [dir </> "no-such-file"])
      case missing of
        Left (TaskFailed _ _ why) -> why `shouldSatisfy` ("no-such-file" `isInfixOf`)
        other -> expectationFailure ("expected the unreadable file named, got " ++ show (fmap (const ()) other))
      removeDirectoryRecursive dir
  where
    withTwo act = do
      let cfg = defaultConfig { configWorkers = Just 2, configSecret = SecretValue (BC.pack "dataset-spec-secret-0123456789") }
      withCluster cfg $ \cluster -> do
        True <- waitForWorkers cluster 2 30
        act cluster
    killOne cluster = do
      victim : _ <- clusterWorkerInfo cluster
      signalProcess sigKILL (fromIntegral (infoPid victim))

-- The numbers up to the top, tripled, summed per residue, joined with
-- the count per residue of the numbers, all on the workers.
pipeline :: Cluster -> StaticPtr (DatasetMap [Int] [Int]) -> Int -> IO (M.Map Int (Int, Int))
pipeline cluster mapper top = do
  nums <- generateDataset cluster numbersGen top 4
  sums <- shuffleDataset cluster sumByResidue 3 =<< mapDataset cluster mapper nums
  counts <- shuffleDataset cluster countByResidue 3 nums
  both <- zipDatasets cluster joined sums counts
  out <- M.unions <$> collectDataset cluster both
  releaseDatasets cluster [nums]
  releaseDatasets cluster [sums, counts]
  releaseDatasets cluster [both]
  pure out

-- What one process gives.
reference :: Int -> M.Map Int (Int, Int)
reference top = M.intersectionWith (,) (M.fromListWith (+) [ (residues (3 * x), 3 * x) | x <- [0 .. top] ])
                                       (M.fromListWith (+) [ (residues x, 1) | x <- [0 .. top] ])
