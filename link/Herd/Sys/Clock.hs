-- | Time for measurements: seconds on the monotonic clock, from an
-- arbitrary origin, so differences are immune to wall-clock changes.
module Herd.Sys.Clock
  ( monotonicSeconds
  ) where

import GHC.Clock (getMonotonicTime)

-- | Seconds on the monotonic clock. Cheap (one vDSO call), so the packet
-- layer may read it once per message it adds.
monotonicSeconds :: IO Double
monotonicSeconds = getMonotonicTime
