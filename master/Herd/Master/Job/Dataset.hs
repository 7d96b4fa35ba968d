{-# LANGUAGE ScopedTypeVariables #-}
-- | Partitioned datasets that stay on the workers (Spark's cached RDDs,
-- Dask's collections): a 'Dataset' is a number of partitions, each a
-- value held on one worker, made from the caller's partitions or
-- generated where it lives; narrow steps ('mapDataset', 'zipDatasets')
-- run where the partitions are and leave their results there; a shuffle
-- ('shuffleDataset') cuts each partition into parts, sends each part
-- straight to the worker of its output partition (through the host agent
-- on one host, the master's links otherwise) and leaves every combined
-- partition held there; only a query's small answers ('queryDataset') and
-- a collect come back.
--
-- > graph <- generateDataset cluster graphGen size 8            -- made on the workers
-- > ranks <- mapDataset cluster initialRanks graph              -- held beside the graph
-- > parts <- zipDatasets cluster contributions graph ranks      -- where both are
-- > next  <- shuffleDataset cluster sumByTarget 8 parts         -- worker to worker
-- > delta <- queryDataset cluster difference () =<< zipDatasets cluster ... next ranks
--
-- The plan is pure ("Herd.Core.Dataset.Place", "Herd.Core.Dataset.Book"):
-- every dataset of @n@ partitions puts partition @j@ on the same worker,
-- so datasets of one partition count are co-partitioned (a zip needs no
-- shuffle), and a placement changes only for a worker lost, so a job run
-- twice moves the same bytes.
--
-- Promises: a dataset's partitions are the values a single process would
-- compute, also when workers are killed meanwhile (a partition lost with
-- its worker is made again from its lineage: the same partitions of a
-- narrow step's inputs, the whole input of a shuffle, the caller's bytes
-- or the generator); a call that cannot get its partitions made after
-- several tries fails with 'PartitionsLost'; what a function throws fails
-- the call with 'TaskFailed' naming the partition, and the dataset it was
-- making is not made (nothing of it stays on the workers); calls on
-- datasets take turns. A value made is evaluated as far as its encoded
-- size needs (a vector, a map's structure), not encoded: an error hidden
-- inside elements of a fixed size shows in the step that reads them.
-- With no worker linked and none coming, a call fails with 'NoWorkers'.
module Herd.Master.Job.Dataset
  ( Dataset
  , datasetPartitions
  , fromPartitions
  , generateDataset
  , readDataset
  , mapDataset
  , zipDatasets
  , shuffleDataset
  , queryDataset
  , collectDataset
  , releaseDatasets
  ) where

import Control.Concurrent (threadDelay)
import Control.Concurrent.MVar (modifyMVar)
import Control.Exception (evaluate, onException, throwIO, try)
import Control.Monad (foldM, forM, when)
import qualified Data.ByteString as B
import Data.IORef
import qualified Data.Map.Strict as M
import qualified Data.Set as S
import Data.Store (Store, decode, encode)
import Data.Word (Word64)
import GHC.StaticPtr (StaticPtr, deRefStaticPtr)
import Herd.Core.Base (TaskRef (..), WorkerId)
import Herd.Core.Dataset.Book
import Herd.Core.Dataset.Place (DatasetId, Redo (..), recoveryPlan)
import Herd.Core.Dataset.Stage (StageJob (..), StageRun (..))
import Herd.Core.Error (HerdError (..))
import Herd.Core.Exchange (HeldShuffle (..))
import Herd.Master.Calls (dropDatasetParts, runShuffle, runStage)
import Herd.Master.Cluster
import Herd.Task.Closure (Closure (..), closureRef)
import Herd.Task.Partition
import Herd.Task (tryUser)
import System.Directory (createDirectoryIfMissing)
import System.FilePath ((</>))

-- | A dataset whose partitions, each of type @p@, are held on the
-- cluster's workers. It belongs to the cluster that made it.
data Dataset p = Dataset
  { dsTag   :: !Word64
  , dsId    :: !DatasetId
  , dsParts :: !Int
  }

instance Show (Dataset p) where
  show d = "Dataset " ++ show (dsId d) ++ " of " ++ show (dsParts d) ++ " partitions (" ++ describeTag (dsTag d) ++ ")"

-- | How many partitions the dataset has.
datasetPartitions :: Dataset p -> Int
datasetPartitions = dsParts

-- | Hold these values on the workers, one partition each, spread over
-- them. The list is read once, a partition at a time, and each is sent
-- as it is encoded, a few at a time (one per worker), so the master
-- holds only that wave's encodings in memory (no bench measures its
-- memory yet); it keeps each encoding in a file on its disk to make a lost
-- partition again (use 'generateDataset' for data the master should never
-- hold at all).
fromPartitions :: Store p => Cluster -> [p] -> IO (Dataset p)
fromPartitions cluster ps = modifyMVar (clDatasets cluster) $ \book0 -> do
  createDirectoryIfMissing True (clDatasetDir cluster)
  let (d, book1) = newDataset 0 (FromCaller M.empty) book0
  live <- S.toList <$> linkedWorkers cluster
  -- partition j goes where a fresh placement puts it: round the workers
  (n, files, held) <- streamIn cluster d live (zip [0 ..] ps) `onException` dropDatasetParts cluster [d]
  when (n == 0) $ throwIO (ArgumentError 0 "fromPartitions" "a dataset needs at least one partition")
  let book2 = setRecipe d (FromCaller files) (setParts d n book1)
      (placed, book3) = placementFor live n book2
      -- partitions that went elsewhere than the placement (one made
      -- earlier for this count) are sent again from their files
      book4 = recordHeld d (M.filterWithKey (\j w -> M.lookup j placed == Just w) held) book3
  book5 <- retrying cluster book4 (\b -> ensure cluster b d) `onException` dropDatasetParts cluster [d]
  pure (book5, Dataset (clusterTag cluster) d n)

-- Encode and send the partitions a wave at a time (one per worker), each
-- kept in its file; how many there were, their files and where each is
-- held (a wave whose worker was lost leaves those out: they are sent again).
streamIn :: Store p => Cluster -> DatasetId -> [WorkerId] -> [(Int, p)] -> IO (Int, M.Map Int FilePath, M.Map Int WorkerId)
streamIn cluster d live = go 0 M.empty M.empty
  where
    wave = length live
    go n files held xs = case splitAt wave xs of
      ([], _) -> pure (n, files, held)
      (now, rest) -> do
        sent <- forM now $ \(j, p) -> do
          bytes <- tryUser (evaluate (encode p)) >>= either (throwIO . ArgumentError j "fromPartitions") pure
          let path = clDatasetDir cluster </> (show d ++ "-" ++ show j)
          B.writeFile path bytes
          pure (j, path, StageRun j (live !! (j `mod` wave)) [] d bytes)
        out <- runStage cluster (StageJob (closureRef putPartition) [ r | (_, _, r) <- sent ])
        let files' = M.union files (M.fromList [ (j, path) | (j, path, _) <- sent ])
            held' = case out of
              Right _ -> M.union held (M.fromList [ (j, srWorker r) | (j, _, r) <- sent ])
              Left _ -> held
        go (n + length now) files' held' rest

-- | @n@ partitions, partition @j@ made as @f c n j@ by the generator on
-- the worker that holds it: the master never holds the data.
generateDataset :: Cluster -> StaticPtr (DatasetGen c p) -> c -> Int -> IO (Dataset p)
generateDataset cluster gen c n = do
  when (n < 1) $ throwIO (ArgumentError 0 (refName (closureRef gen)) ("a dataset needs at least one partition, not " ++ show n))
  build cluster n (Generated (closureRef gen) (encodeArgument (closureCodecs (deRefStaticPtr gen)) (c, n)))

-- | One partition per file named, each read by the reader
-- ('Herd.Task.Partition.partitionRead') on the worker that holds it, so
-- the master never holds the bytes; a lost partition is read again.
readDataset :: Cluster -> StaticPtr (DatasetGen [FilePath] p) -> [FilePath] -> IO (Dataset p)
readDataset cluster reader paths = do
  when (null paths) $ throwIO (ArgumentError 0 (refName (closureRef reader)) "a dataset read from files needs at least one file")
  generateDataset cluster reader paths (length paths)

-- | Each partition mapped where it is held; the results stay there.
mapDataset :: Cluster -> StaticPtr (DatasetMap p q) -> Dataset p -> IO (Dataset q)
mapDataset cluster f d = do
  own cluster d
  build cluster (dsParts d) (Mapped (closureRef f) [dsId d] B.empty)

-- | Two co-partitioned datasets (the same partition count) zipped
-- partition by partition where they are held: no shuffle.
zipDatasets :: Cluster -> StaticPtr (DatasetZip p q r) -> Dataset p -> Dataset q -> IO (Dataset r)
zipDatasets cluster f a b = do
  own cluster a >> own cluster b
  when (dsParts a /= dsParts b) $ throwIO $ ArgumentError 1 (refName (closureRef f))
    ("zipped datasets must have the same partition count, not " ++ show (dsParts a) ++ " and " ++ show (dsParts b))
  build cluster (dsParts a) (Mapped (closureRef f) [dsId a, dsId b] B.empty)

-- | Every partition cut into @n@ parts, each part sent worker to worker
-- to its output partition, and the @n@ output partitions combined and
-- held where the placement for @n@ puts them.
shuffleDataset :: Cluster -> StaticPtr (Shuffler p part q) -> Int -> Dataset p -> IO (Dataset q)
shuffleDataset cluster f n d = do
  own cluster d
  when (n < 1) $ throwIO (ArgumentError 0 (refName (closureRef f)) ("a shuffle needs at least one partition, not " ++ show n))
  build cluster n (ShuffledBy (closureRef f) (dsId d))

-- | The function applied to every partition with the argument, where it
-- is held; the answers come back, in partition order.
queryDataset :: Cluster -> StaticPtr (DatasetQuery p c r) -> c -> Dataset p -> IO [r]
queryDataset cluster f arg d = do
  own cluster d
  let codecs = closureCodecs (deRefStaticPtr f)
  answers <- readAll cluster (closureRef f) (encodeArgument codecs arg) d
  forM (zip [0 :: Int ..] answers) $ \(j, b) ->
    either (throwIO . ResultDecodeError j (refName (closureRef f))) pure (decodeAnswer codecs b)

-- | Every partition brought back, in order; they stay held.
collectDataset :: forall p. Store p => Cluster -> Dataset p -> IO [p]
collectDataset cluster d = do
  own cluster d
  answers <- readAll cluster (closureRef collectPartition) B.empty d
  forM (zip [0 :: Int ..] answers) $ \(j, b) -> case decode b of
    Left e -> throwIO (ResultDecodeError j "collectDataset" (show e))
    Right v -> pure v

-- | Drop these datasets' partitions from the workers. Their recipes stay
-- (a later dataset made from them may need its partitions made again);
-- using a released dataset makes its partitions again.
releaseDatasets :: Cluster -> [Dataset p] -> IO ()
releaseDatasets cluster ds = do
  mapM_ (own cluster) ds
  modifyMVar (clDatasets cluster) $ \book -> pure (foldr (releaseDataset . dsId) book ds, ())
  dropDatasetParts cluster (map dsId ds)

-- A new dataset of @n@ partitions by this recipe, made at once.
build :: Cluster -> Int -> Recipe -> IO (Dataset q)
build cluster n recipe = modifyMVar (clDatasets cluster) $ \book0 -> do
  let (d, book1) = newDataset n recipe book0
  -- a dataset not made leaves nothing on the workers
  book2 <- retrying cluster book1 (\b -> ensure cluster b d) `onException` dropDatasetParts cluster [d]
  pure (book2, Dataset (clusterTag cluster) d n)

-- Every partition of the dataset held (made again where lost), then the
-- function run on each where it is; the answers.
readAll :: Cluster -> TaskRef -> B.ByteString -> Dataset p -> IO [B.ByteString]
readAll cluster ref arg d = modifyMVar (clDatasets cluster) $ \book0 -> do
  answers <- newIORef []
  book1 <- retrying cluster book0 $ \b -> ensure cluster b (dsId d) >>= \made -> case made of
    Left lost -> pure (Left lost)
    Right b1 -> do
      live <- linkedWorkers cluster
      let (placed, b2) = placementFor (S.toList live) (dsParts d) b1
      out <- runStage cluster (StageJob ref [ StageRun j w [dsId d] 0 arg | (j, w) <- M.toList placed ])
      either (pure . Left . (,) [dsId d]) (\as -> Right b2 <$ writeIORef answers as) out
  (,) book1 <$> readIORef answers

-- Make every partition of the dataset that is not held, and what it
-- needs first.
ensure :: Cluster -> Book -> DatasetId -> IO (Either ([DatasetId], HerdError) Book)
ensure cluster book d = do
  live <- linkedWorkers cluster
  let parts = maybe 0 id (bookParts d book)
      plan = recoveryPlan (`S.member` live) (bookLineage book) d [0 .. parts - 1]
  foldM (\acc r -> either (pure . Left) (\b -> redo cluster (S.toList live) b r) acc) (Right book) plan

-- Make these partitions of a dataset by its recipe, where the placement
-- for its partition count puts them.
redo :: Cluster -> [WorkerId] -> Book -> Redo -> IO (Either ([DatasetId], HerdError) Book)
redo cluster live book (Redo d ps) = case (bookRecipe d book, bookParts d book) of
  (Just recipe, Just n) -> do
    let (placed, book1) = placementFor live n book
        at = M.restrictKeys placed (S.fromList ps)
        narrow ref ins arg = StageJob ref [ StageRun j w ins d (arg j) | (j, w) <- M.toList at ]
        done = fmap (const (recordHeld d at book1))
    case recipe of
      FromCaller files -> do
        -- read back from the master's disk a wave at a time
        let waves = chunksOf (max 1 (length live)) (M.toList at)
        outs <- forM waves $ \wave -> do
          runs <- forM wave $ \(j, w) -> StageRun j w [] d <$> maybe (pure B.empty) B.readFile (M.lookup j files)
          runStage cluster (StageJob (closureRef putPartition) runs)
        pure (tagged [] (done (sequence_ outs)))
      Generated ref arg -> tagged [] . done <$> runStage cluster (narrow ref [] (const arg))
      Mapped ref ins arg -> tagged ins . done <$> runStage cluster (narrow ref ins (const arg))
      ShuffledBy ref i -> do
        let inputs = maybe 0 id (bookParts i book1)
            (from, book2) = placementFor live inputs book1
        out <- runShuffle cluster ref inputs (HeldShuffle i from placed d)
        pure (tagged [i] (fmap (const (recordHeld d placed book2)) out))
  _ -> pure (Right book)
  where tagged ins = either (Left . (,) ins) Right

-- Run a step of the book until it succeeds: after 'PartitionsLost' the
-- partitions named are forgotten on the datasets it read (they are made
-- again on the next try); after a few tries, or any other error, the
-- error is thrown. Partitions made before a failure stay recorded.
retrying :: Cluster -> Book -> (Book -> IO (Either ([DatasetId], HerdError) Book)) -> IO Book
retrying _ book0 act = go (1 :: Int) book0
  where
    go attempt book = do
      out <- try (act book)
      case out of
        Left (e :: HerdError) -> throwIO e
        Right (Right book') -> pure book'
        Right (Left (ins, err@(PartitionsLost _ ps _)))
          | attempt < maxTries -> do
              -- a lost worker leaves the cluster's view a moment after
              -- its links: give it that moment
              threadDelay (20000 * attempt)
              go (attempt + 1) (foldr (\i b -> forgetHeld i ps b) book ins)
          | otherwise -> throwIO err
        Right (Left (_, err)) -> throwIO err
    maxTries = 8

-- A list in runs of this length.
chunksOf :: Int -> [a] -> [[a]]
chunksOf k xs = case splitAt k xs of
  ([], _) -> []
  (now, rest) -> now : chunksOf k rest

-- Refuse a dataset another cluster made.
own :: Cluster -> Dataset p -> IO ()
own cluster d
  | dsTag d == clusterTag cluster = pure ()
  | otherwise = throwIO (ForeignHandle "a Dataset" (describeTag (dsTag d)) (describeTag (clusterTag cluster)))
