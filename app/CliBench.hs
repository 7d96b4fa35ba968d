-- | The command line of @herd bench@: one sub-command per benchmark, each
-- with its flags validated here ("CliArgs"), parsed into the action that
-- runs it.
module CliBench
  ( benchCommands
  ) where

import Data.List (intercalate)
import qualified Bench.Models as Models
import qualified Bench.Nursery as Nursery
import qualified Bench.Throughput as Throughput
import qualified Bench.Packets as Packets
import qualified Bench.Echo as Echo
import qualified Bench.Parsort as Parsort
import qualified Bench.Mandelbrot as Mandelbrot
import qualified Bench.Par as Par
import qualified Bench.Pfilter as Pfilter
import qualified Bench.EvolveCore as EvolveCore
import qualified Bench.Skew as Skew
import qualified Bench.KMeans as KMeans
import qualified Bench.WordCount as WordCount
import qualified Bench.PageRank as PageRank
import qualified Bench.Bandwidth as Bandwidth
import qualified Bench.Latency as Latency
import qualified Bench.Fuzz as Fuzz
import qualified Bench.Chaos as Chaos
import qualified Bench.Report as Report
import Herd.Fuzz (FuzzTarget (..))
import Herd.Settings (MasterLoop (..))
import Herd.Transport (parseTransportKind)
import Options.Applicative
import CliArgs
import CliBenchCluster

-- | @herd bench NAME@: each benchmark's flags, parsed into the action
-- that runs it.
benchCommands :: Parser (IO ())
benchCommands = hsubparser
  ( command "models" (info (Models.run <$> modelsOptions)
      (progDesc "The HaLVM study's Table 1 and Figure 3: one Fibonacci farm under five parallel models"))
 <> command "nursery" (info (Nursery.run <$> nurseryOptions)
      (progDesc "Time an allocation-heavy farm under several worker nursery sizes (+RTS -A)"))
 <> command "throughput" (info (Throughput.run <$> throughputOptions)
      (progDesc "Tiny tasks per second through the farm, dynamic chunking on and off"))
 <> command "echo" (info (Echo.run <$> echoOptions)
      (progDesc "Eden's figure 5: a stream process id echoing items of several sizes, chunking on and off"))
 <> command "packets" (info (Packets.run <$> packetsOptions)
      (progDesc "Sweep the packet size and flush timeout: tiny farm tasks per second and stream echo times"))
 <> command "parsort" (info (Parsort.run <$> parsortOptions)
      (progDesc "Eden's parsort, parsortchunk and parsortchunk2, chunking on and off"))
 <> command "mandelbrot" (info (Mandelbrot.run <$> mandelbrotOptions)
      (progDesc "Eden's Mandelbrot picture, one row per task or static chunks of rows, chunking on and off"))
 <> command "pfilter" (info (Pfilter.run <$> pfilterOptions)
      (progDesc "FP Complete's particle filter on the evolve API: scaling over worker counts, both master loops"))
 <> command "evolvecore" (info (EvolveCore.run <$> evolveCoreOptions)
      (progDesc "The master's core alone on evolve calls with simulated workers: its CPU and bytes per state, per worker count"))
 <> command "skew" (info (Skew.run <$> skewOptions)
      (progDesc "FP Complete's skew case: nine 1 s states and one 10 s state on two workers, evolved repeatedly"))
 <> command "kmeans" (info (KMeans.run <$> kmeansOptions)
      (progDesc "k-means with its points shared once, held as slices on the workers, or resent every iteration"))
 <> command "wordcount" (info (WordCount.run <$> wordCountOptions)
      (progDesc "word counts summed on the workers against collecting every pair at the master"))
 <> command "pagerank" (info (PageRank.run <$> pageRankOptions)
      (progDesc "PageRank as datasets held on the workers, shuffled worker to worker, against one process"))
 <> command "fuzz" (info (Fuzz.run <$> fuzzOptions)
      (progDesc "Mutated frames of every message type at a master and at a worker, per transport: crashes, hangs, drops"))
 <> command "chaos" (info (Chaos.run <$> chaosOptions)
      (progDesc "Farm, stream and evolve jobs while workers are killed and stopped at random; every result checked"))
 <> command "latency" (info (Latency.runLatency <$> latencyOptions)
      (progDesc "Round trip of one small message, master to one worker, per transport, beside a C floor"))
 <> command "bandwidth" (info (Bandwidth.runBandwidth <$> bandwidthOptions)
      (progDesc "MiB per second of a stream of large messages, master to one worker, per transport, beside a C floor"))
 <> command "par" (info (Par.run <$> parOptions)
      (progDesc "nfib, sumEuler, n-queens and mandelbrot: sequential, sparks, monad-par and herd (Herd.Par pieces of a division), and one spawn and get"))
 <> command "report" (info (Report.run <$> reportOptions)
      (progDesc "Run the benchmarks and write the benchmark page (docs/benchmarks.md) and its figures")) )

reportOptions :: Parser Report.Options
reportOptions = Report.Options
  <$> strOption (long "out" <> metavar "FILE" <> value "docs/benchmarks.md" <> showDefault
                 <> help "the page to write; its figures go beside it")
  <*> switch (long "quick" <> help "small sizes: a check that the report runs, not figures to keep")
  <*> many (strOption (long "only" <> metavar "TITLE"
                       <> help "run only the benchmark of this section title (repeatable) and replace its section in the existing page"))

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
  <*> option (eitherReader apiList) (long "apis" <> metavar "LIST" <> value Chaos.allApis
                          <> help ("the APIs whose jobs run, comma-separated (default: all of " ++ intercalate "," Chaos.allApis ++ ")"))
  <*> switch (long "calm" <> help "run the same jobs without killing or stopping any worker (a control)")
  <*> switch (long "json" <> help "end with one line of JSON")
  where
    apiList s = case [ a | a <- splitComma s, a `notElem` Chaos.allApis ] of
      [] | not (null (splitComma s)) -> Right (splitComma s)
      [] -> Left "expected one or more APIs"
      bad : _ -> Left ("no such API " ++ show bad ++ "; expected some of " ++ intercalate "," Chaos.allApis)
    splitComma s = case break (== ',') s of
      (a, []) -> [ a | not (null a) ]
      (a, _ : rest) -> a : splitComma rest

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
