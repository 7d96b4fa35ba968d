-- | Command-line parsing for @herd@: the demo, the worker and the agent
-- here, the benchmarks in "CliBench", the flag values' readers in
-- "CliArgs". Every flag is validated, and a bad one is reported with its
-- name and the values it accepts.
module Cli
  ( run
  ) where

import qualified Demo
import Herd.Settings (SecretSource (..))
import Herd.Node (MasterAddress, WorkerOptions (..), parseMasterAddress, runWorker, showMasterAddress)
import Herd.Transport.Auth (loadSecret)
import Herd.Node.Agent (runAgentByHand)
import Herd.Sys.Log (logToStderr)
import System.Exit (ExitCode (..), exitWith)
import System.Posix.Unistd (getSystemID, nodeName)
import Herd.Options (clusterFlags)
import Options.Applicative
import CliArgs (cpuArg, fibArg, positiveInt, secondsArg, countArg)
import CliBench (benchCommands)

data Command
  = DemoCmd Demo.Options
  | BenchCmd (IO ())
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
    BenchCmd act -> act
    WorkerCmd o -> runWorker o
    AgentCmd o -> runAgentCommand o

commands :: Parser Command
commands = hsubparser
  ( command "demo" (info (DemoCmd <$> demoOptions)
      (progDesc "Run the HaLVM study's Fibonacci farm on one worker, then on every core"))
 <> command "bench" (info (BenchCmd <$> benchCommands) (progDesc "Run a benchmark (see: herd bench --help)"))
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

demoOptions :: Parser Demo.Options
demoOptions = Demo.Options
  <$> option fibArg (long "fib" <> metavar "N" <> value 37 <> showDefault
                     <> help "Fibonacci argument of each task")
  <*> option (positiveInt "a task count" 100000) (long "tasks" <> metavar "K" <> value 24 <> showDefault
                     <> help "number of tasks")
  <*> option (secondsArg 0 3600) (long "serial" <> metavar "SECONDS" <> value 0 <> showDefault
                     <> help "on a cluster: a serial phase this long before and after the farm, the workers idle")
  <*> option (countArg "a relay length" 1000) (long "relay" <> metavar "N" <> value 0 <> showDefault
                     <> help "instead of the farm: one task whose N children the workers steal from each other in turn (Herd.Par's spawnTask), each working 0.2 s")
  <*> clusterFlags

workerOptions :: Parser WorkerOptions
workerOptions = mk
  <$> option (eitherReader parseMasterAddress) (long "connect" <> metavar "HOST:PORT"
                     <> help "the master's address, as it printed it (or unix:NAME, shm:NAME on its host)")
  <*> optional (option cpuArg (long "cpu" <> metavar "N" <> help "pin this worker to CPU N"))
  <*> optional (strOption (long "secret-file" <> metavar "FILE"
                     <> help "the shared secret (default: $HERD_SECRET, else ~/.herd/cookie)"))
  where
    mk address cpu secret = WorkerOptions address cpu False (maybe SecretAuto SecretFile secret) ""
