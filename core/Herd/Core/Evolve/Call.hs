{-# LANGUAGE BangPatterns #-}
-- | One evolve call as a pure session ("Herd.Core.Session"): the plan
-- ("Herd.Core.Evolve.Schedule") fed by the workers' answers, with the outputs,
-- where each state now lives, and the recomputation of states lost with
-- their worker. The master's core hosts it; nothing here does IO.
--
-- Promises: every state given an input is evolved once in the call, or the
-- call fails naming it ('StatesLost', 'EvolveFailed'); a child is accepted
-- only under an id of the worker that made it and never seen before; a
-- worker that answers for a state it was not given is dropped.
module Herd.Core.Evolve.Call
  ( Call (..)
  , callMachine
  , recoverStates
  , commandsToOuts
  , callBusy
  ) where

import qualified Data.ByteString as B
import Data.Bits (shiftR)
import Data.List (foldl')
import qualified Data.Map.Strict as M
import Data.Word (Word64)
import Herd.Core.Evolve.StateMap (StateMap)
import qualified Herd.Core.Evolve.StateMap as SM
import qualified Data.Set as S
import qualified Data.Text as T
import Herd.Core.Base (TaskRef)
import Herd.Core.Error (HerdError (..))
import Herd.Core.Evolve.Registry (Placed (..), costOr, stateIdBits)
import Herd.Core.Evolve.Schedule
import Herd.Core.Evolve.Plan (planRunning)
import Herd.Core.Session (Machine (..), Out (..), SessionView (..), answerState)
import Herd.Core.Wire (FromWorker (..), ToWorker (..))

-- | The state of one call's session.
data Call = Call
  { callPlan      :: !Plan
  , callRef       :: !TaskRef
  , callInputs    :: !(StateMap B.ByteString)
  , callOutputs   :: !(StateMap [(StateId, B.ByteString)])
  , callStates    :: !(StateMap Placed)
    -- ^ where each live state is and what its making cost ('regStates')
  , callOrigin    :: StateMap Origin
    -- ^ lazy: at a call's start it may still be the registry's pruning of
    -- the last call's lineages ('Herd.Core.Evolve.Registry.keepOrigins'), which
    -- the first answer then runs, while the workers compute, instead of
    -- the caller between two calls; every update forces it
  , callReplaying :: !(StateMap (WorkerId, Bool, Double))
    -- ^ states being recomputed: where, whether to evolve them in this
    -- call once there, and their estimated cost
  , callMoved     :: !Int
  , callChildren  :: !Int
  , callRecovered :: !Int
  , callMean      :: !Double
  , callOrphans   :: ![StateId]
    -- ^ states lost when no worker of the call was left: recomputed on the
    -- next worker that joins, or named in 'StatesLost' if none comes
  , callOrphanWhy :: !String  -- ^ how they were lost
  , callDeaths    :: !(StateMap Int)
    -- ^ states that were being evolved on workers that were lost, and how many
  , callMaxDeaths :: !Int
    -- ^ a state whose step was running on this many lost workers fails the call
  , callAbandoned :: !(S.Set StateId)
    -- ^ states of failed calls ('regAbandoned'): a worker may still report
    -- on them, which is not this call's business
  } deriving (Eq, Show)

-- | Seconds of steps each worker answered in this call ('planBusy').
callBusy :: Call -> M.Map WorkerId Double
callBusy = planBusy . callPlan

-- | The session of one call: the plan, fed by the workers' answers.
callMachine :: String -> Machine Call
callMachine name = dropOnFail (callMachineOf name)

-- A call that fails leaves nothing of its own on the workers: the states
-- it was given and the children it made are forgotten by the caller's
-- registry ('regAbandoned'), so each worker holding some is told to drop
-- them. (A step still running reports later; its children are dropped
-- then, "Herd.Core.Master".)
dropOnFail :: Machine Call -> Machine Call
dropOnFail m = m
  { machineMessage = \now wid msg call -> drops (machineMessage m now wid msg call)
  , machineLost = \now wid why call -> drops (machineLost m now wid why call)
  , machineStarved = drops . machineStarved m }
  where
    drops (call, outs)
      | null [ () | Fail _ <- outs ] = (call, outs)
      | otherwise =
          let own = S.fromList (SM.keys (callInputs call) ++ [ k | kids <- SM.elems (callOutputs call), (k, _) <- kids ])
              held = M.fromListWith (++) [ (placedOn p, [sid]) | (sid, p) <- SM.toList (callStates call), S.member sid own ]
          in (call, [ SendTo w (StatesDrop [ s | StateId s <- sids ]) | (w, sids) <- M.toList held ] ++ outs)

callMachineOf :: String -> Machine Call
callMachineOf name = Machine
  { machineClaims = \_ msg call -> case answerState msg of
      -- every state of its population is the call's: it may move or recover any
      -- (and a state it asked back: the answer may come after the state
      -- was evolved and left its population, replaced by its children)
      Just s -> SM.member (StateId s) (callStates call) || S.member (StateId s) (callAbandoned call)
                || SM.member (StateId s) (callReplaying call) || planIsMoving (StateId s) (callPlan call)
      Nothing -> False
  , machineMessage = callMessage name
  , machineLost = callLost name
  , machineJoined = callJoined
  , machineStarved = \call ->
      if planDone (callPlan call) && SM.null (callReplaying call) && null (callOrphans call) then (call, [])
      else (call, [Fail (StatesLost (map show (S.toList (S.fromList (callOrphans call ++ SM.keys (callReplaying call)))))
                                    (callOrphanWhy call ++ "; no worker is left to recompute them"))])
  , machineDone = \call -> planDone (callPlan call) && SM.null (callReplaying call) && null (callOrphans call)
  , machineView = \call -> Just SessionView
      { viewFunction = name
      , viewStates = M.toList (M.fromListWith (+) [ (placedOn p, 1) | p <- SM.elems (callStates call) ])
      , viewLeft = planLeft (callPlan call)
      , viewMoved = callMoved call
      , viewRecovered = callRecovered call }
  }

-- A worker's evolve message to the call.
callMessage :: String -> Double -> WorkerId -> FromWorker -> Call -> (Call, [Out])
callMessage name now wid msg call = case msg of
  -- a failed call's state its worker went on with: its children go
  StateEvolved parent _ children | S.member (StateId parent) (callAbandoned call) ->
    (call, [ SendTo wid (StatesDrop (map fst children)) | not (null children) ])
  EvolveThrew sid _ | S.member (StateId sid) (callAbandoned call) -> (call, [])
  StateEvolved parent busyNs children -> evolved now wid (StateId parent) (fromIntegral busyNs / 1e9) children call
  StateReleased sid bytes ->
    -- the master has seen its bytes: a lineage can start here now
    let !origins = SM.insert (StateId sid) (Seen bytes) (callOrigin call)
    in planStep now wid (Released wid (StateId sid) bytes) call { callOrigin = origins }
  StateKept sid -> planStep now wid (Kept wid (StateId sid)) call
  StateMissing sid
    -- asked back after it had been evolved: it simply stays
    | planIsMoving (StateId sid) (callPlan call) -> planStep now wid (Kept wid (StateId sid)) call
    | otherwise -> (call, [DropPeer wid ("it does not hold " ++ show (StateId sid) ++ ", which it was given")])
  StateReplayed sid -> case SM.lookup (StateId sid) (callReplaying call) of
    Just (w, toEvolve, cost) | w == wid ->
      let call' = call { callReplaying = SM.delete (StateId sid) (callReplaying call)
                       , callStates = SM.insert (StateId sid) (Placed wid cost) (callStates call)
                       , callRecovered = callRecovered call + 1 }
      in if toEvolve then planStep now wid (Adopted wid [(StateId sid, cost)]) call' else (call', [])
    _ -> (call, [DropPeer wid ("it recomputed " ++ show (StateId sid) ++ ", which it was not asked to")])
  EvolveThrew sid why -> (call, [Fail (EvolveFailed name (show (StateId sid)) (T.unpack why))])
  EvolveRejected why -> (call, [Fail (RemoteFunctionError name (T.unpack why))])
  _ -> (call, [])

