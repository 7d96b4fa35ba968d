{-# LANGUAGE BangPatterns #-}
-- | The host's half of two-level evolve, pure: a host agent holds its
-- host's part of a population (where each state lives among the host's
-- workers, and how to make it again) and runs the master's part of a call
-- for it. Given the host's states and inputs in one message
-- ('HostEvolve'), it runs the very session the master runs for a call
-- ("Herd.Core.Evolve.Call", the plan of "Herd.Core.Evolve.Schedule") over
-- the host's own workers: it keeps their queues full, moves unstarted
-- states from a busy worker to an idle one, and recomputes a lost
-- worker's states from their lineage on the others, without the master.
-- It reports to the master a batch at a time ('HostEvolved', at the end of
-- each of the driver's rounds) and once at the end ('HostCallEnded').
-- The population and the moves of states between the master and the
-- host are "Herd.Core.Agent.Population".
--
-- Promises (checked by @HostEvolveSpec@ against model workers that are
-- lost at random): every state of a call is reported exactly once, with
-- the children its worker made, or the call ends failed naming why; a
-- call always ends with exactly one 'HostCallEnded'; after a call the
-- registry places every child on a live worker of the host; nothing the
-- agent sends the master names a single worker; a call that comes while
-- another runs gives that one up (the master starts a call only after its
-- last one returned, so its caller was interrupted).
module Herd.Core.Agent.Evolve
  ( HostPopulation
  , newHostPopulation
  , hostRegistry
  , hostWorkers
  , hostCallRunning
  , HostEvent (..)
  , HostOut (..)
  , stepHost
  , isEvolveAnswer
  , hostClaims
  ) where

import qualified Data.ByteString as B
import qualified Data.Map.Strict as M
import qualified Data.Set as S
import qualified Data.Text as T
import Data.Word (Word64)
import Herd.Core.Base (TaskRef (..), WorkerId)
import Herd.Core.Evolve.Call (Call (..), callBusy, callMachine)
import Herd.Core.Evolve.Registry
import Herd.Core.Evolve.Start (CallStart (..), estimateFrom, registryAfter, startCall)
import qualified Herd.Core.Evolve.StateMap as SM
import Herd.Core.Evolve.Plan (defaultPlanSettings, settingsLead)
import Herd.Core.Session (Machine (..), Out (..), answerState)
import Herd.Core.Wire (FromWorker (..), ToWorker (..))
import Herd.Core.Wire.HostCall
import Herd.Core.Agent.Population

-- | One step of the host's population.
stepHost :: Double -> HostEvent -> HostPopulation -> (HostPopulation, [HostOut])
stepHost now ev hp
  -- a give in progress is over when another message of the master comes
  -- (its caller gave up): what came back is held again
  | MasterSaid _ <- ev, Just gv <- hpGiving hp = let (hp', outs) = keepGiven gv hp
                                                     (hp'', outs') = stepHost now ev hp'
                                                 in (hp'', outs ++ outs')
  | LocalSaid w msg <- ev, Just gv <- hpGiving hp, Just k <- answerState msg, M.lookup k (gvWaiting gv) == Just w =
      given gv k msg hp
  | LocalLost w _ <- ev, Just gv <- hpGiving hp, w `elem` M.elems (gvWaiting gv) =
      -- its states stay here, to be remade at the next call
      let gv' = gv { gvWaiting = M.filter (/= w) (gvWaiting gv) }
          (hp', outs) = giveDone gv' hp { hpGiving = Just gv' }
          (hp'', outs') = stepHost now ev hp'
      in (hp'', outs ++ outs')
  -- the master sends a message only after its last call returned: a call
  -- still running here was given up by its caller, and goes first, so
  -- that it cannot touch what the message brings
  | MasterSaid m <- ev, fromMaster m, Just rn <- hpRunning hp =
      let (hp', outs) = abandon rn hp
          (hp'', outs') = stepPopulation now ev hp'
      in (hp'', outs ++ outs')
  | otherwise = stepPopulation now ev hp

-- Whether a message is one the master sends a host (the others it only
-- hears, and a host refuses them).
fromMaster :: HostCallMessage -> Bool
fromMaster m = case m of
  HostEvolved {} -> False
  HostCallEnded {} -> False
  HostStatesGiven {} -> False
  _ -> True

stepPopulation :: Double -> HostEvent -> HostPopulation -> (HostPopulation, [HostOut])
stepPopulation now ev hp = case ev of
  MasterSaid (HostStatesAdd n states) -> addStates n states hp
  MasterSaid (HostStatesGive n ids) -> giveStates n ids hp
  MasterSaid (HostStatesPut n states) -> putStates n states hp
  MasterSaid (HostEvolve n ref deaths states) -> begin now n ref (fromIntegral deaths) states hp
  MasterSaid (HostStatesAdopt n origins ids) -> adoptStates n origins ids hp
  MasterSaid other -> (hp, [ToMasterCall (HostCallEnded (hostCallNumber other) (Left (T.pack ("a host cannot take " ++ show other))))])
  LocalJoined w -> running hp { hpWorkers = S.insert w (hpWorkers hp) } (\m c -> machineJoined m now w c)
  LocalLost w why ->
    let hp' = hp { hpWorkers = S.delete w (hpWorkers hp) }
    in running hp' (\m c -> let (c1, o1) = machineLost m now w why c
                            in if S.null (hpWorkers hp') then let (c2, o2) = machineStarved m c1 in (c2, o1 ++ o2) else (c1, o1))
  LocalSaid w msg -> case hpRunning hp of
    -- one call at a time: an answer naming no state (a refused function) is its
    Just rn | maybe True (const (machineClaims (callMachine (refNameOf rn)) w msg (rnCall rn))) (answerState msg) ->
      let fresh = case msg of
            StateEvolved parent _ _ | not (SM.member (StateId parent) (callOutputs (rnCall rn))) -> [StateId parent]
            _ -> []
      in running (markFresh fresh hp) (\m c -> machineMessage m now w msg c)
    _ -> (hp, [])   -- of no call running here: a late answer of one that failed
  RoundEnded -> case hpRunning hp of
    Just rn | not (null (rnFresh rn)) ->
      (hp { hpRunning = Just rn { rnFresh = [] } }, [ToMasterCall (HostEvolved (rnNumber rn) (reportOf (rnCall rn) (rnFresh rn)))])
    _ -> (hp, [])

-- Start a call on the host's workers.
begin :: Double -> Word64 -> TaskRef -> Int -> [(Word64, B.ByteString)] -> HostPopulation -> (HostPopulation, [HostOut])
begin now n ref deaths states hp
  -- the master starts a call only after its last one returned: one still
  -- running here was given up (its caller was interrupted)
  | not (null unknown) = (hp, [refuse ("the host holds no state " ++ unwords (map show (take 5 unknown))
                                       ++ (if length unknown > 5 then " and " ++ show (length unknown - 5) ++ " more" else ""))])
  | otherwise = case startCall start (S.toList (hpWorkers hp)) of
      Left err -> (hp, [refuse (show err)])
      Right (call, outs) -> settle (Running n ref call []) outs hp
  where
    reg = hpRegistry hp
    refuse why = ToMasterCall (HostCallEnded n (Left (T.pack why)))
    unknown = [ StateId k | (k, _) <- states, not (SM.member (StateId k) (regStates reg)) ]
    start = CallStart
      { startRef = ref, startRegistry = reg, startStates = map (StateId . fst) states
      , startInputs = SM.fromList [ (StateId k, i) | (k, i) <- states ]
      , startEstimate = estimateFrom reg, startLead = settingsLead defaultPlanSettings
      , startMaxDeaths = max 1 deaths, startTime = now }

-- Step the running call's session, if there is one.
running :: HostPopulation -> (Machine Call -> Call -> (Call, [Out])) -> (HostPopulation, [HostOut])
running hp act = case hpRunning hp of
  Nothing -> (hp, [])
  Just rn -> let (call, outs) = act (callMachine (refNameOf rn)) (rnCall rn)
             in settle rn { rnCall = call } outs hp

-- Carry out a session's outs; end the call when it is done or failed.
settle :: Running -> [Out] -> HostPopulation -> (HostPopulation, [HostOut])
settle rn outs hp = case [ err | Fail err <- outs ] of
  err : _ ->
    -- its caller gets the error; its states are forgotten here
    ( forgetCall call hp
    , local ++ report ++ [ToMasterCall (HostCallEnded (rnNumber rn) (Left (T.pack (show err))))] )
  []
    | machineDone (callMachine (refNameOf rn)) call ->
        let reg' = registryAfter (rnRef rn) call (hpRegistry hp)
            summary = CallSummary [ (fromIntegral w, round (secs * 1e9)) | (w, secs) <- M.toList (callBusy call) ]
                                  (fromIntegral (callMoved call)) (fromIntegral (callRecovered call))
        in ( hp { hpRegistry = reg', hpRunning = Nothing }
           , local ++ report ++ [ToMasterCall (HostCallEnded (rnNumber rn) (Right summary))] )
    | otherwise -> (hp { hpRunning = Just rn }, local)
  where
    call = rnCall rn
    local = concatMap toLocal outs
    toLocal o = case o of
      SendTo w m -> [ToLocal w m]
      DropPeer w why -> [DropLocal w why]
      _ -> []
    report = [ ToMasterCall (HostEvolved (rnNumber rn) done) | let done = reportOf call (rnFresh rn), not (null done) ]

-- The states evolved among these (newest first), each once, with their
-- children; one not accepted by the call is left out.
reportOf :: Call -> [StateId] -> [(Word64, [(Word64, B.ByteString)])]
reportOf call fresh =
  [ (k, [ (c, b) | (StateId c, b) <- kids ])
  | s@(StateId k) <- S.toList (S.fromList fresh), Just kids <- [SM.lookup s (callOutputs call)] ]

-- Give up a running call: its states and the children it made are
-- dropped on the workers and forgotten here, as after a failure; the
-- master hears that it ended.
abandon :: Running -> HostPopulation -> (HostPopulation, [HostOut])
abandon rn hp =
  let call = rnCall rn
      own = callOwn call
      held = M.fromListWith (++) [ (placedOn p, [k]) | (s@(StateId k), p) <- SM.toList (callStates call), S.member s own ]
  in ( forgetCall call hp
     , [ ToLocal w (StatesDrop ks) | (w, ks) <- M.toList held, S.member w (hpWorkers hp) ]
       ++ [ToMasterCall (HostCallEnded (rnNumber rn) (Left (T.pack "given up: the master started another call")))] )

-- The states a call was given and the children it made.
callOwn :: Call -> S.Set StateId
callOwn call = S.fromList (SM.keys (callInputs call) ++ [ k | kids <- SM.elems (callOutputs call), (k, _) <- kids ])

-- A call that failed or was given up: its states are unknown now, and so
-- are the children it made; forgotten here, as the master forgets them,
-- and what workers still say of them is ignored ('regAbandoned').
forgetCall :: Call -> HostPopulation -> HostPopulation
forgetCall call hp =
  let own = callOwn call
      reg = hpRegistry hp
      kept = SM.filterWithKey (\s p -> not (S.member s own) && S.member (placedOn p) (hpWorkers hp)) (regStates reg)
  in hp { hpRegistry = reg { regStates = kept, regTold = Nothing, regAbandoned = S.union (regAbandoned reg) own }
        , hpRunning = Nothing }

-- | Whether a worker's message is an evolve answer, which under two levels
-- is the agent's scheduler's, not the master's.
isEvolveAnswer :: FromWorker -> Bool
isEvolveAnswer m = case m of
  EvolveRejected _ -> True
  StatesCleared -> False
  _ -> maybe False (const True) (answerState m)

-- | Whether a local worker's evolve answer is this host's scheduler's: it
-- names a state of the host's population, of its running call, of a call
-- given up, or of a give in progress. Any other (a Ref's, whose calls the
-- master runs itself) goes to the master as it came.
hostClaims :: HostPopulation -> WorkerId -> FromWorker -> Bool
hostClaims hp w msg = case answerState msg of
  Just k -> let s = StateId k
                reg = hpRegistry hp
            in SM.member s (regStates reg) || S.member s (regAbandoned reg)
               || maybe False (\rn -> machineClaims (callMachine (refNameOf rn)) w msg (rnCall rn)) (hpRunning hp)
               || maybe False (M.member k . gvWaiting) (hpGiving hp)
  Nothing -> case msg of
    EvolveRejected _ -> maybe False (const True) (hpRunning hp)
    _ -> False

-- Remember states evolved in the running call, for the next report.
markFresh :: [StateId] -> HostPopulation -> HostPopulation
markFresh [] hp = hp
markFresh ss hp = case hpRunning hp of
  Just rn -> hp { hpRunning = Just rn { rnFresh = ss ++ rnFresh rn } }
  Nothing -> hp   -- the call ended with this answer: the end reported it

refNameOf :: Running -> String
refNameOf = refName . rnRef
