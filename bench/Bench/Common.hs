{-# LANGUAGE ScopedTypeVariables #-}
-- | What the Eden-style benchmarks share: a cluster per chunking setting,
-- timing, and the packet counts of a run.
module Bench.Common
  ( ChunkingRun (..)
  , withChunking
  , timed
  , medianTimed
  , median
  , warmRuns
  , warmRepeat
  , warmUp
  , allocatedDuring
  , packetDelta
  , chunkingName
  , reportEden
  , processUsage
  , ownUsage
  ) where

import Control.Monad (when)
import Data.List (sort)
import Herd.Core.Report
import Bench.Plot

import Control.Exception (evaluate)
import GHC.Stats (allocated_bytes, getRTSStats, getRTSStatsEnabled)
import Herd
import Herd.Config
import Herd.Monitor
import Herd.Sys.Clock (monotonicSeconds)
import Herd.Examples.Eden (churn, warmTask)
import System.Mem (performMinorGC)
import System.Posix.Unistd (SysVar (ClockTick), getSysVar)
import qualified Control.Exception as E

-- | One setting to run under.
data ChunkingRun = ChunkingRun
  { runChunking :: !Bool
  , runConfig   :: Config -> Config
  }

-- | Run the body on a fresh cluster with dynamic chunking on or off, and
-- the dashboard at this address if one is given.
withChunking :: Maybe String -> Bool -> (Config -> Config) -> (Cluster -> IO a) -> IO a
withChunking dashboard on adjust =
  withCluster (adjust defaultConfig { configChunking = on, configDashboard = dashboard })

-- | Seconds an action takes, with its result forced to weak head normal form.
timed :: IO a -> IO (Double, a)
timed act = do
  t0 <- monotonicSeconds
  x <- act >>= evaluate
  t1 <- monotonicSeconds
  pure (t1 - t0, x)

-- | Run an action this many times (at least once); the median of their
-- times, and the last result.
medianTimed :: Int -> IO a -> IO (Double, a)
medianTimed k act = do
  runs <- mapM (const (timed act)) [1 .. max 1 k]
  pure (median (map fst runs), snd (last runs))

-- | The middle value (the upper of the two middle ones for an even
-- count); 0 for none.
median :: [Double] -> Double
median [] = 0
median xs = sort xs !! (length xs `div` 2)

-- | Full-size runs before measuring. On this machine a page of memory
-- costs 12-15 us the first time a process touches it (measured with a C
-- program: 32 MB took 94-124 ms the first time, 0.3 ms the second), so
-- the first runs on a fresh cluster measure the workers' and the
-- master's first touch of their heaps (a worker's 32 MB nursery takes
-- several runs to fill), not the cost of messages: up to 10x the steady
-- figure, in either chunking mode.
warmRuns :: Int
warmRuns = 3

-- | Whole runs before measuring: at least 'warmRuns', and more until
-- 'warmSeconds' have passed. Short runs kept getting faster for longer
-- than three runs: one-word echo runs of 10,000 items went from 3-4 ms
-- to 1.3-1.8 ms over their first twenty or so (a temporary build timing
-- each run), with few page faults
-- counted in the guest (@perf record -e page-faults@), so presumably
-- this VM's memory warming up behind the guest.
warmRepeat :: IO a -> IO ()
warmRepeat act = do
  t0 <- monotonicSeconds
  let go k = do
        _ <- act
        t <- monotonicSeconds
        when (k + 1 < warmRuns || t - t0 < warmSeconds) $ go (k + 1 :: Int)
  go 0

-- | Seconds of whole runs 'warmRepeat' makes at least.
warmSeconds :: Double
warmSeconds = 0.3

-- | Touch every worker's heap and the master's before measuring (see
-- 'warmRuns'): 64 MB of short-lived data each, twice the default nursery.
warmUp :: Cluster -> IO ()
warmUp cluster = do
  n <- clusterWorkerCount cluster
  _ <- farm cluster warmTask (replicate (2 * n) 64)
  _ <- evaluate (churn 64)
  pure ()

