-- | @herd bench packets@: the sweep behind the packet layer's defaults.
-- For each packet size and flush timeout, on a fresh cluster: tiny farm
-- tasks per second, and the time to echo small and large items through a
-- stream process (the cases where packets matter most: many small
-- messages, and messages near the packet's size).
module Bench.Packets
  ( Options (..)
  , run
  ) where

import Control.Exception (throwIO)
import Control.Monad (forM, when)
import qualified Data.Vector.Unboxed as U
import Bench.Common
import Herd
import Herd.Config (validateConfig)
import Herd.Examples.Eden (echoProcess, incrementTask, wordsItem)
import Herd.Report
import System.IO

-- | Benchmark settings.
data Options = Options
  { optSizes    :: [Int]     -- ^ packet sizes in bytes
  , optTimeouts :: [Double]  -- ^ flush timeouts in seconds
  , optTasks    :: Int       -- ^ tiny tasks per throughput run
  , optItems    :: Int       -- ^ items per echo run
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
  rows <- forM settings $ \cfg -> withCluster cfg $ \cluster -> do
      let bytes = configPacketBytes cfg
          timeout = configPacketTimeout cfg
      _ <- farm cluster incrementTask [1 .. 1000]
      (farmSecs, total) <- timed (sum <$> farm cluster incrementTask [1 .. optTasks o])
      when (total /= sum [2 .. optTasks o + 1]) $ hPutStrLn stderr "packets: wrong farm results"
      echoes <- forM [1, 1000] $ \w -> do
        let items = [ wordsItem w i | i <- [1 .. optItems o] ]
        _ <- withStream cluster echoProcess (take 10 items) (pure . length)
        (secs, n) <- timed (withStream cluster echoProcess items (\ys -> pure $! sum (map U.length ys)))
        when (n /= optItems o * (w - 1)) $ hPutStrLn stderr "packets: wrong echo output"
        pure secs
      let tps = fromIntegral (optTasks o) / farmSecs
      hPutStrLn stderr ("  " ++ show bytes ++ " bytes, " ++ fixed 1 (timeout * 1000) ++ " ms: "
                        ++ fixed 0 tps ++ " tasks/s, echo " ++ unwords (map (fixed 3) echoes) ++ " s")
      pure (bytes, timeout, tps, echoes)
  putStrLn ("packet size and flush timeout: " ++ show (optTasks o) ++ " tiny farm tasks, echo of "
            ++ show (optItems o) ++ " items of 1 and 1000 words")
  putStr $ renderTable ["packet bytes", "timeout ms", "tasks/s", "echo 1 word (s)", "echo 1000 words (s)"]
    [ [show b, fixed 1 (t * 1000), fixed 0 tps, fixed 3 e1, fixed 3 e2] | (b, t, tps, [e1, e2]) <- rows ]
  when (optJson o) $ putStrLn $ renderJson $ JObject
    [ ("bench", JString "packets")
    , ("rows", JArray [ JObject [ ("packet_bytes", JNumber (fromIntegral b)), ("timeout_s", JNumber t)
                                , ("tasks_per_s", JNumber tps), ("echo_1_word_s", JNumber e1)
                                , ("echo_1000_words_s", JNumber e2) ]
                      | (b, t, tps, [e1, e2]) <- rows ]) ]
