-- | @herd bench wordcount@: a keyed reduction three ways on one cluster.
-- @workers@ sums the counts on the workers ('reduceByKey': each worker
-- sums whole groups of documents, the master merges one map per group);
-- @datasets@ holds the documents as a dataset, shuffles them into one
-- partition of counts per worker and collects those;
-- @master@ collects every (word, 1) pair at the master and sums them there,
-- as a farm alone must. A row gives the seconds and the bytes through the
-- master's links, the median of its rounds: the ways take turns, a
-- round each, so a noisy neighbour slows all of them alike.
--
-- Promise: every way gives the same counts in every round (the bench
-- fails otherwise), and the counts add up to the words of all documents.
module Bench.WordCount
  ( Options (..)
  , run
  ) where

import Control.Monad (forM, unless, when)
import qualified Data.Map.Strict as M
import Bench.Common (median, timed)
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
  , optRounds     :: Int   -- ^ each way runs once per round
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
    let ways = [ ("workers", reduceByKey cluster countReducer docs)
               , ("master", M.fromListWith (+) . concat <$> farm cluster pairsTask docs)
               , ("datasets", viaDataset cluster docs) ]
    results <- concat <$> forM [1 .. max 1 (optRounds o)] (\_ -> mapM (uncurry (measure cluster)) ways)
    checkRounds results
    pure [ summarise mine | (way, _) <- ways, let mine = [ r | r@(w, _, _, _) <- results, w == way ] ]
  let [(_, tw, bw, cw), (_, tm, bm, _), _] = rows
      total = optDocs o * optWords o
  unless (sum (M.elems cw) == total) $
    die ("wordcount: the counts add up to " ++ show (sum (M.elems cw)) ++ ", not " ++ show total)
  putStr $ renderTable ["way", "seconds (median)", "master MB", "x workers"]
    [ [ way, fixed 3 t, fixed 2 (fromIntegral b / 1e6), fixed 2 (t / tw) ] | (way, t, b, _) <- rows ]
  putStrLn (show (M.size cw) ++ " distinct words, " ++ show total ++ " in all; the counts agree; median of "
            ++ show (max 1 (optRounds o)) ++ " rounds, the ways in turn")
  when (optJson o) $ putStrLn $ renderJson $ JObject
    [ ("bench", JString "wordcount")
    , ("docs", JInt (fromIntegral (optDocs o))), ("words_per_doc", JInt (fromIntegral (optWords o)))
    , ("distinct_words", JInt (fromIntegral (M.size cw))), ("counts_agree", JBool True)
    , ("rounds", JInt (fromIntegral (max 1 (optRounds o))))
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

-- A way's row: the median of its rounds' seconds, the first round's
-- bytes and counts (every round gives the same counts: 'checkRounds').
summarise :: [(String, Double, Int, c)] -> (String, Double, Int, c)
summarise rs@((way, _, bytes, counts) : _) = (way, median [ t | (_, t, _, _) <- rs ], bytes, counts)
summarise [] = error "summarise: a way with no rounds"

-- Every round of every way gave the same counts, or the bench fails.
checkRounds :: Eq c => [(String, Double, Int, c)] -> IO ()
checkRounds rs = case rs of
  (_, _, _, c) : rest | any (\(_, _, _, c') -> c' /= c) rest -> die "wordcount: the ways disagree on the counts"
  _ -> pure ()

-- Bytes the master's links carried both ways, so far.
masterBytes :: Cluster -> IO Int
masterBytes cluster = do
  s <- clusterStatus cluster
  pure (sum [ bytesSent p + bytesReceived p | r <- statusWorkers s, Just p <- [rowLink r] ])
