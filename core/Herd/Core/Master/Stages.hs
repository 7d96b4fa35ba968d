-- | The datasets' side of the master's core ("Herd.Core.Master"): their
-- narrow steps ("Herd.Core.Dataset.Stage") beside the other features,
-- each hearing its workers' words and every loss, and the dropping of
-- datasets' partitions on every worker. (A dataset's shuffle is a keyed
-- reduction of held partitions, "Herd.Core.Master.Exchanges".) Pure.
module Herd.Core.Master.Stages
  ( stageFeature
  , startStage
  , cancelStage
  , dropDatasets
  ) where

import Data.Maybe (isJust)
import qualified Data.Map.Strict as M
import Data.Word (Word64)
import Herd.Core.Dataset.Stage
import Herd.Core.Error (HerdError (..))
import Herd.Core.Master.Events
import Herd.Core.Master.Feature
import Herd.Core.Master.State
import Herd.Core.Wire (ToWorker (..), toWorkerUrgency)

-- | The running steps: each hears its workers' words and every loss.
stageFeature :: Feature
stageFeature = (quiet "dataset")
  { featureOwns = isJust . stageOf
  , featureReceived = \_ _ w msg core -> case stageOf msg of
      Just sid | Just st <- M.lookup sid (coreStages core) -> settle sid (stageMessage w msg st) core
      _ -> (core, [])
  , featureLost = \_ _ w loss core -> foldl (\(c, out) (sid, st) -> let (c', o) = settle sid (stageLost w (lossWhy loss) st) c in (c', out ++ o))
                                            (core, []) (M.toList (coreStages core))
  , featureStop = \_ core -> (core { coreStages = M.empty }, [ ExchangeEnded sid (Left ClusterClosed) | sid <- M.keys (coreStages core) ])
  , featureBusy = not . M.null . coreStages
  , featureCalls = \core -> [ let (name, left, ws) = stageView st in CallView "dataset" name left ws | st <- M.elems (coreStages core) ]
  }

-- | Start a step on the live workers; its answer comes as an
-- 'ExchangeEnded' under its number.
startStage :: Word64 -> StageJob -> Core -> (Core, [Command])
startStage sid job core
  | coreStopping core = (core, [ExchangeEnded sid (Left ClusterClosed)])
  | otherwise = settle sid (stageStart sid job (M.keys (coreLinks core))) core

-- | Its caller gave up: no answer is due (what the workers made stays
-- until its dataset is dropped).
cancelStage :: Word64 -> Core -> (Core, [Command])
cancelStage sid core = (core { coreStages = M.delete sid (coreStages core) }, [])

-- | Every live worker forgets these datasets' partitions.
dropDatasets :: [Word64] -> Core -> (Core, [Command])
dropDatasets dids core = (core, [ Send w (toWorkerUrgency m) m | w <- M.keys (coreLinks core), let m = PartsDrop dids ])

settle :: Word64 -> (Maybe Stage, [SOut]) -> Core -> (Core, [Command])
settle sid (mst, outs) core =
  ( core { coreStages = maybe (M.delete sid) (M.insert sid) mst (coreStages core) }
  , [ c | c <- map one outs, live c ] )
  where
    one (SSend w m) = Send w (toWorkerUrgency m) m
    one (SEnded r) = ExchangeEnded sid r
    live (Send w _ _) = M.member w (coreLinks core)
    live _ = True
