-- | When to restart a worker process that died: at once the first time,
-- then after pauses that double, and not at all once it has died too
-- often within a window (a worker that cannot stay up is left down rather
-- than restarted forever). Pure.
module Herd.Core.Launch.Backoff
  ( Backoff (..)
  , defaultBackoff
  , Restart (..)
  , afterDeath
  ) where

-- | A restart policy.
data Backoff = Backoff
  { backoffFirst  :: !Double  -- ^ the pause before the second restart in a window, seconds
  , backoffMax    :: !Double  -- ^ the longest pause, seconds
  , backoffWindow :: !Double  -- ^ deaths older than this many seconds are forgotten
  , backoffLimit  :: !Int     -- ^ more deaths than this within the window: left down
  } deriving (Eq, Show)

-- | Pauses of 0, 0.1, 0.2, 0.4 ... up to 5 s; left down after more than
-- 20 deaths in a minute (a worker that dies as it starts is tried for
-- about a minute).
defaultBackoff :: Backoff
defaultBackoff = Backoff 0.1 5 60 20

-- | What to do about a death.
data Restart
  = RestartAfter !Double  -- ^ restart after this many seconds
  | LeaveDown             -- ^ it died too often: do not restart it
  deriving (Eq, Show)

-- | A worker died now, having died at these earlier times: the times to
-- remember (the recent ones, newest first) and what to do.
afterDeath :: Backoff -> Double -> [Double] -> ([Double], Restart)
afterDeath b now earlier =
  let recent = now : filter (> now - backoffWindow b) earlier
      k = length recent
      pause = if k <= 1 then 0 else min (backoffMax b) (backoffFirst b * 2 ^^ (k - 2))
  in (recent, if k > backoffLimit b then LeaveDown else RestartAfter pause)
