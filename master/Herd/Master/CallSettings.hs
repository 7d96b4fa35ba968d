-- | Settings one call may choose for itself: a view of a cluster whose
-- calls use other straggler, batching and death settings than the
-- cluster's configuration, sharing its workers and everything else.
--
-- Promises: a view changes only the fields of 'CallSettings'; a value
-- out of range is refused when the view is made, with a 'ConfigError'
-- naming its configuration field, exactly as 'Herd.withCluster' would.
module Herd.Master.CallSettings
  ( CallSettings (..)
  , callSettings
  , withCallSettings
  ) where

import Control.Exception (throwIO)
import Herd.Core.Base (Batching)
import Herd.Master.Cluster (Cluster (..))
import Herd.Settings (Config (..))
import Herd.Settings.Validate (validateConfig)

-- | The settings a call reads when it starts.
data CallSettings = CallSettings
  { callStragglerCopies :: !Bool      -- ^ whether a slow batch may get a copy ('configStragglerCopies')
  , callBatching        :: !Batching  -- ^ how tasks are grouped into batches ('configBatching')
  , callMaxTaskDeaths   :: !Int       -- ^ deaths a task may cause before it fails ('configMaxTaskDeaths')
  , callMaxJobDeaths    :: !Int       -- ^ deaths a farm may cause before it stops ('configMaxJobDeaths')
  } deriving (Eq, Show)

-- | The settings the cluster's calls use now.
callSettings :: Cluster -> CallSettings
callSettings cluster = CallSettings
  { callStragglerCopies = configStragglerCopies cfg
  , callBatching = configBatching cfg
  , callMaxTaskDeaths = configMaxTaskDeaths cfg
  , callMaxJobDeaths = configMaxJobDeaths cfg
  }
  where cfg = clConfig cluster

-- | The same cluster, whose calls use the changed settings:
--
-- > quiet <- withCallSettings (\s -> s { callStragglerCopies = False }) cluster
-- > farm quiet bigTask inputs
--
-- Throws 'ConfigError' naming the field when a value is out of range.
withCallSettings :: (CallSettings -> CallSettings) -> Cluster -> IO Cluster
withCallSettings change cluster =
  either throwIO (\cfg -> pure cluster { clConfig = cfg }) (validateConfig changed)
  where
    s = change (callSettings cluster)
    changed = (clConfig cluster)
      { configStragglerCopies = callStragglerCopies s
      , configBatching = callBatching s
      , configMaxTaskDeaths = callMaxTaskDeaths s
      , configMaxJobDeaths = callMaxJobDeaths s
      }
