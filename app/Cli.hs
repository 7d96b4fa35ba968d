-- | Command-line parsing for @herd@. Every flag is validated here, and a
-- bad one is reported with its name and the values it accepts.
module Cli
  ( run
  ) where

import qualified Bench.Models as Models
import qualified Bench.Nursery as Nursery
import qualified Bench.Throughput as Throughput
import qualified Bench.Packets as Packets
import qualified Bench.Echo as Echo
import qualified Bench.Parsort as Parsort
import qualified Bench.Mandelbrot as Mandelbrot
import qualified Bench.Pfilter as Pfilter
import qualified Bench.EvolveCore as EvolveCore
import qualified Bench.Skew as Skew
import qualified Bench.KMeans as KMeans
import qualified Bench.WordCount as WordCount
import qualified Bench.Bandwidth as Bandwidth
import qualified Bench.Latency as Latency
import qualified Bench.Fuzz as Fuzz
import qualified Bench.Chaos as Chaos
import qualified Bench.Report as Report
import Herd.Fuzz (FuzzTarget (..))
import Data.Char (isDigit)
import qualified Demo
import Herd.Settings (MasterLoop (..), SecretSource (..), parseDashboardAddress, parseMasterLoop)
import Herd.Node.Topology (parseCpuList)
import Herd.Node (MasterAddress, WorkerOptions (..), parseMasterAddress, runWorker, showMasterAddress)
import Herd.Transport.Auth (loadSecret)
import Herd.Node.Agent (runAgentByHand)
import Herd.Sys.Log (logToStderr)
import System.Exit (ExitCode (..), exitWith)
import System.Posix.Unistd (getSystemID, nodeName)
import Herd.Transport (TransportKind, parseTransportKind)
import Data.List (nub)
import Herd.Options (clusterFlags)
import Options.Applicative

data Command
  = DemoCmd Demo.Options
  | BenchModels Models.Options
  | BenchNursery Nursery.Options
  | BenchThroughput Throughput.Options
  | BenchEcho Echo.Options
  | BenchPackets Packets.Options
  | BenchParsort Parsort.Options
  | BenchMandelbrot Mandelbrot.Options
  | BenchPfilter Pfilter.Options
  | BenchEvolveCore EvolveCore.Options
  | BenchSkew Skew.Options
  | BenchKMeans KMeans.Options
  | BenchWordCount WordCount.Options
  | BenchLatency Latency.LatencyOptions
  | BenchFuzz Fuzz.Options
  | BenchChaos Chaos.Options
  | BenchBandwidth Bandwidth.BandwidthOptions
  | BenchReport Report.Options
  | WorkerCmd WorkerOptions
  | AgentCmd AgentOptions

-- | @herd agent@: where the master is, how many workers, the secret.
data AgentOptions = AgentOptions MasterAddress (Maybe Int) (Maybe FilePath)

-- | Parse the command line and run the command.
run :: IO ()
run = do
  -- no backtracking: a sub-command's bad flag is reported with that
  -- sub-command's usage, not the top level's
  cmd <- customExecParser (prefs (showHelpOnEmpty <> noBacktrack)) (info (commands <**> helper)
           (fullDesc <> progDesc "Scale pure Haskell computations over one GHC runtime per core"
                     <> header "herd - a task farm over many GHC runtimes"))
  case cmd of
    DemoCmd o -> Demo.run o
    BenchModels o -> Models.run o
    BenchNursery o -> Nursery.run o
    BenchThroughput o -> Throughput.run o
    BenchEcho o -> Echo.run o
    BenchPackets o -> Packets.run o
    BenchParsort o -> Parsort.run o
    BenchMandelbrot o -> Mandelbrot.run o
    BenchPfilter o -> Pfilter.run o
    BenchEvolveCore o -> EvolveCore.run o
    BenchSkew o -> Skew.run o
    BenchKMeans o -> KMeans.run o
    BenchWordCount o -> WordCount.run o
    BenchLatency o -> Latency.runLatency o
    BenchFuzz o -> Fuzz.run o
    BenchChaos o -> Chaos.run o
    BenchBandwidth o -> Bandwidth.runBandwidth o
    BenchReport o -> Report.run o
    WorkerCmd o -> runWorker o
    AgentCmd o -> runAgentCommand o

