-- | The @herd@ command line: demo, benchmarks, and joining a master by hand.
module Main (main) where

import Herd.Log (logToStderr)
import Cli (run)
import Control.Exception (displayException, handle)
import Herd (HerdError, serveIfWorker)
import System.Exit (exitWith, ExitCode (..))

main :: IO ()
main = do
  -- A local worker re-runs this executable: serve before parsing anything.
  serveIfWorker
  -- herd's own errors are printed as their sentence, not as a record
  handle (\e -> logToStderr (displayException (e :: HerdError)) >> exitWith (ExitFailure 1)) run
