{-# LANGUAGE ScopedTypeVariables #-}
-- | @herd bench chaos@: jobs of every API run at once on local workers
-- (farms, streams, evolve calls, shared values, Refs, @farmReduce@ and
-- @reduceByKey@) while a chaos thread kills (SIGKILL) and stops (SIGSTOP,
-- then SIGCONT a moment later) workers at random. Every result is checked
-- against a one-core run; a stream's output against its input. The
-- master's live heap is reported after one calm job of each API and at the end of the soak.
--
-- Per API it counts jobs, results checked, wrong results, lost jobs (a
-- farm or evolve call that failed, or a stream that ended short without
-- an error) and hung ones (no answer within two minutes). A stream
-- process lives on one worker, so a stream whose worker is killed ends
-- with 'StreamFailed' by design: those are counted as broken, apart.
module Bench.Chaos
  ( Options (..)
  , allApis
  , run
  ) where

import Control.Concurrent
import Control.Concurrent.Async (forConcurrently, withAsync)
import Control.Exception
import Control.Monad
import Data.IORef
import Data.Word (Word64)
import Herd
import Herd.Config
import Herd.Monitor
import Herd.Sys.Clock (monotonicSeconds)
import Herd.Examples.Eden (echoProcess, wordsItem)
import Herd.Examples.Fib (fib, fibSumReducer, fibTask)
import Herd.Examples.KMeans (Centroids, Partial, Points, assignPartial, chunkRanges, initialCentroids, kmeansHeldTask, kmeansRefQuery, makePoints, combinePartials)
import Herd.Examples.WordCount (Doc (..), countReducer, docPairs)
import qualified Data.Map.Strict as M
import qualified Data.Vector.Unboxed as VU
import Herd.Examples.ParticleFilter
import Herd.Fuzz (liveMB)
import Herd.Fuzz.Mutate (mixSeed)
import Herd.Sys.Log (logToStderr)
import Herd.Core.Report
import System.IO
import System.Posix.Signals (sigCONT, sigKILL, sigSTOP, signalProcess)
import System.Timeout (timeout)

-- | Benchmark settings.
data Options = Options
  { optSeconds :: Double
  , optWorkers :: Int
  , optSeed    :: Int
  , optApis    :: [String]   -- ^ the APIs whose jobs run ('allApis')
  , optCalm    :: Bool       -- ^ no kills or stops: the same load, as a control
  , optJson    :: Bool
  }

-- | Every API the soak can run jobs of.
allApis :: [String]
allApis = ["farm", "stream", "evolve", "shared", "refs", "farmReduce", "reduceByKey"]

data Tally = Tally
  { tJobs :: !Int, tChecked :: !Int, tWrong :: !Int, tLost :: !Int, tHung :: !Int, tBroken :: !Int }

noTally :: Tally
noTally = Tally 0 0 0 0 0 0

-- | Run the soak and print its table (and JSON line).
run :: Options -> IO ()
run o = do
  hSetBuffering stdout LineBuffering
  kills <- newIORef (0 :: Int)
  stops <- newIORef (0 :: Int)
  let cfg = defaultConfig
        { configWorkers = Just (optWorkers o)
          -- the chaos kills workers from outside: every death is charged to
          -- whatever may have been running, so the poison limit is raised
        , configMaxTaskDeaths = 1000, configMaxJobDeaths = 1000000
        , configLog = logToStderr }
      setup = FilterSetup 300 3 7 0 20000
      reference = runSequential setup
  _ <- evaluate (length (runEstimates reference))
  t0 <- monotonicSeconds
  let deadline = t0 + optSeconds o
  (tallies, restarts, heap) <- withCluster cfg $ \cluster -> do
    let jobs = [ j | j@(name, _) <- [ farmJob cluster, streamJob cluster, evolveJob cluster setup reference, sharedJob cluster
                                    , refsJob cluster, farmReduceJob cluster, reduceByKeyJob cluster ]
                   , name `elem` optApis o ]
    -- one calm job of each API first: the heap at the start then holds
    -- what every job needs (the inputs and references the jobs build
    -- once), and a growth after it is the soak's own
    warm <- mapM (\(_, job) -> job noTally >>= evaluate) jobs
    heap0 <- liveMB
    let until' first act = let loop acc = do
                                 t <- monotonicSeconds
                                 if t >= deadline then pure acc else act acc >>= evaluate >>= loop
                           in loop first
    let chaosThread = if optCalm o then pure () else chaos cluster deadline (fromIntegral (optSeed o)) kills stops
    tallies <- withAsync chaosThread $ \_ ->
      forConcurrently (zip jobs warm) $ \((name, job), first) -> do
        t <- until' first job
        pure (name, t)
    -- every worker still stopped is let go before the cluster ends
    mapM_ (\w -> signalProcess sigCONT (fromIntegral (infoPid w)) `catch` \(_ :: IOException) -> pure ())
          =<< clusterWorkerInfo cluster
    c <- clusterCounters cluster
    heap1 <- liveMB
    pure (tallies, countRestarts c, (heap0, heap1))
  k <- readIORef kills
  s <- readIORef stops
  putStrLn ("jobs of every API for " ++ show (optSeconds o) ++ " s on " ++ show (optWorkers o)
            ++ " workers, killed and stopped at random; the master's live heap after one job of each API "
            ++ maybe "?" show (fst heap) ++ " MB at the start, " ++ maybe "?" show (snd heap) ++ " MB at the end")
  putStr $ renderTable ["api", "jobs", "kills", "stops", "restarts", "results checked", "wrong", "lost", "hung", "broken"]
    [ [name, show (tJobs t), show k, show s, show restarts, show (tChecked t), show (tWrong t), show (tLost t), show (tHung t), show (tBroken t)]
    | (name, t) <- tallies ]
  when (optJson o) $ putStrLn $ renderJson $ JObject
    [ ("bench", JString "chaos")
    , ("rows", JArray [ JObject [ ("api", JString name), ("jobs", num (tJobs t)), ("kills", num k), ("stops", num s)
                                , ("restarts", num restarts), ("results_checked", num (tChecked t))
                                , ("wrong", num (tWrong t)), ("lost", num (tLost t)), ("hung", num (tHung t))
                                , ("broken", num (tBroken t)) ]
                      | (name, t) <- tallies ])
    , ("master_live_mb_start", maybe JNull JNumber (fst heap))
    , ("master_live_mb_end", maybe JNull JNumber (snd heap)) ]
  where num = JNumber . fromIntegral


-- Kill or stop a random local worker every 0.5 to 1.5 s until the deadline
-- (with 4 workers, about 7 deaths a minute each: under the 20 after which
-- a worker is left down).
chaos :: Cluster -> Double -> Word64 -> IORef Int -> IORef Int -> IO ()
chaos cluster deadline seed kills stops = go (0 :: Word64)
  where
    go n = do
      t <- monotonicSeconds
      when (t < deadline) $ do
        let r k = mixSeed seed (n * 8 + k)
        threadDelay (500000 + fromIntegral (r 0 `mod` 1000000))
        workers <- filter ((== "local") . infoGroup) <$> clusterWorkerInfo cluster
        unless (null workers) $ do
          let victim = workers !! fromIntegral (r 1 `mod` fromIntegral (length workers))
              pid = fromIntegral (infoPid victim)
              ignore act = act `catch` \(_ :: IOException) -> pure ()
          if r 2 `mod` 2 == 0
            then ignore (signalProcess sigKILL pid) >> bump kills
            else do
              ignore (signalProcess sigSTOP pid)
              bump stops
              void $ forkIO $ threadDelay (200000 + fromIntegral (r 3 `mod` 800000)) >> ignore (signalProcess sigCONT pid)
        go (n + 1)
    bump ref = atomicModifyIORef' ref (\x -> (x + 1, ()))

-- What a finished job gave.
data Outcome
  = Right' !Int   -- ^ all of its results, checked right (how many)
  | Wrong !Int    -- ^ results checked, some wrong
  | Short !Int    -- ^ it ended without an error but without all its results

-- One job under a two-minute limit: its outcome tallied, a failure logged.
tally :: String -> IO Outcome -> Tally -> IO Tally
tally what job t = do
  -- the outcome is forced inside the try: a lazy result (a stream's
  -- output list) throws where it is read
  r <- timeout 120000000 (try (job >>= evaluate))
  let t1 = t { tJobs = tJobs t + 1 }
  case r of
    Nothing -> do
      logToStderr ("chaos: a " ++ what ++ " job did not end within two minutes")
      pure t1 { tHung = tHung t + 1 }
    Just (Left (e :: SomeException))
      | Just (StreamFailed {}) <- fromException e -> pure t1 { tBroken = tBroken t + 1 }
      | otherwise -> do
          logToStderr ("chaos: a " ++ what ++ " job failed: " ++ displayException e)
          -- a failing call is not retried in a tight loop
          threadDelay 100000
          pure t1 { tLost = tLost t + 1 }
    Just (Right (Right' n)) -> pure t1 { tChecked = tChecked t + n }
    Just (Right (Wrong n)) -> do
      logToStderr ("chaos: a " ++ what ++ " job gave wrong results")
      pure t1 { tChecked = tChecked t + n, tWrong = tWrong t + 1 }
    Just (Right (Short n)) -> do
      logToStderr ("chaos: a " ++ what ++ " job ended with " ++ show n ++ " results missing")
      pure t1 { tLost = tLost t + 1 }

farmJob :: Cluster -> (String, Tally -> IO Tally)
farmJob cluster = ("farm", tally "farm" $ do
  let xs = [ 15 + (i * 7) `mod` 9 | i <- [0 .. 299] ]
  ys <- farm cluster fibTask xs
  pure $ if length ys /= length xs then Short (length xs - length ys)
         else if ys == map fib xs then Right' (length ys) else Wrong (length ys))

streamJob :: Cluster -> (String, Tally -> IO Tally)
streamJob cluster = ("stream", tally "stream" $ do
  let xs = map (wordsItem 8) [1 .. 2000]
  ys <- instantiate cluster echoProcess xs
  let n = length ys
  pure $ if n < length xs && ys == take n xs then Short (length xs - n)
         else if ys == xs then Right' n else Wrong n)

-- Points shared once, their slices' partial sums farmed against the shared value.
sharedJob :: Cluster -> (String, Tally -> IO Tally)
sharedJob cluster = ("shared", tally "shared" $ do
  let n = 20000
      points = makePoints 4 n
      cs = initialCentroids 4 points
      ranges = chunkRanges 16 n
  s <- share cluster points
  partials <- farm cluster kmeansHeldTask [ (s, r, cs) | r <- ranges ] `finally` unshare cluster s
  pure (if combinePartials partials == byChunks cs points ranges then Right' (length partials) else Wrong (length partials)))

-- The partial sums of each chunk, combined in order: what the workers' are
-- (a sum over all points at once adds in another order).
byChunks :: Centroids -> Points -> [(Int, Int)] -> Partial
byChunks cs points ranges = combinePartials [ assignPartial cs points lo hi | (lo, hi) <- ranges ]

-- Slices held as Refs, queried where they are, then released.
refsJob :: Cluster -> (String, Tally -> IO Tally)
refsJob cluster = ("refs", tally "refs" $ do
  let n = 20000
      points = makePoints 4 n
      cs = initialCentroids 4 points
      ranges = chunkRanges 16 n
  slices <- putRefs cluster [ VU.slice (2 * lo) (2 * (hi - lo)) points | (lo, hi) <- ranges ]
  partials <- queryRefs cluster kmeansRefQuery [ (r, cs) | r <- slices ] `finally` releaseMany cluster slices
  pure (if combinePartials partials == byChunks cs points ranges then Right' (length partials) else Wrong (length partials)))

-- A sum of Fibonacci numbers combined on the workers.
farmReduceJob :: Cluster -> (String, Tally -> IO Tally)
farmReduceJob cluster = ("farmReduce", tally "farmReduce" $ do
  let xs = [ 12 + (i * 5) `mod` 9 | i <- [0 .. 399] ]
  total <- farmReduce cluster fibSumReducer xs
  pure (if total == Just (sum (map fib xs)) then Right' (length xs) else Wrong (length xs)))

-- Word counts combined per key on the workers.
reduceByKeyJob :: Cluster -> (String, Tally -> IO Tally)
reduceByKeyJob cluster = ("reduceByKey", tally "reduceByKey" $ do
  let docs = [ Doc d 200 50 | d <- [1 .. 300] ]
  counts <- reduceByKey cluster countReducer docs
  pure (if counts == M.fromListWith (+) (concatMap docPairs docs) then Right' (M.size counts) else Wrong (M.size counts)))

evolveJob :: Cluster -> FilterSetup -> FilterRun -> (String, Tally -> IO Tally)
evolveJob cluster setup reference = ("evolve", tally "evolve" $ do
  ids <- resetStates cluster particleStep (initialParticles setup)
  result <- runFilter setup (evolveMany cluster particleStep) ids
  let checked = sum (runEvolved result)
  pure (if result == reference then Right' checked else Wrong checked))
