{-# OPTIONS_GHC -fno-full-laziness -fno-cse #-}
-- (Without those two flags GHC shares a workload's answer between the
-- implementations, and every run after the first measures nothing.)

-- | @herd bench par@: the HdpH suite's divide-and-conquer workloads
-- (nfib with a threshold, sumEuler, n-queens, mandelbrot), each run
-- sequentially, with GHC's sparks and with monad-par on this process's
-- capabilities, and with herd on worker processes: divided at the master
-- ("Herd.Skeleton"), each piece run with "Herd.Par" on its worker. Also
-- the cost of one spawn and get of "Herd.Par", timed on a worker. Every
-- answer is checked against the sequential one.
module Bench.Par
  ( Options (..)
  , run
  ) where

import Control.Concurrent (setNumCapabilities)
import Control.Monad (forM, forM_, unless, when)
import qualified Control.Monad.Par as MP
import Control.Parallel (par, pseq)
import Control.Parallel.Strategies (parList, rseq, using)
import Herd
import Herd.Config
import Herd.Monitor (StealCounts (..), Status (..), WorkerRow (..), clusterStatus)
import Herd.Core.Report
import Herd.Examples.Par
import Herd.Examples.Steal
import Herd.Skeleton (Divide, divideAndConquer)
import Bench.Common (ownUsage, timed)
import GHC.StaticPtr (StaticPtr)
import System.IO

-- | Benchmark settings.
data Options = Options
  { optWorkers :: Int    -- ^ herd's workers, and the capabilities sparks and monad-par get
  , optNfib    :: Int    -- ^ nfib's argument
  , optEuler   :: Int    -- ^ sumEuler's upper bound
  , optQueens  :: Int    -- ^ the board size
  , optMandel  :: Int    -- ^ the image's side in pixels
  , optSimWorkers :: Int    -- ^ simulated workers of the herd-sim row (0: none)
  , optSimHosts   :: Int    -- ^ simulated hosts that play them
  , optSimLeaves  :: Int    -- ^ leaves of the herd-sim row's tree
  , optSimCost    :: Double -- ^ seconds each leaf stands for
  , optJson    :: Bool
  }

-- One timed run.
data Row = Row
  { rowWorkload :: String
  , rowImpl     :: String
  , rowWorkers  :: Int
  , rowSecs     :: Double
  }

-- One workload: its sequential code, the others' forms, and herd's division.
data Workload = Workload
  { wlName       :: String
  , wlSequential :: Int
  , wlSparks     :: Int
  , wlMonadPar   :: Int
  , wlHerd       :: Cluster -> IO Int   -- ^ one task whose children the workers steal
  , wlDivided    :: Cluster -> IO Int   -- ^ divided at the master, the pieces a farm
  , wlDescribe   :: String
  }

-- | Run the benchmark and print its table (and JSON line).
run :: Options -> IO ()
run o = do
  hSetBuffering stdout LineBuffering
  let loads = workloads o
      cores = optWorkers o
  putStrLn ("herd bench par: " ++ show cores ++ " capabilities for sparks and monad-par, "
            ++ show cores ++ " herd workers")
  local <- fmap concat $ forM loads $ \w -> do
    setNumCapabilities 1
    (s, expected) <- timed (pure (wlSequential w))
    setNumCapabilities cores
    (sp, a) <- timed (pure (wlSparks w))
    (mp, b) <- timed (pure (wlMonadPar w))
    setNumCapabilities 1
    check (wlName w ++ " with sparks") expected a
    check (wlName w ++ " with monad-par") expected b
    putStrLn ("  " ++ wlName w ++ " (" ++ wlDescribe w ++ "): sequential " ++ fixed 3 s ++ " s, sparks "
              ++ fixed 3 sp ++ " s, monad-par " ++ fixed 3 mp ++ " s")
    pure [(w, expected, [Row (wlName w) "sequential" 1 s, Row (wlName w) "sparks" cores sp, Row (wlName w) "monad-par" cores mp])]
  (herdRows, (spawnGet, spawnTaskGet)) <- withCluster defaultConfig { configWorkers = Just cores } $ \cluster -> do
    _ <- waitForWorkers cluster cores 30
    rows <- forM local $ \(w, expected, _) -> do
      before <- stolenSoFar cluster
      (h, c) <- timed (wlHerd w cluster)
      check (wlName w ++ " on herd") expected c
      steals <- subtract before <$> stolenSoFar cluster
      (d, c') <- timed (wlDivided w cluster)
      check (wlName w ++ " on herd, divided at the master") expected c'
      putStrLn ("  " ++ wlName w ++ ": herd " ++ fixed 3 h ++ " s (stolen: " ++ show steals ++ "), "
                ++ fixed 3 d ++ " s (divided at the master)")
      pure (Row (wlName w) "herd" cores h, Row (wlName w) "herd-divided" cores d)
    -- the first call warms the worker; the second is measured
    _ <- farm cluster spawnGetTask [100000]
    [us] <- farm cluster spawnGetTask [2000000]
    _ <- farm cluster spawnTaskGetTask [10000]
    [stealable] <- farm cluster spawnTaskGetTask [200000]
    pure (map fst rows ++ map snd rows, (us, stealable))
  sim <- if optSimWorkers o <= 0 then pure [] else simulatedRows o
  let rows = concat [ rs | (_, _, rs) <- local ] ++ herdRows
      sequentialOf wl = head ([ rowSecs r | r <- rows, rowWorkload r == wl, rowImpl r == "sequential" ] ++ [1])
  putStrLn ""
  putStr $ renderTable ["workload", "impl", "workers", "seconds", "speedup"]
    [ [rowWorkload r, rowImpl r, show (rowWorkers r), fixed 3 (rowSecs r), fixed 2 (sequentialOf (rowWorkload r) / rowSecs r)]
    | r <- rows ]
  forM_ sim $ \(r, eff) -> putStrLn ("\n" ++ rowWorkload r ++ " on " ++ show (rowWorkers r) ++ " simulated workers"
                                     ++ (if rowImpl r == "herd-sim" then " (stolen): " else " (divided at the master): ")
                                     ++ fixed 3 (rowSecs r) ++ " s, efficiency " ++ fixed 3 eff)
  putStrLn ("\none spawn and get of Herd.Par on a worker: " ++ fixed 3 spawnGet ++ " us; one spawnTask and get (not stolen): "
            ++ fixed 3 spawnTaskGet ++ " us")
  when (optJson o) $ putStrLn $ renderJson $ JObject
    [ ("bench", JString "par")
    , ("rows", JArray ([ JObject [ ("workload", JString (rowWorkload r)), ("impl", JString (rowImpl r))
                                , ("workers", JInt (fromIntegral (rowWorkers r))), ("seconds", JNumber (rowSecs r))
                                , ("speedup", JNumber (sequentialOf (rowWorkload r) / rowSecs r)) ]
                      | r <- rows, rowImpl r /= "herd-divided" ]
                      ++ [ JObject [ ("workload", JString (rowWorkload r)), ("impl", JString (rowImpl r))
                                   , ("workers", JInt (fromIntegral (rowWorkers r))), ("seconds", JNumber (rowSecs r))
                                   , ("efficiency", JNumber eff) ]
                         | (r, eff) <- sim, rowImpl r == "herd-sim" ]))
    , ("divided", JArray ([ JObject [ ("workload", JString (rowWorkload r)), ("seconds", JNumber (rowSecs r)) ]
                          | r <- rows, rowImpl r == "herd-divided" ]
                          ++ [ JObject [ ("workload", JString (rowWorkload r)), ("workers", JInt (fromIntegral (rowWorkers r)))
                                       , ("seconds", JNumber (rowSecs r)), ("efficiency", JNumber eff) ]
                             | (r, eff) <- sim, rowImpl r /= "herd-sim" ]))
    , ("spawn_get_us", JNumber spawnGet)
    , ("spawn_task_get_us", JNumber spawnTaskGet) ]
  where
    check what expected got = unless (expected == got) $
      fail ("herd bench par: " ++ what ++ " gave " ++ show got ++ ", not " ++ show expected)

-- A tree of sleeping leaves over simulated workers, its subtrees stolen
-- from worker to worker (the row @herd-sim@), then divided at the master
-- (@herd-sim-divided@): the rows and their efficiencies (the leaves'
-- total cost over the workers, against the time taken).
simulatedRows :: Options -> IO [(Row, Double)]
simulatedRows o = do
  let w = optSimWorkers o
      cfg = defaultConfig { configWorkers = Just 0, configSimulatedWorkers = w
                          , configSimulatedHosts = optSimHosts o, configStartTimeout = 120 }
      leaves = optSimLeaves o
  withCluster cfg $ \cluster -> do
    _ <- waitForWorkers cluster w 120
    have <- clusterWorkerCount cluster
    -- stealable subtrees down to some 16 a worker, as the division makes
    let cut = max 1 (leaves `div` (have * 16))
        name = "tree-" ++ show leaves
        ideal = fromIntegral leaves * optSimCost o / fromIntegral have
        measure what act = do
          (cpu0, _) <- ownUsage
          (secs, got) <- timed act
          (cpu1, _) <- ownUsage
          unless (got == leaves) $ fail ("herd bench par: the simulated tree " ++ what ++ " gave " ++ show got ++ " leaves")
          putStrLn ("  " ++ name ++ " " ++ what ++ " (" ++ show have ++ " simulated workers, leaves of " ++ fixed 3 (optSimCost o * 1000)
                    ++ " ms): " ++ fixed 3 secs ++ " s, ideal " ++ fixed 3 ideal ++ " s, master CPU " ++ fixed 3 (cpu1 - cpu0) ++ " s")
          pure (secs, ideal / secs)
    -- small trees first, so every worker has run the tasks once
    _ <- divideAndConquer cluster treeDivide treeTask (have, 0)
    _ <- stolen cluster treeStealTask (have, 0, 1)
    before <- stolenSoFar cluster
    brokered0 <- statusStealsBrokered <$> clusterStatus cluster
    (s, e) <- measure ("stolen, cut " ++ show cut) (stolen cluster treeStealTask (leaves, optSimCost o, cut))
    steals <- subtract before <$> stolenSoFar cluster
    brokered <- subtract brokered0 . statusStealsBrokered <$> clusterStatus cluster
    putStrLn ("    children stolen: " ++ show steals ++ ", of them brokered by the master: " ++ show brokered
              ++ " (the rest by the hosts' own brokers)")
    (d, de) <- measure "divided at the master" (divideAndConquer cluster treeDivide treeTask (leaves, optSimCost o))
    pure [(Row name "herd-sim" have s, e), (Row name "herd-sim-divided" have d, de)]

-- The four workloads at the options' sizes.
workloads :: Options -> [Workload]
workloads o =
  [ Workload "nfib" (nfib n) (nfibSparks 20 n) (MP.runPar (nfibMP 20 n))
      (\c -> stolen c nfibStealTask (n, 20, n - 14)) (\c -> onHerd c nfibDivide nfibTask (n, 20))
      ("n " ++ show n ++ ", threshold 20")
  , Workload "sumEuler" (sumEuler (1, e)) (sum (map sumEuler (chunks 50 e) `using` parList rseq))
      (MP.runPar (sum <$> MP.parMap sumEuler (chunks 50 e)))
      (\c -> stolen c sumEulerStealTask (1, e)) (\c -> onHerd c sumEulerDivide sumEulerTask (1, e))
      ("1 to " ++ show e ++ ", chunks of 50")
  , Workload "queens" (queens q) (sum (map (queensFrom q) (placements q 2) `using` parList rseq))
      (MP.runPar (sum <$> MP.parMap (queensFrom q) (placements q 2)))
      (\c -> stolen c queensStealTask (q, [])) (\c -> onHerd c queensDivide queensTask (q, []))
      (show q ++ " queens")
  , Workload "mandelbrot" (mandelRows m (0, m - 1)) (sum (map (mandelRows m) (chunks' 4 m) `using` parList rseq))
      (MP.runPar (sum <$> MP.parMap (mandelRows m) (chunks' 4 m)))
      (\c -> stolen c mandelStealTask (m, (0, m - 1))) (\c -> onHerd c mandelDivide mandelTask (m, (0, m - 1)))
      (show m ++ " x " ++ show m ++ ", 255 iterations")
  ]
  where
    n = optNfib o
    e = optEuler o
    q = optQueens o
    m = optMandel o
    chunks size hi = [ (a, min hi (a + size - 1)) | a <- [1, 1 + size .. hi] ]
    chunks' size rows = [ (a, min (rows - 1) (a + size - 1)) | a <- [0, size .. rows - 1] ]
    placements :: Int -> Int -> [[Int]]
    placements size depth = go depth []
      where go :: Int -> [Int] -> [[Int]]
            go 0 placed = [placed]
            go d placed = concat [ go (d - 1) (c : placed) | c <- [1 .. size], all (ok c placed) (zip [1 ..] placed) ]
            ok c _ (dist, r) = c /= r && abs (c - r) /= dist

onHerd :: Cluster -> Divide a Int -> StaticPtr (Task a Int) -> a -> IO Int
onHerd = divideAndConquer

-- Children stolen so far, over the workers.
stolenSoFar :: Cluster -> IO Int
stolenSoFar cluster = sum . map (countStolen . rowSteals) . statusWorkers <$> clusterStatus cluster

-- One task on one worker, its children stolen by the others.
stolen :: Cluster -> StaticPtr (Task a Int) -> a -> IO Int
stolen cluster t x = do
  out <- farm cluster t [x]
  case out of
    [v] -> pure v
    _ -> fail "herd bench par: a farm of one task gave other than one answer"


-- nfib with sparks: both calls above the threshold, one sparked.
nfibSparks :: Int -> Int -> Int
nfibSparks t n
  | n <= t = nfib n
  | otherwise = let a = nfibSparks t (n - 1)
                    b = nfibSparks t (n - 2)
                in a `par` (b `pseq` (a + b + 1))

-- nfib with monad-par.
nfibMP :: Int -> Int -> MP.Par Int
nfibMP t n
  | n <= t = pure (nfib n)
  | otherwise = do
      a <- MP.spawn (nfibMP t (n - 1))
      b <- nfibMP t (n - 2)
      x <- MP.get a
      pure (x + b + 1)
