-- | Time for measurements: seconds on the monotonic clock, from an
-- arbitrary origin, so differences are immune to wall-clock changes.
module Herd.Clock
  ( monotonicSeconds
  ) where

import System.Clock (Clock (Monotonic), getTime, toNanoSecs)

-- | Seconds on the monotonic clock.
monotonicSeconds :: IO Double
monotonicSeconds = (\t -> fromIntegral (toNanoSecs t) / 1e9) <$> getTime Monotonic
