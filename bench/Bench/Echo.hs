-- | @herd bench echo@: Eden's system test (the paper's figure 5). A stream
-- process @id@ echoes a list of items of a given size in machine words,
-- with dynamic chunking on and off; nothing is computed, so only the cost
-- of messages shows.
module Bench.Echo
  ( Options (..)
  , run
  ) where

import Control.DeepSeq (force)
import Control.Exception (evaluate)
import Control.Monad (forM, when)
import qualified Data.Vector.Unboxed as U
import Bench.Common
import Bench.Plot
import Herd
import Herd.Config
import Herd.Examples.Eden (echoProcess, wordsItem)
import Herd.Core.Report
import System.IO

-- | Benchmark settings.
data Options = Options
  { optItems :: Int
  , optWords :: [Int]
  , optJson  :: Bool
  , optPlot  :: Maybe FilePath
  , optDashboard :: Maybe String  -- ^ serve the live dashboard at this HOST:PORT
  }

-- | Run the benchmark and print its table (and JSON line).
run :: Options -> IO ()
run o = do
  hSetBuffering stdout LineBuffering
  checkPlotWritable "echo" (optPlot o)
  -- both clusters open at once and their runs in turns, so a ratio of
  -- the two compares runs made side by side: measured one cluster after
  -- the other, a drift in the machine's load, or the first cluster's
  -- first touch of the master's heap, fell on one mode only
  rows <- withChunking (optDashboard o) True oneWorker $ \onCluster ->
    withChunking (optDashboard o) False oneWorker $ \offCluster -> do
      let clusters = [(True, onCluster), (False, offCluster)]
      mapM_ (warmUp . snd) clusters
      fmap concat $ forM (optWords o) $ \w -> do
        -- built and evaluated once, before any run, so the runs time the
        -- messages, not the making of the list (a list bound by a plain
        -- 'let' beside the action was made again by every run, in the feeder)
        items <- evaluate (force [ wordsItem w i | i <- [1 .. optItems o] ])
        let echo cluster = withStream cluster echoProcess items (\ys -> pure $! sum (map U.length ys))
        -- warm up with whole runs first ('warmRepeat'), then the median of
        -- seven runs each, the two modes in turns (which goes first
        -- alternating from round to round). Each timed run follows an
        -- untimed one on its own cluster: timed straight after the other
        -- cluster's run, one-word runs with chunking on gave off/on of
        -- 7.9-10.6x in six runs against 10.8-14.0x measured one cluster
        -- after the other, their worker woken from sleep
        mapM_ (warmRepeat . echo . snd) clusters
        rounds <- forM [1 .. echoRounds] $ \k ->
          forM (if even k then reverse clusters else clusters) $ \(on, cluster) -> do
            _ <- echo cluster
            (secs, (packets, total)) <- timed (packetDelta cluster (echo cluster))
            when (total /= optItems o * max 0 (w - 1)) $ hPutStrLn stderr "echo: wrong output"
            pure (on, (secs, packets))
        forM clusters $ \(on, cluster) -> do
          let mine = [ r | (on', r) <- concat rounds, on' == on ]
              secs = median (map fst mine)
              packets = snd (last mine)
          -- the master's allocation in one more run, per item
          (alloc, _) <- allocatedDuring (echo cluster)
          let perItem = fmap (\b -> fromIntegral b / fromIntegral (max 1 (optItems o))) alloc :: Maybe Double
          hPutStrLn stderr ("  " ++ show w ++ " words, chunking " ++ chunkingName on ++ ": " ++ fixed 3 secs ++ " s, "
                            ++ maybe "-" (fixed 0) perItem ++ " bytes allocated per item")
          pure (w, on, secs, packets, perItem)
  let byWords = [ (w, [ r | r@(w', _, _, _, _) <- rows, w' == w ]) | w <- optWords o ]
      secsOf on rs = head ([ s | (_, on', s, _, _) <- rs, on' == on ] ++ [0])
      allocOf on rs = head ([ maybe "-" (fixed 0) a | (_, on', _, _, a) <- rs, on' == on ] ++ ["-"])
  putStrLn ("echo of " ++ show (optItems o) ++ " items through a stream process (Eden's figure 5)")
  putStr $ renderTable ["words/item", "normal (s)", "dyn. chunking (s)", "off/on", "B/item off", "B/item on"]
    [ [show w, fixed 3 (secsOf False rs), fixed 3 (secsOf True rs), fixed 1 (secsOf False rs / secsOf True rs)
      , allocOf False rs, allocOf True rs]
    | (w, rs) <- byWords ]
  writePlot (optPlot o) $ logLogSvg ("echo of " ++ show (optItems o) ++ " items through a stream process")
      "words per item" "seconds (median)"
      [ Series ("chunking " ++ chunkingName on) colour False [ (fromIntegral w, s) | (w, on', s, _, _) <- rows, on' == on ]
      | (on, colour) <- [(True, "#1f77b4"), (False, "#d62728")] ]
  when (optJson o) $ putStrLn $ renderJson $ JObject
    [ ("bench", JString "echo")
    , ("rows", JArray [ JObject [ ("words", JNumber (fromIntegral w)), ("chunking", JString (chunkingName on))
                                , ("seconds", JNumber s), ("packets", JNumber (fromIntegral p))
                                , ("alloc_bytes_per_item", maybe JNull JNumber a) ]
                      | (w, on, s, p, a) <- rows ]) ]

-- | One worker per cluster: the paper's system test is one stream
-- process, and the two clusters share the machine's two cores.
oneWorker :: Config -> Config
oneWorker c = c { configWorkers = Just 1 }

-- | Timed runs of each mode per item size.
echoRounds :: Int
echoRounds = 7
