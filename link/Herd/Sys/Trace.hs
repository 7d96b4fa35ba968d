-- | herd's eventlog events, for ThreadScope or ghc-events: packets sent
-- and received, batches sent, run and answered, evolve calls and steps,
-- on the master and on every worker.
--
-- Promises: when the program was not started with user events on
-- (@+RTS -l@), an event costs one test of a constant and builds no string,
-- so the hot path pays nothing. When the master traces, the local workers
-- it starts trace too, each to its own file in the working directory
-- (@PROG-worker-PORT-K.eventlog@: the master's port, then the worker's
-- start in microseconds of the monotonic clock), so one run leaves one
-- eventlog per process.
--
-- 'tracing' is a constant read once from the runtime's flags: not state.
module Herd.Sys.Trace
  ( tracing
  , traceHerd
  , markHerd
  , workerEventlogOptions
  ) where

import Control.Monad (when)
import GHC.Clock (getMonotonicTimeNSec)
import Debug.Trace (traceEventIO, traceMarkerIO)
import GHC.RTS.Flags (DoTrace (..), getTraceFlags, user)
import qualified GHC.RTS.Flags as F
import System.Environment (getProgName)
import System.IO.Unsafe (unsafePerformIO)

-- | Whether this process writes user events to an eventlog.
tracingOn :: Bool
tracingOn = unsafePerformIO $ do
  flags <- getTraceFlags
  pure (case F.tracing flags of { TraceEventLog -> user flags; _ -> False })
{-# NOINLINE tracingOn #-}

-- | Whether events are written (for callers that would build an
-- expensive description).
tracing :: Bool
tracing = tracingOn

-- | An event (ThreadScope's event list); the text is built only when
-- events are written.
traceHerd :: String -> IO ()
traceHerd text = when tracingOn (traceEventIO text)

-- | A marker (ThreadScope draws a line across the timeline).
markHerd :: String -> IO ()
markHerd text = when tracingOn (traceMarkerIO text)

-- | The RTS options that make a local worker of the master at this port
-- write its own eventlog, when this process writes one; none otherwise.
-- The file is named by the port and the moment of the call, so no two
-- workers of the process (of any of its clusters) write one file.
workerEventlogOptions :: Int -> IO [String]
workerEventlogOptions port
  | not tracingOn = pure []
  | otherwise = do
      k <- (`div` 1000) <$> getMonotonicTimeNSec
      prog <- getProgName
      pure ["-l", "-ol" ++ filter (/= ' ') prog ++ "-worker-" ++ show port ++ "-" ++ show k ++ ".eventlog"]