commands :: Parser Command
commands = hsubparser
  ( command "demo" (info (DemoCmd <$> demoOptions)
      (progDesc "Run the HaLVM study's Fibonacci farm on one worker, then on every core"))
 <> command "bench" (info benchCommands (progDesc "Run a benchmark (see: herd bench --help)"))
 <> command "worker" (info (WorkerCmd <$> workerOptions)
      (progDesc "Join a running master as a worker"))
 <> command "agent" (info (AgentCmd <$> agentOptions)
      (progDesc "Join a running master with this host's workers, one pinned to each physical core, kept up")) )

agentOptions :: Parser AgentOptions
agentOptions = AgentOptions
  <$> option (eitherReader parseMasterAddress) (long "connect" <> metavar "HOST:PORT"
                     <> help "the master's address, as it printed it (tls:HOST:PORT with --tls)")
  <*> optional (option (positiveInt "a worker count" 4096) (long "workers" <> metavar "N"
                     <> help "workers to start (default: one per physical core)"))
  <*> optional (strOption (long "secret-file" <> metavar "FILE"
                     <> help "the shared secret (default: $HERD_SECRET, else ~/.herd/cookie)"))

-- Run @herd agent@: its workers report the launch as @agent:HOST@.
runAgentCommand :: AgentOptions -> IO ()
runAgentCommand (AgentOptions address workers secretFile) = do
  secret <- loadSecret (maybe SecretAuto SecretFile secretFile)
  case secret of
    Left why -> do
      logToStderr ("herd agent: no usable secret: " ++ why)
      exitWith (ExitFailure 2)
    Right s -> do
      host <- nodeName <$> getSystemID
      runAgentByHand (showMasterAddress address) workers ("agent:" ++ host) s

benchCommands :: Parser Command
benchCommands = hsubparser
  ( command "models" (info (BenchModels <$> modelsOptions)
      (progDesc "The HaLVM study's Table 1 and Figure 3: one Fibonacci farm under five parallel models"))
 <> command "nursery" (info (BenchNursery <$> nurseryOptions)
      (progDesc "Time an allocation-heavy farm under several worker nursery sizes (+RTS -A)"))
 <> command "throughput" (info (BenchThroughput <$> throughputOptions)
      (progDesc "Tiny tasks per second through the farm, dynamic chunking on and off"))
 <> command "echo" (info (BenchEcho <$> echoOptions)
      (progDesc "Eden's figure 5: a stream process id echoing items of several sizes, chunking on and off"))
 <> command "packets" (info (BenchPackets <$> packetsOptions)
      (progDesc "Sweep the packet size and flush timeout: tiny farm tasks per second and stream echo times"))
 <> command "parsort" (info (BenchParsort <$> parsortOptions)
      (progDesc "Eden's parsort, parsortchunk and parsortchunk2, chunking on and off"))
 <> command "mandelbrot" (info (BenchMandelbrot <$> mandelbrotOptions)
      (progDesc "Eden's Mandelbrot picture, one row per task or static chunks of rows, chunking on and off"))
 <> command "pfilter" (info (BenchPfilter <$> pfilterOptions)
      (progDesc "FP Complete's particle filter on the evolve API: scaling over worker counts, both master loops"))
 <> command "evolvecore" (info (BenchEvolveCore <$> evolveCoreOptions)
      (progDesc "The master's core alone on evolve calls with simulated workers: its CPU and bytes per state, per worker count"))
 <> command "skew" (info (BenchSkew <$> skewOptions)
      (progDesc "FP Complete's skew case: nine 1 s states and one 10 s state on two workers, evolved repeatedly"))
 <> command "kmeans" (info (BenchKMeans <$> kmeansOptions)
      (progDesc "k-means with its points shared once, held as slices on the workers, or resent every iteration"))
 <> command "wordcount" (info (BenchWordCount <$> wordCountOptions)
      (progDesc "word counts summed on the workers against collecting every pair at the master"))
 <> command "fuzz" (info (BenchFuzz <$> fuzzOptions)
      (progDesc "Mutated frames of every message type at a master and at a worker, per transport: crashes, hangs, drops"))
 <> command "chaos" (info (BenchChaos <$> chaosOptions)
      (progDesc "Farm, stream and evolve jobs while workers are killed and stopped at random; every result checked"))
 <> command "latency" (info (BenchLatency <$> latencyOptions)
      (progDesc "Round trip of one small message, master to one worker, per transport, beside a C floor"))
 <> command "bandwidth" (info (BenchBandwidth <$> bandwidthOptions)
      (progDesc "MiB per second of a stream of large messages, master to one worker, per transport, beside a C floor"))
 <> command "report" (info (BenchReport <$> reportOptions)
      (progDesc "Run the benchmarks and write the benchmark page (docs/benchmarks.md) and its figures")) )