-- A worker of the call was lost: the first state asked of it is the one
-- it was evolving, so a step that kills its worker is named after the
-- limit of deaths, like a step that throws.
callLost :: String -> Double -> WorkerId -> String -> Call -> (Call, [Out])
callLost name now wid why call0 =
  let running = planRunning wid (callPlan call0)
      deaths s = SM.findWithDefault 0 s (callDeaths call0) + 1
      call = maybe call0 (\s -> call0 { callDeaths = SM.insert s (deaths s) (callDeaths call0) }) running
  in case running of
    Just s | deaths s >= callMaxDeaths call0 ->
      (call, [Fail (EvolveFailed name (show s) ("it was being evolved on " ++ show (deaths s)
                                                 ++ " workers that were lost (the last: worker " ++ show wid
                                                 ++ ", " ++ why ++ "); it is not tried again"))])
    _ -> lostWorker now wid why call

-- A worker joined the call: the plan takes it up, and states orphaned
-- before it came are recomputed there.
callJoined :: Double -> WorkerId -> Call -> (Call, [Out])
callJoined now wid call = case stepPlan now (WorkerCame wid) (callPlan call) of
  Left _ -> (call, [])
  Right (plan, cmds) ->
    let (call1, outs) = commandsToOuts call { callPlan = plan } cmds
        (call2, recover) = recoverStates (callOrphanWhy call1) (callOrphans call1) call1 { callOrphans = [] }
    in (call2, SendTo wid (EvolveWith (callRef call)) : outs ++ recover)