-- | Bytes this process (the master) allocated during an action, from
-- GHC.Stats ('Nothing' when the runtime keeps no statistics: run with
-- @+RTS -T@; herd's own binary does). A minor collection before and after
-- makes the count exact; it is taken outside any timing.
allocatedDuring :: IO a -> IO (Maybe Int, a)
allocatedDuring act = do
  enabled <- getRTSStatsEnabled
  if not enabled then (,) Nothing <$> act else do
    performMinorGC
    before <- allocated_bytes <$> getRTSStats
    x <- act
    performMinorGC
    after <- allocated_bytes <$> getRTSStats
    pure (Just (fromIntegral (after - before)), x)

-- | Packets sent plus received over every link, during an action.
packetDelta :: Cluster -> IO a -> IO (Int, a)
packetDelta cluster act = do
  before <- total
  x <- act
  after <- total
  pure (after - before, x)
  where
    total = sum . map (\(_, s) -> packetsSent s + packetsReceived s) <$> clusterPacketStats cluster

-- | "on" or "off".
chunkingName :: Bool -> String
chunkingName on = if on then "on" else "off"

-- | The paper's table (program, size, normal, dynamic chunking), the best
-- static chunk size against the plain program, and the JSON line (with
-- these fields added).
reportEden :: String -> String -> [(String, Maybe Int, Bool, Double)] -> [(String, Json)] -> Bool -> Maybe FilePath -> IO ()
reportEden bench size rows extra json plot = do
  let keys = [ (p, c) | (p, c, True, _) <- rows ]
      secsOf p c on = head ([ s | (p', c', on', s) <- rows, p' == p, c' == c, on' == on ] ++ [0])
      plain = secsOf bench Nothing True
      static = [ (s, p, c, on) | (p, Just c, on, s) <- rows ]
      (bestS, bestP, bestC, bestOn) = minimum static
  putStr $ renderTable ["program", "problem size", "normal (s)", "dyn. chunking (s)"]
    [ [p ++ maybe "" (\c' -> " " ++ show c') c, size, fixed 3 (secsOf p c False), fixed 3 (secsOf p c True)]
    | (p, c) <- keys ]
  when (not (null static)) $
    putStrLn ("plain " ++ bench ++ " with dynamic chunking: " ++ fixed 3 plain ++ " s; best static chunking: "
              ++ bestP ++ " " ++ show bestC ++ " (chunking " ++ chunkingName bestOn ++ ") "
              ++ fixed 3 bestS ++ " s; ratio " ++ fixed 2 (plain / bestS))
  writePlot plot $ barSvg Linear (bench ++ ", " ++ size) "seconds" [ p ++ maybe "" (\c' -> " " ++ show c') c | (p, c) <- keys ]
    [ Series name colour False [ (g, secsOf p c on) | (g, (p, c)) <- zip [0 ..] keys ]
    | (name, colour, on) <- [("normal", "#d62728", False), ("dyn. chunking", "#1f77b4", True)] ]
  when json $ putStrLn $ renderJson $ JObject $
    [ ("bench", JString bench)
    , ("rows", JArray [ JObject [ ("program", JString p), ("chunk", maybe JNull (JNumber . fromIntegral) c)
                                , ("chunking", JString (chunkingName on)), ("seconds", JNumber s) ]
                      | (p, c, on, s) <- rows ]) ] ++ extra

-- | The CPU seconds (user and system) a process of this machine has used,
-- and the minor page faults it has taken (first touches of memory,
-- mostly), from one read of @/proc/PID/stat@; zeros once it is gone.
processUsage :: Int -> IO (Double, Int)
processUsage = usageOf . show

-- | This process's 'processUsage' (from @/proc/self/stat@).
ownUsage :: IO (Double, Int)
ownUsage = usageOf "self"

usageOf :: String -> IO (Double, Int)
usageOf pid = do
  fields <- statFields pid
  ticks <- getSysVar ClockTick
  -- after the command name: minflt is the 8th field, utime and stime the 12th and 13th
  let number :: String -> Maybe Integer
      number f = case reads f of { [(n, "")] -> Just n; _ -> Nothing }
      cpu = case drop 11 fields of
        u : st : _ | Just a <- number u, Just b <- number st -> fromIntegral (a + b) / fromIntegral ticks
        _ -> 0
      faults = case drop 7 fields of
        f : _ | Just n <- number f -> fromIntegral n
        _ -> 0
  pure (cpu, faults)

-- The fields of @/proc/PID/stat@ after the command name's closing
-- parenthesis (none if the file cannot be read).
statFields :: String -> IO [String]
statFields pid = do
  text <- E.try (readFile ("/proc/" ++ pid ++ "/stat") >>= \t -> length t `seq` pure t)
  pure $ case text of
    Left (_ :: E.IOException) -> []
    Right t -> words (reverse (takeWhile (/= ')') (reverse t)))
