-- | The cluster's recent log lines, kept for the dashboard: every line the
-- master logs ('Herd.Settings.configLog') also goes here, stamped with the
-- seconds since the cluster started. At most 'feedCapacity' lines are
-- kept, the oldest dropped first; keeping one costs a clock read and an
-- atomic update, which is nothing beside the write to the log itself.
module Herd.Master.Monitor.Feed
  ( Feed
  , newFeed
  , feedStarted
  , feedCapacity
  , teeLog
  , recentLines
  ) where

import Data.Foldable (toList)
import Data.IORef
import Data.Sequence (Seq, (|>))
import qualified Data.Sequence as Seq
import Herd.Sys.Clock (monotonicSeconds)

-- | The kept lines and the cluster's start time.
data Feed = Feed
  { feedStarted :: !Double  -- ^ when the cluster started (monotonic seconds)
  , feedLines   :: !(IORef (Seq (Double, String)))
  }

-- | Lines kept.
feedCapacity :: Int
feedCapacity = 200

-- | An empty feed; the cluster starts now.
newFeed :: IO Feed
newFeed = Feed <$> monotonicSeconds <*> newIORef Seq.empty

-- | A log function that keeps each line in the feed, then passes it on.
teeLog :: Feed -> (String -> IO ()) -> String -> IO ()
teeLog feed next line = do
  t <- monotonicSeconds
  atomicModifyIORef' (feedLines feed) $ \s ->
    let s' = s |> (t - feedStarted feed, line)
    in (if Seq.length s' > feedCapacity then Seq.drop 1 s' else s', ())
  next line

-- | The kept lines, oldest first.
recentLines :: Feed -> IO [(Double, String)]
recentLines feed = toList <$> readIORef (feedLines feed)