-- Whether a plan's command is a loss.
isLose :: Command -> Bool
isLose c = case c of { Lose _ -> True; _ -> False }
-- A worker of the call is gone: what the plan still had there, the children
-- it made in this call, states without an input and states being
-- recomputed there are all recomputed elsewhere.
lostWorker :: Double -> WorkerId -> String -> Call -> (Call, [Out])
lostWorker now wid why call = case stepPlan now (WorkerGone wid) (callPlan call) of
  Left _ -> (call, [])
  Right (plan, cmds) ->
    -- besides the states the plan still had there, the lost worker held
    -- children made in this call, states without an input, and states
    -- being recomputed there: all are recomputed elsewhere
    let held = [ sid | (sid, p) <- SM.toList (callStates call), placedOn p == wid ]
        replaying = [ sid | (sid, (w, _, _)) <- SM.toList (callReplaying call), w == wid ]
        lost = S.toList (S.fromList (concat [ ss | Lose ss <- cmds ] ++ held ++ replaying))
        (call1, outs) = commandsToOuts call { callPlan = plan } [ c | c <- cmds, not (isLose c) ]
        (call2, recover) = recoverStates ("worker " ++ show wid ++ " was lost: " ++ why) lost call1
    in (call2, outs ++ recover)
-- Step the plan with a worker's event (one that breaks the plan drops the worker).
planStep :: Double -> WorkerId -> PlanEvent -> Call -> (Call, [Out])
planStep now wid ev call = case stepPlan now ev (callPlan call) of
  Left why -> (call, [DropPeer wid why])
  Right (plan, cmds) ->
    let moved = length [ () | Place {} <- cmds ]
    in commandsToOuts call { callPlan = plan, callMoved = callMoved call + moved } cmds
-- A state evolved into these children (ids the worker made, new ones).
evolved :: Double -> WorkerId -> StateId -> Double -> [(Word64, B.ByteString)] -> Call -> (Call, [Out])
evolved now wid parent secs children call
  | bad : _ <- [ c | (c, _) <- children, not (ownId wid c) || SM.member (StateId c) (callStates call) ] =
      (call, [DropPeer wid ("it named a child " ++ show (StateId bad) ++ " with an id that is not its own or not new")])
  | otherwise = case stepPlan now (Evolved wid parent secs) (callPlan call) of
      Left why -> (call, [DropPeer wid why])
      Right (plan, cmds) ->
        let kids = [ (StateId c, o) | (c, o) <- children ]
            input = SM.findWithDefault B.empty parent (callInputs call)
            !origins = foldl' (\m (k, (c, _)) -> SM.insert c (ChildOf parent (callRef call) input k) m)
                              (callOrigin call) (zip [0 ..] kids)
            call' = call
              { callPlan = plan
              , callOutputs = SM.insert parent kids (callOutputs call)
              , callStates = foldl' (\m (c, _) -> SM.insert c (Placed wid secs) m) (SM.delete parent (callStates call)) kids
              , callOrigin = origins
              , callChildren = callChildren call + length kids }
        in commandsToOuts call' cmds
-- Whether a child id carries this worker's number.
ownId :: WorkerId -> Word64 -> Bool
ownId wid c = fromIntegral (c `shiftR` stateIdBits) == wid

-- | Recompute states lost with their worker on the live workers, spread
-- round robin; those that still had to be evolved in this call join the
-- plan when they are back. Without a live worker they wait for one to
-- join (the master fails the call if none is coming); without a lineage
-- the call fails naming them.
recoverStates :: String -> [StateId] -> Call -> (Call, [Out])
recoverStates _ [] call = (call, [])
recoverStates why lost call = case (live, missing) of
  (_, _ : _) -> (call, [Fail (StatesLost (map show missing) (why ++ "; how they were made is unknown"))])
  ([], _) -> (call { callOrphans = callOrphans call ++ lost, callOrphanWhy = why
                   , callStates = foldl' (flip SM.delete) (callStates call) lost
                   , callReplaying = foldl' (flip SM.delete) (callReplaying call) lost }, [])
  _ -> (call { callReplaying = foldl' (\m (s, w) -> SM.insert s (w, SM.member s pending, estimate s) m)
                                      (callReplaying call) assigned
             , callStates = foldl' (flip SM.delete) (callStates call) lost }
       , [ SendTo w (StateReplay k root [ (ref, input, fromIntegral i) | (ref, input, i) <- path ])
         | (s@(StateId k), w) <- assigned, Just (root, path) <- [lineage (callOrigin call) s] ])
  where
    live = planWorkers (callPlan call)
    missing = [ s | s <- lost, lineage (callOrigin call) s == Nothing ]
    assigned = zip lost (cycle live)
    -- states of this call not evolved yet (their output is still due)
    pending = SM.filterWithKey (\s _ -> not (SM.member s (callOutputs call))) (callInputs call)
    estimate s = costOr (callMean call) (SM.lookup s (callStates call))

-- | Turn the plan's commands into messages.
commandsToOuts :: Call -> [Command] -> (Call, [Out])
commandsToOuts call cmds = (foldl' track call cmds, concatMap out cmds)
  where
    out cmd = case cmd of
      Ask w sids -> [ SendTo w (EvolveState k (callInputs call SM.! sid)) | sid@(StateId k) <- sids ]
      Release w (StateId k) -> [SendTo w (StateRelease k)]
      Place w (StateId k) bytes -> [SendTo w (StateAdd k bytes)]
      Lose _ -> []
    track c cmd = case cmd of
      Place w sid _ -> c { callStates = SM.insert sid (Placed w (maybe 0 placedCost (SM.lookup sid (callStates c)))) (callStates c) }
      _ -> c

