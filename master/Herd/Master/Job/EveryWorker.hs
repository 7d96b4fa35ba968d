-- | Run an action once on every worker (Dask's @client.run@): each
-- worker linked now runs it with the same argument, and the answers come
-- back, one per worker. It runs as a dataset step with no partitions to
-- read ("Herd.Core.Dataset.Stage"), so it takes its turn with them.
--
-- Promises: every worker linked when the call starts (or, if one is lost
-- meanwhile, when it starts again) runs the action once per try; a
-- throw fails the call with 'TaskFailed' naming the worker's place in the
-- list; with no worker linked and none coming it fails with 'NoWorkers'.
module Herd.Master.Job.EveryWorker
  ( runOnEveryWorker
  ) where

import Control.Exception (throwIO)
import Control.Monad (forM)
import qualified Data.Set as S
import GHC.StaticPtr (StaticPtr, deRefStaticPtr)
import Herd.Core.Base (TaskRef (..), WorkerId)
import Herd.Core.Dataset.Stage (StageJob (..), StageRun (..))
import Herd.Core.Error (HerdError (..))
import Herd.Master.Calls (runStage)
import Herd.Master.Cluster
import Herd.Task.Closure (Closure (..), closureRef)
import Herd.Task.Partition (EveryWorker, PartCodecs (..))

-- | The action run once on each worker with the argument: each worker
-- and its answer, in worker order.
runOnEveryWorker :: Cluster -> StaticPtr (EveryWorker c r) -> c -> IO [(WorkerId, r)]
runOnEveryWorker cluster act c = go (3 :: Int)
  where
    codecs = closureCodecs (deRefStaticPtr act)
    ref = closureRef act
    go tries = do
      workers <- S.toList <$> linkedWorkers cluster
      let arg = encodeArgument codecs c
      out <- runStage cluster (StageJob ref [ StageRun i w [] 0 arg | (i, w) <- zip [0 ..] workers ])
      case out of
        Right answers -> forM (zip [0 :: Int ..] (zip workers answers)) $ \(i, (w, b)) ->
          either (throwIO . ResultDecodeError i (refName ref)) (\r -> pure (w, r)) (decodeAnswer codecs b)
        Left (PartitionsLost {}) | tries > 1 -> go (tries - 1)
        Left err -> throwIO err