reportOptions :: Parser Report.Options
reportOptions = Report.Options
  <$> strOption (long "out" <> metavar "FILE" <> value "docs/benchmarks.md" <> showDefault
                 <> help "the page to write; its figures go beside it")
  <*> switch (long "quick" <> help "small sizes: a check that the report runs, not figures to keep")

fuzzOptions :: Parser Fuzz.Options
fuzzOptions = Fuzz.Options
  <$> option (positiveInt "a frame count" 100000000) (long "frames" <> metavar "N" <> value 2000 <> showDefault
                          <> help "mutated frames per target and transport")
  <*> option targetListArg (long "target" <> metavar "LIST" <> value [AtMaster, AtWorker]
                          <> showDefaultWith (const "master,worker") <> help "receivers to fuzz: master, worker")
  <*> option transportListArg (long "transport" <> metavar "LIST" <> value [minBound .. maxBound]
                          <> showDefaultWith (const "tcp,unix,shm") <> help "transports to fuzz over: tcp, unix, shm")
  <*> option (positiveInt "a seed" maxBound) (long "seed" <> metavar "N" <> value 1 <> showDefault
                          <> help "seed of the mutations (one seed gives the same frames)")
  <*> switch (long "json" <> help "end with one line of JSON")

chaosOptions :: Parser Chaos.Options
chaosOptions = Chaos.Options
  <$> option (secondsArg 1 86400) (long "seconds" <> metavar "S" <> value 20 <> showDefault
                          <> help "how long the jobs and the chaos run")
  <*> option (positiveInt "a worker count" 64) (long "workers" <> metavar "N" <> value 4 <> showDefault
                          <> help "local workers to kill and stop")
  <*> option (positiveInt "a seed" maxBound) (long "seed" <> metavar "N" <> value 1 <> showDefault
                          <> help "seed of the chaos (which worker, when, kill or stop)")
  <*> switch (long "json" <> help "end with one line of JSON")

targetListArg :: ReadM [FuzzTarget]
targetListArg = eitherReader $ \s -> do
  ts <- mapM one (commas s)
  if null ts then Left "expected at least one target: master, worker" else Right (nub ts)
  where
    commas str = case break (== ',') str of
      (a, _ : rest) -> a : commas rest
      (a, []) -> [a | not (null a)]
    one t = case t of
      "master" -> Right AtMaster
      "worker" -> Right AtWorker
      _ -> Left ("unknown fuzz target " ++ show t ++ " (master, worker)")

latencyOptions :: Parser Latency.LatencyOptions
latencyOptions = Latency.LatencyOptions
  <$> option transportListArg (long "transport" <> metavar "LIST" <> value [minBound .. maxBound]
                          <> showDefaultWith (const "tcp,unix,shm") <> help "transports to measure: tcp, unix, shm")
  <*> option (positiveInt "a round count" 10000000) (long "rounds" <> metavar "N" <> value 20000 <> showDefault
                          <> help "round trips per transport and implementation (the C floor that blocks at once: at most 20000; through the IO manager: at most 5000)")
  <*> switch (long "json" <> help "end with one line of JSON")
  <*> plotOption "median round trip per transport: herd, the C floor, the IO manager path (bars, log scale)"
  <*> switch (long "tls" <> help "also measure tcp with TLS on (rows herd-tls)")

