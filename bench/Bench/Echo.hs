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
import Herd.Examples.Eden (echoProcess, wordsItem)
import Herd.Report
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
  rows <- forM [True, False] $ \on -> withChunking (optDashboard o) on (\c -> c { configWorkers = Just 1 }) $ \cluster ->
    forM (optWords o) $ \w -> do
      -- built and evaluated once, before any run, so the runs time the
      -- messages, not the making of the list (a list bound by a plain
      -- 'let' beside the action was made again by every run, in the feeder)
      items <- evaluate (force [ wordsItem w i | i <- [1 .. optItems o] ])
      -- warm up with whole runs first ('warmRepeat'), then the median of seven
      let echo = withStream cluster echoProcess items (\ys -> pure $! sum (map U.length ys))
      warmUp cluster
      warmRepeat echo
      (secs, (packets, total)) <- medianTimed 7 (packetDelta cluster echo)
      when (total /= optItems o * max 0 (w - 1)) $ hPutStrLn stderr "echo: wrong output"
      -- the master's allocation in one more run, per item
      (alloc, _) <- allocatedDuring echo
      let perItem = fmap (\b -> fromIntegral b / fromIntegral (max 1 (optItems o))) alloc :: Maybe Double
      hPutStrLn stderr ("  " ++ show w ++ " words, chunking " ++ chunkingName on ++ ": " ++ fixed 3 secs ++ " s, "
                        ++ maybe "-" (fixed 0) perItem ++ " bytes allocated per item")
      pure (w, on, secs, packets, perItem)
  let byWords = [ (w, [ r | r@(w', _, _, _, _) <- concat rows, w' == w ]) | w <- optWords o ]
      secsOf on rs = head ([ s | (_, on', s, _, _) <- rs, on' == on ] ++ [0])
      allocOf on rs = head ([ maybe "-" (fixed 0) a | (_, on', _, _, a) <- rs, on' == on ] ++ ["-"])
  putStrLn ("echo of " ++ show (optItems o) ++ " items through a stream process (Eden's figure 5)")
  putStr $ renderTable ["words/item", "normal (s)", "dyn. chunking (s)", "off/on", "B/item off", "B/item on"]
    [ [show w, fixed 3 (secsOf False rs), fixed 3 (secsOf True rs), fixed 1 (secsOf False rs / secsOf True rs)
      , allocOf False rs, allocOf True rs]
    | (w, rs) <- byWords ]
  writePlot (optPlot o) $ logLogSvg ("echo of " ++ show (optItems o) ++ " items through a stream process")
      "words per item" "seconds (median)"
      [ Series ("chunking " ++ chunkingName on) colour False [ (fromIntegral w, s) | (w, on', s, _, _) <- concat rows, on' == on ]
      | (on, colour) <- [(True, "#1f77b4"), (False, "#d62728")] ]
  when (optJson o) $ putStrLn $ renderJson $ JObject
    [ ("bench", JString "echo")
    , ("rows", JArray [ JObject [ ("words", JNumber (fromIntegral w)), ("chunking", JString (chunkingName on))
                                , ("seconds", JNumber s), ("packets", JNumber (fromIntegral p))
                                , ("alloc_bytes_per_item", maybe JNull JNumber a) ]
                      | (w, on, s, p, a) <- concat rows ]) ]
