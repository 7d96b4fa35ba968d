-- | @herd bench fuzz@: mutated and random frames of every message type,
-- thrown at a master (from a peer that passed the handshake) and at a
-- worker's serving loop (from its master's side), over each transport
-- ("Herd.Fuzz"). Every row must show no crash and no hang: each receiver
-- drops the peer that sent a bad frame and keeps serving the others.
module Bench.Fuzz
  ( Options (..)
  , run
  ) where

import Control.Monad (forM, when)
import Herd
import Herd.Config
import Herd.Examples.Eden (incrementTask)
import Herd.Fuzz
import Herd.Core.Report
import Herd.Task (taskRef)
import System.IO

-- | Benchmark settings.
data Options = Options
  { optFrames     :: Int
  , optTargets    :: [FuzzTarget]
  , optTransports :: [TransportKind]
  , optSeed       :: Int
  , optJson       :: Bool
  }

-- | Run the fuzzing and print its table (and JSON line).
run :: Options -> IO ()
run o = do
  hSetBuffering stdout LineBuffering
  rows <- forM [ (t, k) | t <- optTargets o, k <- optTransports o ] $ \(target, kind) -> do
    hPutStrLn stderr ("  " ++ targetName target ++ " over " ++ transportName kind ++ ": " ++ show (optFrames o) ++ " frames")
    let seed = fromIntegral (optSeed o)
    case target of
      AtMaster -> fuzzMaster kind (optFrames o) seed healthy
      AtWorker -> fuzzWorker kind (optFrames o) seed (taskRef incrementTask)
  putStrLn "mutated frames of every message type; each session is one frame and then one no receiver accepts"
  putStr $ renderTable ["target", "transport", "frames", "crashes", "hangs", "dropped", "checks", "seconds", "live MB before", "after"]
    [ [ targetName (rowTarget r), transportName (rowTransport r), show (rowFrames r), show (rowCrashes r)
      , show (rowHangs r), show (rowDropped r), show (rowChecks r), fixed 1 (rowSeconds r)
      , maybe "-" (fixed 1) (rowLiveStart r), maybe "-" (fixed 1) (rowLiveEnd r) ]
    | r <- rows ]
  when (any (\r -> rowCrashes r > 0 || rowHangs r > 0) rows) $
    hPutStrLn stderr "fuzz: a receiver crashed or hung (see the table)"
  when (optJson o) $ putStrLn $ renderJson $ JObject
    [ ("bench", JString "fuzz")
    , ("rows", JArray [ JObject [ ("target", JString (targetName (rowTarget r)))
                                , ("transport", JString (transportName (rowTransport r)))
                                , ("frames", JNumber (fromIntegral (rowFrames r)))
                                , ("crashes", JNumber (fromIntegral (rowCrashes r)))
                                , ("hangs", JNumber (fromIntegral (rowHangs r)))
                                , ("dropped", JNumber (fromIntegral (rowDropped r)))
                                , ("checks", JNumber (fromIntegral (rowChecks r)))
                                , ("seconds", JNumber (rowSeconds r))
                                , ("live_mb_before", maybe JNull JNumber (rowLiveStart r))
                                , ("live_mb_after", maybe JNull JNumber (rowLiveEnd r)) ]
                      | r <- rows ]) ]
  where
    healthy cluster = (== map (+ 1) [1 .. 50]) <$> farm cluster incrementTask [1 .. 50 :: Int]