bandwidthOptions :: Parser Bandwidth.BandwidthOptions
bandwidthOptions = Bandwidth.BandwidthOptions
  <$> option transportListArg (long "transport" <> metavar "LIST" <> value [minBound .. maxBound]
                          <> showDefaultWith (const "tcp,unix,shm") <> help "transports to measure: tcp, unix, shm")
  <*> option (positiveInt "a message size in MiB" 32) (long "message-mib" <> metavar "N" <> value 1 <> showDefault
                          <> help "size of each message")
  <*> option (positiveInt "a total in MiB" 65536) (long "total-mib" <> metavar "N" <> value 1024 <> showDefault
                          <> help "bytes to send per pass, transport and implementation")
  <*> option (positiveInt "a pass count" 100) (long "passes" <> metavar "N" <> value 3 <> showDefault
                          <> help "passes of the C floor and herd, in turns; the table gives each one's median")
  <*> switch (long "json" <> help "end with one line of JSON")
  <*> switch (long "tls" <> help "also measure tcp with TLS on (rows herd-tls)")

-- The optional @--dashboard HOST:PORT@ of a command that runs a cluster.
dashboardOption :: Parser (Maybe String)
dashboardOption = optional (option dashboardArg (long "dashboard" <> metavar "HOST:PORT"
  <> help "serve a live dashboard of the cluster there (e.g. 127.0.0.1:8787; port 0: a free one, logged): \
          \the page at /, JSON at /api/status, Prometheus metrics at /metrics"))

dashboardArg :: ReadM String
dashboardArg = eitherReader $ \s -> either Left (const (Right s)) (parseDashboardAddress s)

-- The optional @--plot FILE@ of a benchmark: an SVG figure of what it
-- measured, written only when asked for.
plotOption :: String -> Parser (Maybe FilePath)
plotOption what = optional (strOption (long "plot" <> metavar "FILE"
                                       <> help ("also write an SVG figure: " ++ what)))

-- A comma-separated list of transports, each named once.
transportListArg :: ReadM [TransportKind]
transportListArg = eitherReader $ \s -> do
  ts <- mapM parseTransportKind (splitCommas s)
  if null ts then Left "expected at least one transport: tcp, unix, shm"
    else if length ts /= length (nub ts) then Left ("a transport is named twice in " ++ show s)
    else Right ts
  where
    splitCommas str = case break (== ',') str of
      (a, ',' : rest) -> a : splitCommas rest
      (a, _) -> [a]

pfilterOptions :: Parser Pfilter.Options
pfilterOptions = Pfilter.Options
  <$> option (countListArg "worker counts" 16384) (long "workers" <> metavar "LIST" <> value [32, 64, 128, 256, 512]
                          <> showDefaultWith (const "32,64,128,256,512") <> help "worker counts to run (e.g. 1,2,4,...,512)")
  <*> option (positiveInt "a particle count" 10000000) (long "states" <> metavar "N" <> value 2000 <> showDefault
                          <> help "particles (states)")
  <*> option (positiveInt "a step count" 100000) (long "steps" <> metavar "N" <> value 3 <> showDefault
                          <> help "calls to evolveMany")
  <*> option durationArg (long "cost" <> metavar "TIME" <> value 0.03 <> showDefaultWith (const "30ms")
                          <> help "with --simulate: the time each particle's step sleeps (e.g. 30ms, 0.5s)")
  <*> switch (long "simulate" <> help "sleep --cost per particle step instead of computing it")
  <*> optional (option (countArg "a simulated host count" 256) (long "sim-hosts" <> metavar "K"
                          <> help ("with --simulate: play the workers in K simulated-host processes, each worker "
                                   ++ "with its own TCP link, its time simulated by timers; 0: one real process "
                                   ++ "per worker (default: one host per physical core when the workers "
                                   ++ "outnumber the cores, else 0)")))
  <*> option loopListArg (long "master" <> metavar "LIST" <> value [ThreadedLoop, EpollLoop]
                          <> showDefaultWith (const "threaded,epoll") <> help "master loops to run: threaded, epoll")
  <*> plotOption "a log-log plot of seconds against workers, per master loop"
  <*> optional (option (eitherReader parseTransportKind) (long "transport" <> metavar "tcp|unix|shm"
                          <> help "how the workers are linked (default: shm)"))
  <*> switch (long "json" <> help "end with one line of JSON")
  <*> dashboardOption
  <*> optional (strOption (long "answer-to" <> metavar "FILE" <> internal
                          <> help "measure only and write the rows here (used when the bench starts itself per loop)"))

