-- | @herd bench packets@: the sweep behind the packet layer's defaults.
-- For each packet size and flush timeout, on a fresh cluster: tiny farm
-- tasks per second, and the time to echo small and large items through a
-- stream process (the cases where packets matter most: many small
-- messages, and messages near the packet's size).
--
-- Each setting's cluster is warmed up (its heaps touched, one whole
-- untimed run of each measurement) before it is timed, and the sweep is
-- made several times, each round in another order, the rows giving each
-- setting's median: timed straight after its cluster started, the first
-- setting of a sweep always ran the farm at under half the speed of the
-- others, whatever it was, so one pass in one order measured positions,
-- not settings.
module Bench.Packets
  ( Options (..)
  , run
  ) where

import Control.DeepSeq (force)
import Control.Exception (evaluate, throwIO)
import Control.Monad (forM, when)
import qualified Data.Vector.Unboxed as U
import Bench.Common
import Herd
import Herd.Config
import Herd.Settings (validateConfig)
import Herd.Examples.Eden (echoProcess, incrementTask, wordsItem)
import Herd.Core.Report
import System.IO

-- | Benchmark settings.
data Options = Options
  { optSizes    :: [Int]     -- ^ packet sizes in bytes
  , optTimeouts :: [Double]  -- ^ flush timeouts in seconds
  , optTasks    :: Int       -- ^ tiny tasks per throughput run
  , optItems    :: Int       -- ^ items per echo run
  , optRounds   :: Int       -- ^ sweeps made, each in another order
  , optJson     :: Bool
  , optDashboard :: Maybe String  -- ^ serve the live dashboard at this HOST:PORT
  }

-- | Run the sweep and print its table (and JSON line).
run :: Options -> IO ()
run o = do
  hSetBuffering stdout LineBuffering
  let settings = [ defaultConfig { configPacketBytes = b, configPacketTimeout = t
                                 , configDashboard = optDashboard o } | b <- optSizes o, t <- optTimeouts o ]
  -- every setting is checked before the first run, so a bad one costs nothing
  mapM_ (either throwIO pure . validateConfig) settings
  let count = length settings
  measured <- fmap concat $ forM [0 .. optRounds o - 1] $ \r ->
    forM (sweepOrder count (optRounds o) r) $ \i -> do
      let cfg = settings !! i
      m <- measure cfg
      hPutStrLn stderr ("  round " ++ show (r + 1) ++ ", " ++ show (configPacketBytes cfg) ++ " bytes, "
                        ++ fixed 1 (configPacketTimeout cfg * 1000) ++ " ms: " ++ describe m)
      pure (i, m)
  let rows = [ (configPacketBytes cfg, configPacketTimeout cfg, median (map fst3 ms), [median (map snd3 ms), median (map thd3 ms)])
             | (i, cfg) <- zip [0 ..] settings
             , let ms = [ m | (j, m) <- measured, j == i ] ]
  putStrLn ("packet size and flush timeout: " ++ show (optTasks o) ++ " tiny farm tasks, echo of "
            ++ show (optItems o) ++ " items of 1 and 1000 words; medians of " ++ show (optRounds o) ++ " rounds")
  putStr $ renderTable ["packet bytes", "timeout ms", "tasks/s", "echo 1 word (s)", "echo 1000 words (s)"]
    [ [show b, fixed 1 (t * 1000), fixed 0 tps, fixed 3 e1, fixed 3 e2] | (b, t, tps, [e1, e2]) <- rows ]
  when (optJson o) $ putStrLn $ renderJson $ JObject
    [ ("bench", JString "packets")
    , ("rows", JArray [ JObject [ ("packet_bytes", JNumber (fromIntegral b)), ("timeout_s", JNumber t)
                                , ("tasks_per_s", JNumber tps), ("echo_1_word_s", JNumber e1)
                                , ("echo_1000_words_s", JNumber e2) ]
                      | (b, t, tps, [e1, e2]) <- rows ]) ]
  where
    measure cfg = withCluster cfg $ \cluster -> do
      warmUp cluster
      let tasks = [1 .. optTasks o]
          farmRun = sum <$> farm cluster incrementTask tasks
      _ <- farmRun
      (farmSecs, total) <- timed farmRun
      when (total /= sum [2 .. optTasks o + 1]) $ hPutStrLn stderr "packets: wrong farm results"
      let echoSecs w = do
            -- made and evaluated before the runs, so they time the messages
            items <- evaluate (force [ wordsItem w i | i <- [1 .. optItems o] ])
            let echo = withStream cluster echoProcess items (\ys -> pure $! sum (map U.length ys))
            _ <- echo
            (secs, n) <- timed echo
            when (n /= optItems o * (w - 1)) $ hPutStrLn stderr "packets: wrong echo output"
            pure secs
      oneWord <- echoSecs 1
      thousandWords <- echoSecs 1000
      pure (fromIntegral (optTasks o) / farmSecs, oneWord, thousandWords)
    describe (tps, e1, e2) = fixed 0 tps ++ " tasks/s, echo " ++ fixed 3 e1 ++ " " ++ fixed 3 e2 ++ " s"
    fst3 (a, _, _) = a
    snd3 (_, b, _) = b
    thd3 (_, _, c) = c

-- | The order in which round @r@ (from 0) of @rounds@ visits @count@
-- settings (indices from 0): every round starts at another setting, the
-- starts spread evenly, and odd rounds go backwards, so no setting is
-- always first or always behind the same one. Every round visits every
-- setting once.
sweepOrder :: Int -> Int -> Int -> [Int]
sweepOrder count rounds r
  | count <= 0 = []
  | otherwise =
      let start = (r * count) `div` max 1 rounds
          rotated = take count (drop start (cycle [0 .. count - 1]))
      in if odd r then reverse rotated else rotated
