-- | The flags of the @herd bench@ sub-commands that measure herd's
-- cluster-scale APIs: evolve ("pfilter", "evolvecore", "skew"), shared
-- data and reductions ("kmeans", "wordcount") and tasks that spawn tasks
-- ("par"), each validated here ("CliArgs"). "CliBench" lists the
-- sub-commands.
module CliBenchCluster
  ( pfilterOptions
  , evolveCoreOptions
  , skewOptions
  , kmeansOptions
  , wordCountOptions
  , pageRankOptions
  , parOptions
  ) where

import qualified Bench.EvolveCore as EvolveCore
import qualified Bench.KMeans as KMeans
import qualified Bench.PageRank as PageRank
import qualified Bench.Par as Par
import qualified Bench.Pfilter as Pfilter
import qualified Bench.Skew as Skew
import qualified Bench.WordCount as WordCount
import Herd.Settings (MasterLoop (..), parseMasterLoop)
import Herd.Sys.HeapReserve (heapReserveMostMiB)
import Herd.Transport (parseTransportKind)
import Options.Applicative
import CliArgs

-- | The flags of @herd bench pfilter@.
pfilterOptions :: Parser Pfilter.Options
pfilterOptions = Pfilter.Options
  <$> option (countListArg "worker counts" 65536) (long "workers" <> metavar "LIST" <> value [32, 64, 128, 256, 512]
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
  <*> optional (flag' Pfilter.TwoLevel (long "two-level" <> help ("each host's agent schedules its workers, the master balances "
                                                                   ++ "the hosts (configHostScheduling; a cluster per worker count); "
                                                                   ++ "the default with simulated hosts"))
                <|> flag' Pfilter.OneLevel (long "one-level" <> help "the master schedules every worker itself; the default without simulated hosts"))
  <*> optional (strOption (long "answer-to" <> metavar "FILE" <> internal
                          <> help "measure only and write the rows here (used when the bench starts itself per loop)"))

-- | The flags of @herd bench evolvecore@.
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

-- | The flags of @herd bench skew@.
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

-- | The flags of @herd bench kmeans@.
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

-- | The flags of @herd bench wordcount@.
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
  <*> option (positiveInt "a round count" 100) (long "rounds" <> metavar "N" <> value 5 <> showDefault
                          <> help "rounds, each running every way once in turn; a row is its way's median")
  <*> switch (long "json" <> help "end with one line of JSON")

-- | The flags of @herd bench pagerank@.
pageRankOptions :: Parser PageRank.Options
pageRankOptions = PageRank.Options
  <$> option (positiveInt "a node count" 100000000) (long "nodes" <> metavar "N" <> value 2000000 <> showDefault
                          <> help "nodes of the generated graph")
  <*> option (positiveInt "an edge count" 1000) (long "edges" <> metavar "N" <> value 10 <> showDefault
                          <> help "out-edges per node")
  <*> option (positiveInt "an iteration count" 10000) (long "iterations" <> metavar "N" <> value 10 <> showDefault
                          <> help "PageRank iterations")
  <*> optional (option (positiveInt "a partition count" 4096) (long "partitions" <> metavar "N"
                          <> help "partitions of the graph (default: one per worker)"))
  <*> option (positiveInt "a worker count" 4096) (long "workers" <> metavar "N" <> value 2 <> showDefault
                          <> help "local workers")
  <*> option (positiveInt "a round count" 20) (long "rounds" <> metavar "N" <> value 2 <> showDefault
                          <> help "rounds of both, in turn; each row is its best round")
  <*> option (countArg "a heap reserve in MiB" heapReserveMostMiB) (long "worker-heap-reserve" <> metavar "MIB" <> value 256
                          <> showDefault <> help "heap each worker touches before it joins (configWorkerHeapReserve; 0: none)")
  <*> switch (long "json" <> help "end with one line of JSON")

-- | The flags of @herd bench par@.
parOptions :: Parser Par.Options
parOptions = Par.Options
  <$> option (positiveInt "a worker count" 64) (long "workers" <> metavar "N" <> value 2 <> showDefault
                          <> help "herd's workers, and the capabilities sparks and monad-par get")
  <*> option (positiveInt "an nfib argument" 50) (long "nfib" <> metavar "N" <> value 40 <> showDefault
                          <> help "nfib's argument (threshold 20)")
  <*> option (positiveInt "an upper bound" 1000000) (long "euler" <> metavar "N" <> value 10000 <> showDefault
                          <> help "sumEuler's upper bound")
  <*> option (positiveInt "a board size" 16) (long "queens" <> metavar "N" <> value 13 <> showDefault
                          <> help "n-queens' board size")
  <*> option (positiveInt "a picture size" 20000) (long "mandelbrot" <> metavar "N" <> value 1200 <> showDefault
                          <> help "mandelbrot's picture width and height in pixels")
  <*> option (countArg "a simulated worker count" 16384) (long "sim-workers" <> metavar "N" <> value 1024 <> showDefault
                          <> help "simulated workers for the herd-sim row (0: no such row)")
  <*> option (positiveInt "a simulated host count" 256) (long "sim-hosts" <> metavar "K" <> value 4 <> showDefault
                          <> help "simulated hosts that play them")
  <*> option (positiveInt "a leaf count" 10000000) (long "sim-leaves" <> metavar "N" <> value 100000 <> showDefault
                          <> help "leaves of the herd-sim row's divide-and-conquer tree")
  <*> option durationArg (long "sim-cost" <> metavar "TIME" <> value 0.01 <> showDefaultWith (const "10ms")
                          <> help "the work each leaf stands for (a sleep on the simulated worker)")
  <*> switch (long "json" <> help "end with one line of JSON")