evolveCoreOptions :: Parser EvolveCore.Options
evolveCoreOptions = EvolveCore.Options
  <$> option (countListArg "worker counts" 65536) (long "workers" <> metavar "LIST" <> value [512, 2048, 8192]
                          <> showDefaultWith (const "512,2048,8192") <> help "worker counts to run")
  <*> option (positiveInt "a state count" 10000000) (long "states" <> metavar "N" <> value 8192 <> showDefault
                          <> help "states evolved by each call")
  <*> option (positiveInt "a step count" 100000) (long "steps" <> metavar "N" <> value 3 <> showDefault
                          <> help "calls to run")
  <*> option durationArg (long "cost" <> metavar "TIME" <> value 0.03 <> showDefaultWith (const "30ms")
                          <> help "simulated time of one state's step")
  <*> option durationArg (long "delay" <> metavar "TIME" <> value 0.0001 <> showDefaultWith (const "100us")
                          <> help "simulated time a message takes either way")
  <*> option (positiveInt "a byte count" 100000000) (long "child-bytes" <> metavar "N" <> value 64 <> showDefault
                          <> help "bytes of each state's child")
  <*> switch (long "json" <> help "end with one line of JSON")

skewOptions :: Parser Skew.Options
skewOptions = Skew.Options
  <$> option (positiveInt "a step count" 1000) (long "steps" <> metavar "N" <> value 3 <> showDefault
                          <> help "calls to evolveMany")
  <*> option (positiveInt "a state count" 10000) (long "states" <> metavar "N" <> value 10 <> showDefault
                          <> help "states, one of them slow")
  <*> option durationArg (long "unit" <> metavar "TIME" <> value 1 <> showDefaultWith (const "1s")
                          <> help "step time of the ordinary states")
  <*> option durationArg (long "slow" <> metavar "TIME" <> value 10 <> showDefaultWith (const "10s")
                          <> help "step time of the slow state")
  <*> optional (option (eitherReader parseMasterLoop) (long "master" <> metavar "LOOP"
                          <> help "threaded or epoll (default: epoll)"))
  <*> switch (long "json" <> help "end with one line of JSON")
  <*> dashboardOption

kmeansOptions :: Parser KMeans.Options
kmeansOptions = KMeans.Options
  <$> option (positiveInt "a point count" 100000000) (long "points" <> metavar "N" <> value 2000000 <> showDefault
                          <> help "points in the plane")
  <*> option (positiveInt "an iteration count" 10000) (long "iterations" <> metavar "N" <> value 20 <> showDefault
                          <> help "k-means iterations")
  <*> option (positiveInt "a cluster count" 1000) (long "k" <> metavar "K" <> value 8 <> showDefault
                          <> help "centroids")
  <*> option (positiveInt "a task count" 100000) (long "chunks" <> metavar "N" <> value 16 <> showDefault
                          <> help "tasks per iteration")
  <*> option (positiveInt "a worker count" 4096) (long "workers" <> metavar "N" <> value 2 <> showDefault
                          <> help "local workers")
  <*> switch (long "json" <> help "end with one line of JSON")

