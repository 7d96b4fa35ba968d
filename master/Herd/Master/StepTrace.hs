-- | The eventlog's view of the master's slow steps: a step of the core
-- that took a millisecond or more, deciding and carrying out its
-- commands, becomes an event with its time and allocation (an evolve
-- call's start at thousands of workers is one). Only when tracing is on
-- ("Herd.Sys.Trace"); the shell calls it, nothing else does.
module Herd.Master.StepTrace
  ( traceSlowStep
  ) where

import Control.Monad (when)
import GHC.Conc (getAllocationCounter)
import GHC.Stats (getRTSStats, getRTSStatsEnabled, gc_cpu_ns)
import Herd.Sys.Clock (monotonicSeconds)
import Herd.Core.Master.Events (Event, eventKind)
import Herd.Sys.Trace (traceHerd)

-- | Run a step (deciding: the core's step and its commands forced; then
-- carrying the commands out) and trace it if it was slow, split into
-- those two and the collector's share of the whole.
traceSlowStep :: Event -> IO () -> IO a -> IO a
traceSlowStep e decide run = do
  g0 <- gcNanos
  t0 <- monotonicSeconds
  a0 <- getAllocationCounter
  decide
  t1 <- monotonicSeconds
  r <- run
  a1 <- getAllocationCounter
  t2 <- monotonicSeconds
  g1 <- gcNanos
  when (t2 - t0 >= 0.001) $
    traceHerd ("herd master step (" ++ eventKind e ++ "): " ++ show (micros (t2 - t0))
               ++ " us (deciding " ++ show (micros (t1 - t0)) ++ ", carrying out " ++ show (micros (t2 - t1))
               ++ "; the collector " ++ show ((g1 - g0) `div` 1000) ++ " of it), "
               ++ show ((a0 - a1) `div` 1024) ++ " KiB allocated")
  pure r
  where
    micros x = round (x * 1e6) :: Int
    -- 0 when the runtime keeps no statistics (herd's binary runs with -T)
    gcNanos = do
      on <- getRTSStatsEnabled
      if on then gc_cpu_ns <$> getRTSStats else pure 0
