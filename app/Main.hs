-- | The @herd@ command line: demo, benchmarks, and joining a master by hand.
module Main (main) where

import Herd.Sys.Log (logToStderr)
import Cli (run)
import Control.Exception (displayException, handle)
import Herd (HerdError)
import Herd.Simulate.Host (runSimulatedHost)
import Herd.Node (serveIfWorkerWith)
import System.Exit (exitWith, ExitCode (..))

main :: IO ()
main = do
  -- A local worker re-runs this executable: serve before parsing anything.
  -- It may be asked to play simulated hosts (bench pfilter --simulate).
  serveIfWorkerWith (Just runSimulatedHost)
  -- herd's own errors are printed as their sentence, not as a record
  handle (\e -> logToStderr (displayException (e :: HerdError)) >> exitWith (ExitFailure 1)) run