wordCountOptions :: Parser WordCount.Options
wordCountOptions = WordCount.Options
  <$> option (positiveInt "a document count" 1000000) (long "docs" <> metavar "N" <> value 100 <> showDefault
                          <> help "documents, one task each")
  <*> option (positiveInt "a word count" 10000000) (long "words" <> metavar "N" <> value 10000 <> showDefault
                          <> help "words per document")
  <*> option (positiveInt "a vocabulary size" 10000000) (long "vocabulary" <> metavar "N" <> value 5000 <> showDefault
                          <> help "distinct words to draw from")
  <*> option (positiveInt "a worker count" 4096) (long "workers" <> metavar "N" <> value 2 <> showDefault
                          <> help "local workers")
  <*> switch (long "json" <> help "end with one line of JSON")

-- The items of a comma-separated list (spaces also separate).
commaItems :: String -> [String]
commaItems = words . map (\c -> if c == ',' then ' ' else c)

-- A duration: a number with s, ms or us (a bare number is seconds).
durationArg :: ReadM Double
durationArg = eitherReader parseDuration

parseDuration :: String -> Either String Double
parseDuration s =
  let (digits, unit) = span (`elem` "0123456789.") s
      scale = lookup unit [("", 1), ("s", 1), ("ms", 1e-3), ("us", 1e-6)]
  in case (reads digits, scale) of
       ([(x, "")], Just k) | x * k > 0 && x * k <= 3600 -> Right (x * k)
       _ -> Left ("expected a duration above 0 and at most an hour, such as 30ms, 0.5s or 200us, got " ++ show s)

loopListArg :: ReadM [MasterLoop]
loopListArg = eitherReader $ \s ->
  case mapM parseMasterLoop (commaItems s) of
    Right ls@(_ : _) -> Right ls
    Right [] -> Left "expected master loops: threaded, epoll or both, separated by commas"
    Left why -> Left why

echoOptions :: Parser Echo.Options
echoOptions = Echo.Options
  <$> option (positiveInt "an item count" 10000000) (long "items" <> metavar "N" <> value 10000 <> showDefault
                          <> help "items echoed per run")
  <*> option (countListArg "item sizes in words" 1000000) (long "words" <> metavar "LIST" <> value [1, 10, 100, 300, 1000]
                          <> showDefaultWith (const "1,10,100,300,1000") <> help "item sizes in machine words")
  <*> switch (long "json" <> help "end with one line of JSON")
  <*> plotOption "seconds against words per item, chunking on and off (log-log)"
  <*> dashboardOption

packetsOptions :: Parser Packets.Options
packetsOptions = Packets.Options
  <$> option (countListArg "packet sizes in bytes" 16777216) (long "sizes" <> metavar "LIST" <> value [16384, 65536, 262144]
                          <> showDefaultWith (const "16384,65536,262144") <> help "packet sizes to sweep, in bytes (at least 64)")
  <*> option durationListArg (long "timeouts" <> metavar "LIST" <> value [0.0005, 0.002, 0.008]
                          <> showDefaultWith (const "500us,2ms,8ms") <> help "flush timeouts to sweep")
  <*> option (positiveInt "a task count" 1000000000) (long "tasks" <> metavar "N" <> value 2000000 <> showDefault
                          <> help "tiny farm tasks per setting")
  <*> option (positiveInt "an item count" 10000000) (long "items" <> metavar "N" <> value 10000 <> showDefault
                          <> help "items echoed per setting and size")
  <*> option (positiveInt "a round count" 100) (long "rounds" <> metavar "N" <> value 3 <> showDefault
                          <> help "sweeps to make, each in another order; rows give each setting's median")
  <*> switch (long "json" <> help "end with one line of JSON")
  <*> dashboardOption

