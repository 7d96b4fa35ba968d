-- | @herd bench wordcount@: a keyed reduction three ways on one cluster.
-- @workers@ sums the counts on the workers ('reduceByKey': each worker
-- sums whole groups of documents, the master merges one map per group);
-- @datasets@ holds the documents as a dataset, shuffles them into one
-- partition of counts per worker and collects those;
-- @master@ collects every (word, 1) pair at the master and sums them there,
-- as a farm alone must. A row gives the seconds and the bytes through the
-- master's links.
--
-- Promise: every way gives the same counts (the bench fails otherwise),
-- and the counts add up to the words of all documents.
module Bench.WordCount
  ( Options (..)
  , run
  ) where

import Control.Monad (unless, when)
import qualified Data.Map.Strict as M
import Bench.Common (timed)
import Herd
import Herd.Config
import Herd.Dataset
import Herd.Master.Job.Reduce (reduceGroups)
import Herd.Monitor
import Herd.Core.Report
import Herd.Examples.WordCount
import System.Exit (die)
import System.IO

-- | Benchmark settings.
data Options = Options
  { optDocs       :: Int
  , optWords      :: Int   -- ^ per document
  , optVocabulary :: Int
  , optWorkers    :: Int
  , optJson       :: Bool
  }

-- | Run the benchmark: one row per way.
run :: Options -> IO ()
run o = do
  hSetBuffering stdout LineBuffering
  let docs = [ Doc d (optWords o) (optVocabulary o) | d <- [1 .. optDocs o] ]
      cfg = defaultConfig { configWorkers = Just (optWorkers o) }
  rows <- withCluster cfg $ \cluster -> do
    True <- waitForWorkers cluster (optWorkers o) 60
    -- each way once untimed, so all run on warm workers
    _ <- reduceByKey cluster countReducer (take 2 docs)
    _ <- farm cluster pairsTask (take 2 docs)
    _ <- viaDataset cluster (take 2 docs)
    onWorkers <- measure cluster "workers" (reduceByKey cluster countReducer docs)
    atMaster <- measure cluster "master" (M.fromListWith (+) . concat <$> farm cluster pairsTask docs)
    asDataset <- measure cluster "datasets" (viaDataset cluster docs)
    pure [onWorkers, atMaster, asDataset]
  let [(_, tw, bw, cw), (_, tm, bm, cm), (_, _, _, cd)] = rows
      total = optDocs o * optWords o
  unless (cw == cm && cw == cd) $ die "wordcount: the ways disagree on the counts"
  unless (sum (M.elems cw) == total) $
    die ("wordcount: the counts add up to " ++ show (sum (M.elems cw)) ++ ", not " ++ show total)
  putStr $ renderTable ["way", "seconds", "master MB", "x workers"]
    [ [ way, fixed 3 t, fixed 2 (fromIntegral b / 1e6), fixed 2 (t / tw) ] | (way, t, b, _) <- rows ]
  putStrLn (show (M.size cw) ++ " distinct words, " ++ show total ++ " in all; the counts agree")
  when (optJson o) $ putStrLn $ renderJson $ JObject
    [ ("bench", JString "wordcount")
    , ("docs", JInt (fromIntegral (optDocs o))), ("words_per_doc", JInt (fromIntegral (optWords o)))
    , ("distinct_words", JInt (fromIntegral (M.size cw))), ("counts_agree", JBool True)
    , ("rows", JArray [ JObject [ ("mode", JString way), ("seconds", JNumber t), ("master_bytes", JInt (fromIntegral b)) ]
                      | (way, t, b, _) <- rows ])
    , ("speedup", JNumber (tm / tw)), ("master_bytes_ratio", JNumber (fromIntegral bm / max 1 (fromIntegral bw))) ]
  where
    viaDataset cluster ds = do
      held <- fromPartitions cluster (reduceGroups (optWorkers o) ds)
      counts <- shuffleDataset cluster countShuffler (optWorkers o) held
      out <- M.unions <$> collectDataset cluster counts
      out <$ releaseDatasets cluster [held] <* releaseDatasets cluster [counts]
    measure cluster way act = do
      before <- masterBytes cluster
      (secs, counts) <- timed (act >>= \c -> M.size c `seq` pure c)
      after <- masterBytes cluster
      hPutStrLn stderr ("  " ++ way ++ ": " ++ fixed 3 secs ++ " s")
      pure (way, secs, after - before, counts)

-- Bytes the master's links carried both ways, so far.
masterBytes :: Cluster -> IO Int
masterBytes cluster = do
  s <- clusterStatus cluster
  pure (sum [ bytesSent p + bytesReceived p | r <- statusWorkers s, Just p <- [rowLink r] ])
