-- | Work stealing for "Herd.Par" as a feature of the master's core
-- ("Herd.Core.Master", "Herd.Core.Master.Feature"; the broker is
-- "Herd.Core.Steal"): the workers' offers of children and asks for work
-- go to the broker, and what it decides goes out as messages. A worker's
-- loss reaches the broker, so children its thieves ran go home and steals
-- asked of it go elsewhere.
--
-- Promise: the values a steal carries are copied out of the packet they
-- came in, so the core keeps no slice of a link's buffer. Pure.
module Herd.Core.Master.Steals
  ( stealFeature
  ) where

import qualified Data.ByteString as B
import Herd.Core.Master.Events
import Herd.Core.Master.Feature
import Herd.Core.Master.State
import Herd.Core.Packet.Policy (Urgency (..))
import Herd.Core.Steal
import Herd.Core.Base (WorkerId)
import Herd.Core.Wire (FromWorker (..), ToWorker)

-- | The broker of stolen children.
stealFeature :: Feature
stealFeature = (quiet "steal")
  { featureOwns = ownsSteal
  , featureReceived = \_ _ w msg core -> broker (received w msg) core
  , featureLost = \_ _ w _ core -> broker (stealLost w) core
  , featureBusy = \core -> stealsRunning (coreSteals core) > 0
  }

ownsSteal :: FromWorker -> Bool
ownsSteal msg = case msg of
  ChildCounts {} -> True
  _ -> stealReport msg

received :: WorkerId -> FromWorker -> Steals -> (Steals, [(WorkerId, ToWorker)])
received w msg = case msg of
  WantWork -> wantWork w
  ChildrenHeld k -> childrenHeld w k
  StealGiven n c left ref arg -> stealGiven w n c left ref (B.copy arg)
  StealNone n -> stealNone w n
  StolenDone n v -> stolenAnswered w n (Right (B.copy v))
  StolenThrew n why -> stolenAnswered w n (Left why)
  StolenDropped n -> stolenDropped w n
  ChildCounts a b c d e -> childCounts w (StealCounts (fromIntegral a) (fromIntegral b) (fromIntegral c) (fromIntegral d) (fromIntegral e))
  ChildrenAbandoned cs -> childrenAbandoned w cs
  _ -> \st -> (st, [])

broker :: (Steals -> (Steals, [(WorkerId, ToWorker)])) -> Core -> (Core, [Command])
broker f core = (core { coreSteals = st }, [ Send w Urgent m | (w, m) <- sends ])
  where (st, sends) = f (coreSteals core)
