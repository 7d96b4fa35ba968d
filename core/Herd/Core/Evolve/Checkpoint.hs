-- | Checkpoints of an evolve population: the master asks each state whose
-- lineage has grown past a bound for its bytes (the worker gives it back,
-- 'StateRelease'), hands it straight back to the same worker
-- ('StateAdd'), and keeps the bytes as the state's new origin. A later
-- recovery of that state then starts from those bytes instead of replaying
-- every step since it was uploaded. Pure: a session machine
-- ("Herd.Core.Session") and the registry's update.
--
-- Promises: each state asked for is either checkpointed (its origin is the
-- bytes its worker gave, and it lives where it lived) or left as it was (its
-- worker was lost, or it could not be given back); no state is lost by a
-- checkpoint that a lost worker would not have lost anyway.
module Herd.Core.Evolve.Checkpoint
  ( Checkpoint (..)
  , deepStates
  , checkpointStart
  , applyCheckpoint
  ) where

import qualified Data.ByteString as B
import qualified Data.Map.Strict as M
import Herd.Core.Base (WorkerId)
import Herd.Core.Evolve.Registry
import qualified Herd.Core.Evolve.StateMap as SM
import Herd.Core.Session (Machine (..), Out (..), answerState)
import Herd.Core.Wire (FromWorker (..), ToWorker (..))

-- | A checkpoint in progress.
data Checkpoint = Checkpoint
  { cpPending :: !(M.Map StateId WorkerId)     -- ^ asked for, not yet given
  , cpTaken   :: !(M.Map StateId B.ByteString) -- ^ given, and handed back
  } deriving (Eq, Show)

-- | The live states (with their workers) whose recovery would replay at
-- least this many steps.
deepStates :: Int -> Registry -> [(StateId, WorkerId)]
deepStates bound reg =
  [ (s, placedOn p) | (s, p) <- SM.toList (regStates reg), lineageDepth (regOrigin reg) s >= bound ]

-- | Ask for these states, on the workers of the session.
checkpointStart :: [WorkerId] -> [(StateId, WorkerId)] -> (Machine Checkpoint, Checkpoint, [Out])
checkpointStart live states =
  let here = [ (s, w) | (s, w) <- states, w `elem` live ]
  in ( machine, Checkpoint (M.fromList here) M.empty
     , [ SendTo w (StateRelease k) | (StateId k, w) <- here ] )
  where
    machine = Machine
      { machineMessage = \_ w msg cp -> case msg of
          StateReleased k bytes
            | M.lookup (StateId k) (cpPending cp) == Just w ->
                ( cp { cpPending = M.delete (StateId k) (cpPending cp)
                     , cpTaken = M.insert (StateId k) bytes (cpTaken cp) }
                , [SendTo w (StateAdd k bytes)] )
          StateKept k -> (forget (StateId k) cp, [])
          StateMissing k -> (forget (StateId k) cp, [])
          _ -> (cp, [])
        -- its states stay as they were: the next call recovers them
      , machineLost = \_ w _ cp -> (cp { cpPending = M.filter (/= w) (cpPending cp) }, [])
      , machineJoined = \_ _ cp -> (cp, [])
      , machineStarved = \cp -> (cp { cpPending = M.empty }, [])
      , machineDone = M.null . cpPending
      , machineView = const Nothing
      , machineClaims = \w msg cp -> maybe False (\k -> M.lookup (StateId k) (cpPending cp) == Just w) (answerState msg) }
    forget s cp = cp { cpPending = M.delete s (cpPending cp) }

-- | The registry after a checkpoint: the states given back start their
-- lineage at their bytes; origins no live state needs are dropped; the
-- depth is the longest lineage left.
applyCheckpoint :: Checkpoint -> Registry -> Registry
applyCheckpoint cp reg =
  let origins = M.foldrWithKey (\s bytes -> SM.insert s (Seen bytes)) (regOrigin reg) (cpTaken cp)
      pruned = pruneOrigins (SM.keys (regStates reg)) origins
  in reg { regOrigin = pruned, regPruned = SM.size pruned
         , regDepth = maximum (0 : map (lineageDepth pruned) (SM.keys (regStates reg))) }
