-- | @herd bench throughput@: tiny tasks (@x -> x + 1@) per second through
-- the farm, with dynamic chunking on and off, for each master loop asked
-- for, with the bytes the master allocates per task (GHC.Stats). With
-- chunking on, a run of tasks travels as one message (as many as a
-- packet has room for); off, every task is a message and a packet of its
-- own, both ways.
module Bench.Throughput
  ( Options (..)
  , run
  ) where

import Control.Monad (forM, when)
import Bench.Common
import Herd
import Herd.Config
import Herd.Examples.Eden (incrementTask)
import Herd.Core.Report
import System.IO

-- | Benchmark settings.
data Options = Options
  { optTasks    :: Int        -- ^ tasks with chunking on
  , optTasksOff :: Maybe Int  -- ^ tasks with chunking off (default: a tenth)
  , optTransport :: Maybe TransportKind  -- ^ how the workers are linked (default: shm)
  , optLoops    :: [MasterLoop]         -- ^ the master loops to run, in order
  , optJson     :: Bool
  , optDashboard :: Maybe String  -- ^ serve the live dashboard at this HOST:PORT
  }

-- | Run the benchmark and print its table (and JSON line).
run :: Options -> IO ()
run o = do
  hSetBuffering stdout LineBuffering
  let offTasks = maybe (max 1 (optTasks o `div` 10)) id (optTasksOff o)
  rows <- forM [ (loop, on, n) | loop <- optLoops o, (on, n) <- [(True, optTasks o), (False, offTasks)] ] $ \(loop, on, n) ->
    withChunking (optDashboard o) on (\c -> c { configTransport = optTransport o, configMasterLoop = loop }) $ \cluster -> do
      _ <- farm cluster incrementTask [1 .. 1000]   -- warm up
      (alloc, (secs, (total, packets))) <- allocatedDuring $ timed $ do
        (packets, ys) <- packetDelta cluster (farm cluster incrementTask [1 .. n])
        let total = sum ys
        total `seq` pure (total, packets)
      when (total /= sum [2 .. n + 1]) $ hPutStrLn stderr "throughput: wrong results"
      hPutStrLn stderr ("  " ++ masterLoopName loop ++ ", chunking " ++ chunkingName on ++ ": " ++ show n
                        ++ " tasks in " ++ fixed 3 secs ++ " s")
      pure (loop, on, n, secs, packets, fmap (\b -> fromIntegral b / fromIntegral n) alloc :: Maybe Double)
  putStrLn "tiny tasks (x -> x + 1) through the farm: with chunking on, runs of tasks share a message and a packet; off, one task per message per packet"
  putStr $ renderTable ["master", "chunking", "tasks", "seconds", "tasks/s", "packets", "alloc B/task"]
    [ [masterLoopName loop, chunkingName on, show n, fixed 3 s, fixed 0 (fromIntegral n / s), show p, maybe "-" (fixed 1) a]
    | (loop, on, n, s, p, a) <- rows ]
  when (optJson o) $ putStrLn $ renderJson $ JObject
    [ ("bench", JString "throughput")
    , ("rows", JArray [ JObject [ ("master", JString (masterLoopName loop)), ("chunking", JString (chunkingName on))
                                , ("tasks", JNumber (fromIntegral n))
                                , ("seconds", JNumber s), ("tasks_per_s", JNumber (fromIntegral n / s))
                                , ("packets", JNumber (fromIntegral p))
                                , ("alloc_bytes_per_task", maybe JNull JNumber a) ]
                      | (loop, on, n, s, p, a) <- rows ]) ]

