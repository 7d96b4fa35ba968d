-- | The @herd@ command line: demo, benchmarks, and joining a master by hand.
module Main (main) where

import Cli (run)
import Herd (serveIfWorker)

main :: IO ()
main = do
  -- A local worker re-runs this executable: serve before parsing anything.
  serveIfWorker
  run
