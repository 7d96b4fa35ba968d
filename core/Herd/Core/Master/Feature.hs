-- | The one shape in which a kind of work lives in the master's core
-- ("Herd.Core.Master"): farm jobs, streams, shared values, keyed
-- reductions and evolve sessions are each a 'Feature', and the core
-- hands every one of them the cluster's events in the same way (a link
-- came up or went down, restarts awaited, a worker held, time passed, the
-- cluster stops) and each worker's message to the feature that owns it.
-- A feature's own requests (a farm submitted, a stream opened, a session
-- started) come to it under the ids its callers gave them; what it
-- decides goes out as the core's commands.
--
-- Promises: the core calls every feature, in the order of its list, for
-- each cluster event; a worker's message goes to the first feature that
-- owns it and to no other; a feature that finds a peer breaking its
-- protocol drops it through 'Hooks', so the loss reaches every feature.
module Herd.Core.Master.Feature
  ( Feature (..)
  , Hooks (..)
  , Loss (..)
  , lossWhy
  , quiet
  , ignoreJoin
  , ignoreLoss
  , ignoreHeld
  , ignoreCount
  , ignoreReceived
  ) where

import Herd.Core.Base (WorkerId)
import Herd.Core.Fault (LinkFault, Violation, renderFault)
import Herd.Core.Master.Events (Command)
import Herd.Core.Master.Expect (Expected)
import Herd.Core.Master.State (CallView, Core)
import Herd.Core.Wire (FromWorker)

-- | What the core gives a feature to act on the whole cluster with.
newtype Hooks = Hooks
  { hookDropPeer :: WorkerId -> Violation -> Core -> (Core, [Command])
    -- ^ the worker broke the protocol: drop its link (every feature hears
    -- of the loss; what ran there is not charged)
  }

-- | A lost link, as each feature is told of it.
data Loss = Loss
  { lossDied :: !Bool      -- ^ it died (not dropped by the core): what it ran may be charged
  , lossFault :: !LinkFault -- ^ why
  , lossDue  :: !Expected  -- ^ the farm batches that were due on it
  }

-- | Why the link was lost, for the log and the callers.
lossWhy :: Loss -> String
lossWhy = renderFault . lossFault

-- | A kind of work the core hosts: its answers to the cluster's events,
-- each a transition of the whole core (a feature's state is its part of
-- "Herd.Core.Master.State"), at the given time.
data Feature = Feature
  { featureName    :: !String
  , featureOwns    :: FromWorker -> Bool
    -- ^ the workers' messages that are this feature's
  , featureReceived :: Hooks -> Double -> WorkerId -> FromWorker -> Core -> (Core, [Command])
  , featureJoined  :: Hooks -> Double -> WorkerId -> Core -> (Core, [Command])
    -- ^ a worker's link is up
  , featureLost    :: Hooks -> Double -> WorkerId -> Loss -> Core -> (Core, [Command])
    -- ^ a worker's link is gone (the core has forgotten it already)
  , featureAwaited :: Double -> Int -> Core -> (Core, [Command])
    -- ^ this many lost workers are being restarted now
  , featureStarved :: Hooks -> Double -> Core -> (Core, [Command])
    -- ^ after a loss or a change in the restarts awaited: work whose
    -- workers are all gone may have none coming
  , featureHeld    :: Double -> WorkerId -> Bool -> Core -> (Core, [Command])
    -- ^ a worker is near its memory limit, or fell back
  , featureTick    :: Double -> Core -> (Core, [Command])
    -- ^ time passed (a few times a second)
  , featureStop    :: Double -> Core -> (Core, [Command])
    -- ^ the cluster stops: answer every caller
  , featureBusy    :: Core -> Bool
    -- ^ whether it has work running (for the cluster's working time)
  , featureCalls   :: Core -> [CallView]
    -- ^ its running calls, as a watcher is shown them
  }

-- | A feature that does nothing for any event: each feature names only
-- the events it answers.
quiet :: String -> Feature
quiet name = Feature
  { featureName = name
  , featureOwns = const False
  , featureReceived = ignoreReceived
  , featureJoined = ignoreJoin
  , featureLost = ignoreLoss
  , featureAwaited = ignoreCount
  , featureStarved = \_ _ core -> (core, [])
  , featureHeld = ignoreHeld
  , featureTick = \_ core -> (core, [])
  , featureStop = \_ core -> (core, [])
  , featureBusy = const False
  , featureCalls = const []
  }

-- | No answer to a join.
ignoreJoin :: Hooks -> Double -> WorkerId -> Core -> (Core, [Command])
ignoreJoin _ _ _ core = (core, [])

-- | No answer to a loss.
ignoreLoss :: Hooks -> Double -> WorkerId -> Loss -> Core -> (Core, [Command])
ignoreLoss _ _ _ _ core = (core, [])

-- | No answer to a worker held or let go.
ignoreHeld :: Double -> WorkerId -> Bool -> Core -> (Core, [Command])
ignoreHeld _ _ _ core = (core, [])

-- | No answer to a count of restarts awaited.
ignoreCount :: Double -> Int -> Core -> (Core, [Command])
ignoreCount _ _ core = (core, [])

-- | No answer to a message.
ignoreReceived :: Hooks -> Double -> WorkerId -> FromWorker -> Core -> (Core, [Command])
ignoreReceived _ _ _ _ core = (core, [])
