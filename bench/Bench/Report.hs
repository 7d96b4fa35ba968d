{-# LANGUAGE ScopedTypeVariables #-}
-- | The benchmark page (@docs/benchmarks.md@), generated: every benchmark
-- of the list below is run as its own process of this executable with
-- @--json@ (and @--plot@ where it draws a figure), and its rows become one
-- table, under a header naming the machine. The page is rewritten whole,
-- so its figures are redrawn, never edited; history stays in git.
--
-- Promises: a benchmark that fails or prints no JSON stops the report
-- with its name and its exit status (nothing half-written is left: the
-- page is written once, at the end); every table has one column per field
-- any of its rows has, in the order they first appear.
module Bench.Report
  ( Options (..)
  , run
  ) where

import Control.Exception (IOException, try)
import Control.Monad (forM, unless)
import Data.Char (isSpace)
import Data.List (intercalate, nub)
import Data.Time (defaultTimeLocale, formatTime, getZonedTime)
import GHC.Conc (getNumProcessors)
import Herd.Testkit.Json (Value (..), parseJson)
import Numeric (showFFloat)
import System.Environment (getExecutablePath)
import System.Exit (ExitCode (..), exitWith)
import System.FilePath (takeDirectory, takeFileName, (</>))
import System.Info (compilerVersion)
import System.IO (hFlush, hPutStrLn, stderr, stdout)
import System.Process (readProcessWithExitCode)
import Data.Version (showVersion)

-- | Where the page goes, whether to run each benchmark at a smaller size,
-- and which sections alone to redo.
data Options = Options
  { optOut   :: FilePath  -- ^ the page; its figures go beside it
  , optQuick :: Bool      -- ^ small sizes: a check that the report runs, not figures to keep
  , optOnly  :: [String]  -- ^ these sections' titles alone, replaced in the page as it is (none: the whole page)
  }

-- One benchmark on the page: its title, what it measures, its arguments
-- (after @herd bench@), those of a quick run, and its figure.
data Entry = Entry
  { entryTitle :: String
  , entryWhat  :: String
  , entryArgs  :: [String]
  , entryQuick :: [String]
  , entryPlot  :: Maybe FilePath
  }

entries :: [Entry]
entries =
  [ Entry "The HaLVM study's models" "One Fibonacci farm under five parallel models (sparks, forkIO, forkOS, and herd's separate runtimes) over core counts: the study's Table 1 and Figure 3."
      ["models"] ["models", "--fib", "25", "--tasks", "4"] (Just "models.svg")
  , Entry "Tasks that spawn tasks" "The HdpH suite's divide-and-conquer workloads (nfib with a threshold, sumEuler, n-queens, mandelbrot): sequential, GHC's sparks and monad-par on two capabilities, and herd on two workers (one task whose top children the workers steal from each other, spawnTask, below them the Par monad on the worker); and a tree of 100,000 sleeping leaves over 1,024 simulated workers (herd-sim, with its efficiency): its subtrees stolen from worker to worker, each simulated host brokering its own workers' steals as an agent does, and in the JSON's divided list the same tree divided at the master."
      ["par"] ["par", "--nfib", "30", "--euler", "1500", "--queens", "9", "--mandelbrot", "100", "--sim-workers", "64", "--sim-leaves", "2000"] Nothing
  , Entry "Throughput" "Tiny tasks (x -> x + 1) per second through the farm, with dynamic chunking on and off, and heap allocated per task."
      ["throughput"] ["throughput", "--tasks", "200000"] Nothing
  , Entry "Stream echo" "Eden's figure 5: a stream process that echoes items of several sizes, chunking on and off."
      ["echo", "--items", "10000", "--words", "1,10,100,300,1000"] ["echo", "--items", "200", "--words", "1,100"] (Just "echo.svg")
  , Entry "Parallel sort" "Eden's parsort, parsortchunk and parsortchunk2, chunking on and off."
      ["parsort", "--n", "100000"] ["parsort", "--n", "5000"] (Just "parsort.svg")
  , Entry "Mandelbrot" "Eden's Mandelbrot picture: one row per task, or static chunks of rows, chunking on and off."
      ["mandelbrot"] ["mandelbrot", "--size", "64", "--iterations", "200"] Nothing
  , Entry "Particle filter, 2000 states" "FP Complete's particle filter on the evolve API with simulated step costs (30 ms a state), over worker counts and both master loops."
      ["pfilter", "--simulate", "--cost", "30ms", "--states", "2000"] ["pfilter", "--simulate", "--cost", "30ms", "--workers", "2,4", "--states", "40", "--steps", "2"] (Just "pfilter.svg")
  , Entry "Particle filter, thousands of workers" "The same on 512, 2048 and 8192 simulated workers played by four simulated hosts, each with one host link to the master, in two levels (each host's agent schedules its workers, the master balances the hosts): how the master scales."
      ["pfilter", "--simulate", "--cost", "30ms", "--states", "8192", "--workers", "512,2048,8192", "--sim-hosts", "4"]
      ["pfilter", "--simulate", "--cost", "30ms", "--workers", "16", "--states", "64", "--steps", "2", "--sim-hosts", "2", "--master", "epoll"] (Just "pfilter-sim.svg")
  , Entry "Shared points: k-means" "k-means on points in the plane: the points shared once (held), held as slices on the workers and stepped where they are (refs), or resent to each task at every iteration; seconds and bytes through the master's links."
      ["kmeans", "--points", "2000000", "--iterations", "20"] ["kmeans", "--points", "20000", "--iterations", "3"] Nothing
  , Entry "Reductions: word count" "Word counts summed on the workers (reduceByKey), as a dataset's shuffle (datasets), and by collecting every (word, 1) pair at the master; the median seconds of five rounds (the ways in turn) and bytes through the master's links."
      ["wordcount"] ["wordcount", "--docs", "10", "--words", "1000", "--rounds", "1"] Nothing
  , Entry "Datasets: PageRank" "PageRank on a generated graph of 2,000,000 nodes and 10 edges each, 10 iterations: in one process, and as datasets held on two workers (the graph made and kept on the workers, each iteration's sums shuffled worker to worker; the workers with a 256 MiB heap reserve); the best of the runs, and bytes per iteration through the master's links and from worker to worker."
      ["pagerank"] ["pagerank", "--nodes", "20000", "--iterations", "3", "--rounds", "1"] Nothing
  , Entry "Latency" "Round trip of one small message between the master and one worker, per transport (TCP also under TLS), beside a C floor over the same transport."
      ["latency", "--transport", "tcp,unix,shm", "--tls"] ["latency", "--rounds", "2000"] (Just "latency.svg")
  , Entry "Bandwidth" "MiB per second of a stream of 1 MiB messages from the master to one worker, per transport (TCP also under TLS), beside a C floor."
      ["bandwidth", "--tls"] ["bandwidth", "--total-mib", "64", "--passes", "1"] Nothing
  , Entry "Robustness: fuzzing" "Mutated frames of every message type sent at a master and at a worker, per transport: every receiver must drop the peer, never crash or hang."
      ["fuzz"] ["fuzz", "--frames", "200"] Nothing
  , Entry "Robustness: chaos" "Farm, stream and evolve jobs while workers are killed and stopped at random; every result is checked."
      ["chaos", "--seconds", "10"] ["chaos", "--seconds", "3"] Nothing
  ]

-- | Run every benchmark and write the page.
run :: Options -> IO ()
run o = do
  self <- getExecutablePath
  let dir = takeDirectory (optOut o)
      unknown = [ t | t <- optOnly o, t `notElem` map entryTitle entries ]
      chosen = if null (optOnly o) then entries else [ e | e <- entries, entryTitle e `elem` optOnly o ]
  unless (null unknown) $ failWith ("no section is titled " ++ intercalate ", " (map show unknown)
                                    ++ "; the titles: " ++ intercalate ", " (map (show . entryTitle) entries))
  sections <- forM chosen $ \e -> do
    let plot = maybe [] (\f -> ["--plot", dir </> f]) (entryPlot e)
        args = ["bench"] ++ (if optQuick o then entryQuick e else entryArgs e) ++ ["--json"] ++ plot
    putStrLn ("herd bench report: " ++ unwords ("herd" : args))
    hFlush stdout
    (code, out, err) <- readProcessWithExitCode self args ""
    unless (code == ExitSuccess) $ failWith (unwords args ++ " failed (" ++ show code ++ "): " ++ lastLines err)
    rows <- case reverse (filter (not . all isSpace) (lines out)) of
      final : _ | Right v <- parseJson final, Just rs <- rowsOf v -> pure rs
      _ -> failWith (unwords args ++ " printed no JSON line of rows")
    pure (section e (unwords ("herd" : init' args)) rows)
  page <- if null (optOnly o)
    then (\header -> header ++ concat sections) <$> machineHeader (optQuick o)
    else do
      old <- try (readFile (optOut o))
      case old of
        Left (e :: IOException) -> failWith ("cannot read " ++ optOut o ++ " to replace sections in: " ++ show e)
        Right text -> do
          stamp <- remeasured
          let noted = [ take 1 s ++ ["", stamp] ++ drop 1 s | s <- sections ]
          length text `seq` pure (replaceSections (zip (map entryTitle chosen) noted) (lines text))
  written <- try (writeFile (optOut o) (unlines page))
  either (\(e :: IOException) -> failWith ("cannot write " ++ optOut o ++ ": " ++ show e)) pure written
  putStrLn ("herd bench report: wrote " ++ optOut o)
  where
    -- the command as a reader would type it: without --json and the figure's path
    init' args = takeWhile (/= "--json") args
    lastLines = intercalate " / " . reverse . take 3 . reverse . lines
    failWith msg = hPutStrLn stderr ("herd bench report: " ++ msg) >> exitWith (ExitFailure 1)

-- The line a section redone alone carries: when and at which commit,
-- since the page's header tells of the rest.
remeasured :: IO String
remeasured = do
  now <- getZonedTime
  commit <- gitCommit
  pure ("(This section was measured again on its own, " ++ formatTime defaultTimeLocale "%Y-%m-%d %H:%M %Z" now
        ++ ", commit " ++ commit ++ ", on the machine named above.)")

-- The page's lines with each named section (from its @## @ title to the
-- next) replaced; a section the page lacks goes at its end.
replaceSections :: [(String, [String])] -> [String] -> [String]
replaceSections fresh page = go page ++ concat [ s | (t, s) <- fresh, ("## " ++ t) `notElem` page ]
  where
    go [] = []
    go (l : ls) = case lookup l [ ("## " ++ t, s) | (t, s) <- fresh ] of
      Just s -> s ++ go (dropWhile (not . isTitle) ls)
      Nothing -> l : go ls
    isTitle l = take 3 l == "## "

-- The rows of a bench's JSON line.
rowsOf :: Value -> Maybe [[(String, Value)]]
rowsOf (Object fs) = case lookup "rows" fs of
  Just (Array rs) -> Just [ r | Object r <- rs ]
  _ -> Nothing
rowsOf _ = Nothing

-- One benchmark's section: what it measures, its command, its table and
-- its figure.
section :: Entry -> String -> [[(String, Value)]] -> [String]
section e command rows =
  [ "## " ++ entryTitle e, "", entryWhat e, "", "```", command, "```", "" ]
  ++ table rows
  ++ maybe [] (\f -> ["", "![" ++ entryTitle e ++ "](" ++ takeFileName f ++ ")"]) (entryPlot e)
  ++ [""]

table :: [[(String, Value)]] -> [String]
table [] = ["(no rows)"]
table rows = line columns : line (map (const "---") columns) : [ line [ maybe "" cell (lookup c r) | c <- columns ] | r <- rows ]
  where
    columns = nub (concatMap (map fst) rows)
    line cs = "| " ++ intercalate " | " cs ++ " |"

cell :: Value -> String
cell v = case v of
  Null -> ""
  Bool b -> if b then "yes" else "no"
  Number x
    | x == fromIntegral (round x :: Integer), abs x < 1e15 -> show (round x :: Integer)
    | abs x >= 100 -> showFFloat (Just 1) x ""
    | abs x >= 1 -> showFFloat (Just 3) x ""
    | otherwise -> showFFloat (Just 4) x ""
  String s -> s
  Array xs -> intercalate ", " (map cell xs)
  Object fs -> intercalate ", " [ k ++ ": " ++ cell x | (k, x) <- fs ]

-- The page's first lines: what it is and the machine it was measured on.
machineHeader :: Bool -> IO [String]
machineHeader quick = do
  cores <- getNumProcessors
  cpu <- firstField "model name" <$> readOr "/proc/cpuinfo"
  mem <- firstField "MemTotal" <$> readOr "/proc/meminfo"
  kernel <- filter (/= '\n') <$> readOr "/proc/sys/kernel/osrelease"
  commit <- gitCommit
  now <- getZonedTime
  pure
    [ "# Benchmarks"
    , ""
    , "Generated by `make bench-report` (`herd bench report`): every table below is the last line of"
    , "`herd bench NAME --json` for the command shown, run on the machine named here. Run it again to"
    , "redraw the page and its figures; the history of the figures is in git."
    , ""
    , "| | |"
    , "| --- | --- |"
    , "| measured | " ++ formatTime defaultTimeLocale "%Y-%m-%d %H:%M %Z" now ++ (if quick then " (quick sizes: not figures to quote)" else "") ++ " |"
    , "| commit | " ++ commit ++ " |"
    , "| CPU | " ++ cpu ++ ", " ++ show cores ++ " logical cores |"
    , "| memory | " ++ gib mem ++ " |"
    , "| kernel | Linux " ++ kernel ++ " |"
    , "| compiler | GHC " ++ showVersion compilerVersion ++ " (the build's major version) |"
    , ""
    ]
  where
    readOr path = either (\(_ :: IOException) -> "") id <$> try (readFile path >>= \s -> length s `seq` pure s)
    firstField name text = case [ dropWhile (`elem` ": \t") (drop (length name) l) | l <- lines text, take (length name) l == name ] of
      v : _ -> v
      [] -> "unknown"
    -- /proc/meminfo's kB as GiB
    gib text = case reads text of
      [(kb, rest)] | dropWhile isSpace rest == "kB" -> showFFloat (Just 1) (fromIntegral (kb :: Integer) / 1048576 :: Double) " GiB"
      _ -> text

-- The commit checked out here, short.
gitCommit :: IO String
gitCommit = do
  r <- try (readProcessWithExitCode "git" ["rev-parse", "--short", "HEAD"] "")
  pure $ case r of
    Right (ExitSuccess, out, _) -> takeWhile (not . isSpace) out
    Right _ -> "unknown (not a git checkout)"
    Left (_ :: IOException) -> "unknown (no git)"
