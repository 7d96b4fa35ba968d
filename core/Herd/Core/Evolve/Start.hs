-- | The two ends of one evolve call, pure: the call's first state and
-- messages, made from the registry and the workers the master gives it,
-- and the registry the finished call leaves behind. "Herd.Master.Job.Evolve" runs
-- them around a session of the master's core; the core's cost benchmark
-- (@herd bench evolvecore@) runs the same functions without a socket, so
-- what it measures is what a real call does.
--
-- Promises: 'startCall' fails only with 'NoWorkers'; every state of
-- 'startStates' held by a given worker is in the plan, and states whose
-- worker is not given are recomputed first; 'registryAfter' records where
-- every live state of the call now is and what its step cost.
module Herd.Core.Evolve.Start
  ( CallStart (..)
  , startCall
  , estimateFrom
  , registryAfter
  ) where

import qualified Data.ByteString as B
import qualified Data.Map.Strict as M
import Herd.Core.Base (TaskRef)
import Herd.Core.Error (HerdError (..))
import Herd.Core.Evolve.Call
import Herd.Core.Evolve.Registry (Placed (..), costOr, keepOrigins, needsTelling, toldAfter)
import Herd.Core.Evolve.Schedule
import Herd.Core.Evolve.StateMap (StateMap)
import qualified Herd.Core.Evolve.StateMap as SM
import Herd.Core.Session (Out (..))
import Herd.Core.Wire (ToWorker (..))

-- | What a call starts from, besides the workers it is given.
data CallStart = CallStart
  { startRef       :: !TaskRef
  , startRegistry  :: !Registry
  , startStates    :: ![StateId]     -- ^ the states to evolve, in the caller's order
  , startInputs    :: !(StateMap B.ByteString)  -- ^ each one's encoded input
  , startEstimate  :: StateId -> Double
    -- ^ the expected cost of a state's step (seconds; 0 or less: unknown;
    -- 'estimateFrom' gives the registry's)
  , startLead      :: !Double        -- ^ 'settingsLead'
  , startMaxDeaths :: !Int           -- ^ 'callMaxDeaths'
  , startTime      :: !Double        -- ^ the master's clock at the start (seconds)
  }

-- | The call's first state and the messages that open it, on these
-- workers.
startCall :: CallStart -> [WorkerId] -> Either HerdError (Call, [Out])
startCall _ [] = Left NoWorkers
startCall st workers = Right (call2, opening ++ outs ++ recover)
  where
    reg = startRegistry st
    ref = startRef st
    mean = regMeanCost reg
    present = M.fromList [ (w, ()) | w <- workers ]
    -- states whose worker went away since the last call are recomputed first
    stranded = [ sid | (sid, p) <- SM.toList (regStates reg), not (M.member (placedOn p) present) ]
    holdings = holdingsOf workers (fmap placedOn . (`SM.lookup` regStates reg)) (startStates st) (startEstimate st)
    settings = defaultPlanSettings { settingsLead = startLead st, settingsMeanCost = mean
                                   , settingsRoundTrip = regRoundTrip reg }
    (plan, cmds) = startPlan (startTime st) settings holdings
    call0 = Call plan ref (startInputs st) SM.empty (regStates reg) (regOrigin reg) SM.empty
                 0 0 0 (maybe 0 id mean) [] "" SM.empty (startMaxDeaths st) (regAbandoned reg)
    opening = [ SendTo w (EvolveWith ref) | w <- workers, needsTelling ref reg w ]
    (call1, outs) = commandsToOuts call0 cmds
    (call2, recover) = recoverStates "their worker is no longer connected" stranded call1

-- | A state's expected step time by the registry: the measured time of
-- the step that made it, else the mean of the last call, else 0 (unknown).
estimateFrom :: Registry -> StateId -> Double
estimateFrom reg s = costOr (maybe 0 id (regMeanCost reg)) (SM.lookup s (regStates reg))

-- | The registry a finished call leaves: where each state lives now, the
-- cost of the step that made it, the mean step time, the move round trip,
-- the lineages (pruned when due, 'keepOrigins'), and who knows the function.
registryAfter :: TaskRef -> Call -> Registry -> Registry
registryAfter ref call reg =
  keepOrigins (callStates call) (callOrigin call)
    reg { regStates = callStates call
        , regMeanCost = if evolvedN > 0 then Just (busyTotal / fromIntegral evolvedN) else regMeanCost reg
        , regRoundTrip = moveRoundTrip (callPlan call)
        , regDepth = regDepth reg + (if evolvedN > 0 then 1 else 0)
        , regTold = toldAfter ref (planWorkers (callPlan call)) reg }
  where
    evolvedN = SM.size (callOutputs call)
    busyTotal = sum (M.elems (callBusy call))