-- Durations separated by commas, each as 'durationArg' reads it (at most 10 s: a flush timeout).
durationListArg :: ReadM [Double]
durationListArg = eitherReader $ \s ->
  let items = commaItems s
      one item = case parseDuration item of
        Right d | d <= 10 -> Right d
        Right _ -> Left ("a flush timeout is at most 10s, got " ++ show item)
        Left why -> Left why
  in if null items then Left "expected durations separated by commas, such as 500us,2ms,8ms" else mapM one items

parsortOptions :: Parser Parsort.Options
parsortOptions = Parsort.Options
  <$> option (positiveInt "a list length" 100000000) (long "n" <> metavar "N" <> value 100000 <> showDefault
                          <> help "numbers to sort")
  <*> option (countListArg "chunk sizes" 100000000) (long "chunks" <> metavar "LIST" <> value [10, 100, 1000, 10000]
                          <> showDefaultWith (const "10,100,1000,10000") <> help "static chunk sizes to sweep")
  <*> switch (long "json" <> help "end with one line of JSON")
  <*> plotOption "seconds per program, chunking on and off (bars)"
  <*> dashboardOption

mandelbrotOptions :: Parser Mandelbrot.Options
mandelbrotOptions = Mandelbrot.Options
  <$> option (positiveInt "a picture size" 20000) (long "size" <> metavar "N" <> value 300 <> showDefault
                          <> help "picture width and height in pixels")
  <*> option (positiveInt "an iteration cap" 1000000) (long "iterations" <> metavar "K" <> value 2000 <> showDefault
                          <> help "iterations per pixel at most")
  <*> option (countListArg "chunk sizes" 20000) (long "chunks" <> metavar "LIST" <> value [2, 5, 10, 25, 50]
                          <> showDefaultWith (const "2,5,10,25,50") <> help "static chunk sizes (rows per task) to sweep")
  <*> switch (long "json" <> help "end with one line of JSON")
  <*> plotOption "seconds per program, chunking on and off (bars)"
  <*> dashboardOption

countListArg :: String -> Int -> ReadM [Int]
countListArg what limit = eitherReader $ \s ->
  let items = commaItems s
      ok item = not (null item) && all isDigit item && length item < 10 && read item >= (1 :: Int)
                && read item <= limit
  in if not (null items) && all ok items then Right (map read items)
     else Left ("expected " ++ what ++ ": whole numbers from 1 to " ++ show limit
                ++ " separated by commas, got " ++ show s)

throughputOptions :: Parser Throughput.Options
throughputOptions = Throughput.Options
  <$> option (positiveInt "a task count" 1000000000) (long "tasks" <> metavar "N" <> value 20000000 <> showDefault
                          <> help "tasks with chunking on")
  <*> optional (option (positiveInt "a task count" 1000000000) (long "tasks-off" <> metavar "N"
                          <> help "tasks with chunking off (default: a tenth of --tasks)"))
  <*> optional (option (eitherReader parseTransportKind) (long "transport" <> metavar "tcp|unix|shm"
                          <> help "how the workers are linked (default: shm)"))
  <*> option loopListArg (long "master" <> metavar "LIST" <> value [EpollLoop]
                          <> showDefaultWith (const "epoll") <> help "master loops to run: threaded, epoll")
  <*> switch (long "json" <> help "end with one line of JSON")
  <*> dashboardOption

nurseryOptions :: Parser Nursery.Options
nurseryOptions = Nursery.Options
  <$> option sizeListArg (long "sizes" <> metavar "LIST" <> value ["1m", "4m", "16m", "64m"]
                          <> showDefaultWith (const "1m,4m,16m,64m")
                          <> help "nursery sizes, a number and k or m each")
  <*> option (positiveInt "a task count" 100000) (long "tasks" <> metavar "K" <> value 16 <> showDefault
                          <> help "number of tasks")
  <*> option (positiveInt "a key count" 100000000) (long "keys" <> metavar "N" <> value 200000 <> showDefault
                          <> help "keys inserted per task")
  <*> switch (long "json" <> help "end with one line of JSON")
  <*> dashboardOption

sizeListArg :: ReadM [String]
sizeListArg = eitherReader $ \s ->
  let items = commaItems s
      ok item = case span isDigit item of
        (ds@(_ : _), unit) -> unit `elem` ["k", "m", "K", "M"] && length ds < 6
        _ -> False
  in if not (null items) && all ok items then Right items
     else Left ("expected nursery sizes such as 1m,4m,16m (a number then k or m), got " ++ show s)

-- A whole number from 0 to the limit.
countArg :: String -> Int -> ReadM Int
countArg what limit = eitherReader $ \s ->
  if not (null s) && all isDigit s && length s < 10 && read s <= limit
    then Right (read s)
    else Left ("expected " ++ what ++ ": a whole number from 0 to " ++ show limit ++ ", got " ++ show s)

positiveInt :: String -> Int -> ReadM Int
positiveInt what limit = eitherReader $ \s ->
  if not (null s) && all isDigit s && length s < 10 && read s >= (1 :: Int) && read s <= limit
    then Right (read s)
    else Left ("expected " ++ what ++ ": a whole number from 1 to " ++ show limit ++ ", got " ++ show s)

fibArg :: ReadM Int
fibArg = eitherReader $ \s ->
  if not (null s) && all isDigit s && length s < 4 && read s <= (60 :: Int)
    then Right (read s)
    else Left ("expected a Fibonacci argument from 0 to 60, got " ++ show s)

coreListArg :: ReadM [Int]
coreListArg = eitherReader $ \s -> case parseCpuList s of
  Right cs | not (null cs), all (>= 1) cs, all (<= 4096) cs -> Right cs
  Right _ -> Left ("core counts must be from 1 to 4096, got " ++ show s)
  Left why -> Left ("expected core counts such as 1,2 or 1-4: " ++ why)

demoOptions :: Parser Demo.Options
demoOptions = Demo.Options
  <$> option fibArg (long "fib" <> metavar "N" <> value 37 <> showDefault
                     <> help "Fibonacci argument of each task")
  <*> option (positiveInt "a task count" 100000) (long "tasks" <> metavar "K" <> value 24 <> showDefault
                     <> help "number of tasks")
  <*> clusterFlags

secondsArg :: Double -> Double -> ReadM Double
secondsArg lo hi = eitherReader $ \s -> case reads s of
  [(x, "")] | x >= lo && x <= hi -> Right x
  _ -> Left ("expected seconds from " ++ show lo ++ " to " ++ show hi ++ ", got " ++ show s)

modelsOptions :: Parser Models.Options
modelsOptions = Models.Options
  <$> option fibArg (long "fib" <> metavar "N" <> value 40 <> showDefault
                     <> help "Fibonacci argument of each task")
  <*> option (positiveInt "a task count" 100000) (long "tasks" <> metavar "K" <> value 10 <> showDefault
                     <> help "number of tasks (the study used 10)")
  <*> optional (option coreListArg (long "cores" <> metavar "LIST"
                     <> help "core counts to run, e.g. 1,2 (default: 1 up to the physical cores)"))
  <*> switch (long "json" <> help "end with one line of JSON")
  <*> plotOption "speedup against cores, per model"
  <*> dashboardOption

workerOptions :: Parser WorkerOptions
workerOptions = mk
  <$> option (eitherReader parseMasterAddress) (long "connect" <> metavar "HOST:PORT"
                     <> help "the master's address, as it printed it (or unix:NAME, shm:NAME on its host)")
  <*> optional (option cpuArg (long "cpu" <> metavar "N" <> help "pin this worker to CPU N"))
  <*> optional (strOption (long "secret-file" <> metavar "FILE"
                     <> help "the shared secret (default: $HERD_SECRET, else ~/.herd/cookie)"))
  where
    mk address cpu secret = WorkerOptions address cpu False (maybe SecretAuto SecretFile secret) ""

cpuArg :: ReadM Int
cpuArg = eitherReader $ \s ->
  if not (null s) && all isDigit s && length s < 6 && read s < (4096 :: Int)
    then Right (read s)
    else Left ("expected a CPU number from 0 to 4095, got " ++ show s)
