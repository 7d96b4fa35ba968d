-- | The evolve sessions' side of the master's core ("Herd.Core.Master"):
-- starting sessions ("Herd.Core.Session"), any number at once,
-- handing each its workers' messages, arrivals and losses, and turning
-- what it decides into the core's commands; a report of a call that
-- ended drops the states it made. Pure. A session's peer that broke its
-- protocol is dropped by the core's own means, passed in ('DropPeer').
--
-- Promises:
--
-- * INV-ROUTE for sessions: a session running alone is given every evolve
--   message of its workers but answers about states it does not claim
--   (late answers of a session that ran beside it); beside others, a worker's answer
--   about a state goes to the session that claims the state
--   ('machineClaims': its population's, which no other session's shares),
--   a 'StatesCleared' to the oldest session that asked that worker to
--   reset; an answer no running session claims is a late one (what it
--   made is dropped).
-- * A worker asked to evolve a state for a session has been told that
--   session's function last: when another session's function was the
--   last it heard, the core names the right one first.
module Herd.Core.Master.Sessions
  ( sessionFeature
  , startSession
  , cancelSession
  ) where

import Data.List (foldl', mapAccumL)
import qualified Data.Map.Strict as M
import Data.Word (Word64)
import Herd.Core.Base (TaskRef, WorkerId)
import Herd.Core.Error (HerdError (..))
import Herd.Core.Fault (Violation (..))
import Herd.Core.Master.State
import Herd.Core.Master.Events
import Herd.Core.Master.Feature
import Herd.Core.Monitor.Ledger (ledgerCredit)
import Herd.Core.Session
import Herd.Core.Packet.Policy (Urgency (..))
import qualified Herd.Core.Farm as S
import Herd.Core.Wire (FromWorker (..), ToWorker (..))

-- | The running sessions: each hears of its workers' messages, arrivals
-- and losses, and of a cluster left with none of its workers.
sessionFeature :: Feature
sessionFeature = (quiet "session")
  { featureOwns = isEvolveMessage
  , featureReceived = \hooks now w msg core -> case msg of
      StateEvolved _ busyNs _ ->
        sessionMessage (dropOf hooks) now w msg core { coreLedger = ledgerCredit w 0 0 1 (fromIntegral busyNs / 1e9) (coreLedger core) }
      _ -> sessionMessage (dropOf hooks) now w msg core
  , featureJoined = \hooks now w -> sessionJoined (dropOf hooks) now w
  , featureLost = \hooks now w loss -> sessionLost (dropOf hooks) now w (lossWhy loss)
  , featureStarved = \hooks now -> sessionStarved (dropOf hooks) now
  , featureStop = \_ -> stopSessions ClusterClosed
  , featureBusy = not . M.null . coreSessions
  , featureCalls = \core -> [ CallView "evolve" (viewFunction v) (viewLeft v) [ w | (w, n) <- viewStates v, n > 0 ]
                            | r <- M.elems (coreSessions core), Just v <- [hostView (runHosted r)] ]
  }

-- Drop a worker that broke the session's protocol, saying why.
type DropPeer = WorkerId -> String -> Core -> (Core, [Command])

dropOf :: Hooks -> DropPeer
dropOf hooks w why = hookDropPeer hooks w (SessionViolation why)

-- | Start a session on the live workers (the lowest numbered, up to its
-- limit), beside any sessions already running.
startSession :: Hooks -> Word64 -> SessionRequest -> Core -> (Core, [Command])
startSession hooks sid req core
  | coreStopping core = (core, [SessionEnded sid (Left ClusterClosed)])
  | M.member sid (coreSessions core) = (core, [SessionEnded sid (Left (EvolveFailed "" "" "a session of this number is running"))])
  | otherwise = case hostStart (maybe id take (requestLimit req) (M.keys (coreLinks core))) req of
      Left err -> (core, [SessionEnded sid (Left err)])
      Right (hosted, outs) -> settle (dropOf hooks) sid (Running hosted (requestLimit req) (requestFunction req)) outs core

-- | A caller gave up on its session: it is forgotten, unanswered (INV-ONCE);
-- its workers' late answers are dropped as those of an ended session.
cancelSession :: Word64 -> Core -> Core
cancelSession = forget

-- The cluster stops: every session ends with this error.
stopSessions :: HerdError -> Core -> (Core, [Command])
stopSessions e core =
  ( core { coreSessions = M.empty, coreResets = M.empty }
  , [ SessionEnded sid (Right (hostAbort e (runHosted r))) | (sid, r) <- M.toList (coreSessions core) ] )

-- Hand a worker's evolve message to the session it answers.
sessionMessage :: DropPeer -> Double -> WorkerId -> FromWorker -> Core -> (Core, [Command])
sessionMessage drop now w msg core0
  -- alone, a session is given every evolve message of its workers but an
  -- answer about a state it does not claim: that is a late answer of a
  -- session that ran beside it and ended
  | M.size (coreSessions core0) == 1, notReset msg =
      let (sid, r) = M.findMin (coreSessions core0)
          claimed = maybe True (const (hostClaims w msg (runHosted r))) (answerState msg)
      in case hostMessage now w msg (runHosted r) of
           Just (hosted, outs) | claimed -> settle drop sid r { runHosted = hosted } outs core0
           _ -> late
  | otherwise =
  case [ (sid, x) | sid <- targets, Just r <- [M.lookup sid (coreSessions core)], Just x <- [(,) r <$> hostMessage now w msg (runHosted r)] ] of
    [] -> late
    found -> foldl' (\(c, out) (sid, (r, (hosted, outs))) ->
                       let (c', out') = settle drop sid r { runHosted = hosted } outs c in (c', out ++ out'))
                    (core, []) found
  where
    notReset m = case m of { StatesCleared -> False; _ -> True }
    (targets, core) = answered w msg core0
    late = case msg of
      -- a late answer of a call that ended: what it made is nobody's
      StateEvolved _ _ children | not (null children) -> (core, [Send w Urgent (StatesDrop (map fst children))])
      _ -> (core, [])

-- Which sessions a worker's message answers; a reset's answer is taken
-- off the worker's list of resets owed.
answered :: WorkerId -> FromWorker -> Core -> ([Word64], Core)
answered w msg core = case msg of
  StatesCleared -> case M.findWithDefault [] w (coreResets core) of
    sid : rest -> ([sid], core { coreResets = M.insert w rest (coreResets core) })
    [] -> ([], core)
  _ | M.size (coreSessions core) == 1 -> ([fst (M.findMin (coreSessions core))], core)
  -- a worker that cannot run a function refuses it without naming it:
  -- every session it takes part in hears
  EvolveRejected _ -> ([ sid | (sid, r) <- M.toList (coreSessions core), hostHas w (runHosted r) ], core)
  _ -> (take 1 [ sid | (sid, r) <- M.toList (coreSessions core), hostClaims w msg (runHosted r) ], core)

-- A worker joined while sessions run: it becomes one of each session's,
-- up to each one's limit (so a lost worker's replacement can take up its
-- states).
sessionJoined :: DropPeer -> Double -> WorkerId -> Core -> (Core, [Command])
sessionJoined drop now w core0 = foldl' joinOne (core0, []) (M.toList (coreSessions core0))
  where
    joinOne (core, out) (sid, r)
      | maybe True (hostLive (runHosted r) <) (runLimit r), Just (hosted, outs) <- hostJoined now w (runHosted r) =
          let (core', out') = settle drop sid r { runHosted = hosted } outs core in (core', out ++ out')
      | otherwise = (core, out)

-- No worker of some session is live and none is being restarted: states
-- waiting for a worker will not get one.
sessionStarved :: DropPeer -> Double -> Core -> (Core, [Command])
sessionStarved drop now core0 = foldl' starveOne (core0, []) (M.keys (coreSessions core0))
  where
    starveOne (core, out) sid = case M.lookup sid (coreSessions core) of
      Just r | hostLive (runHosted r) == 0 ->
        -- a live worker outside the session (beyond its limit before) takes
        -- up its states; else one being restarted will; else none will
        let (core', out') = case [ x | w <- M.keys (coreLinks core), Just x <- [hostJoined now w (runHosted r)] ] of
              (hosted, outs) : _ -> settle drop sid r { runHosted = hosted } outs core
              [] | S.awaitedWorkers (coreSched core) == 0 ->
                     let (hosted, outs) = hostStarved (runHosted r) in settle drop sid r { runHosted = hosted } outs core
                 | otherwise -> (core, [])
        in (core', out ++ out')
      _ -> (core, out)

-- A worker was lost: each session it took part in hears.
sessionLost :: DropPeer -> Double -> WorkerId -> String -> Core -> (Core, [Command])
sessionLost drop now w why core0 =
  foldl' loseOne (core0 { coreResets = M.delete w (coreResets core0), coreRunners = M.delete w (coreRunners core0) }, [])
         (M.keys (coreSessions core0))
  where
    loseOne (core, out) sid = case M.lookup sid (coreSessions core) >>= \r -> (,) r <$> hostLost now w why (runHosted r) of
      Just (r, (hosted, outs)) -> let (core', out') = settle drop sid r { runHosted = hosted } outs core in (core', out ++ out')
      Nothing -> (core, out)

-- Carry out a session's outs and end it if it is over. Messages to one
-- worker go out together, in one command, the last one urgent; the
-- session's function goes first where the worker was last told another;
-- a dropped peer is a lost worker for the session too.
settle :: DropPeer -> Word64 -> Running -> [Out] -> Core -> (Core, [Command])
settle drop sid r outs core0 =
  let (hosted1, perWorker0, drops) = hostApply (`M.member` coreLinks core0) outs (runHosted r)
      busy = [ x | x@(_, ms) <- perWorker0, not (null ms) ]
      core1a = core0 { coreSessions = M.insert sid r { runHosted = hosted1 } (coreSessions core0) }
      -- the common case (each worker was told this session's function
      -- last, no reset) costs one look-up per worker and no change to the core
      (core1, perWorker)
        | any (needsAsking (runFunction r) core0) busy =
            mapAccumL (\c (w, ms) -> let (c', ms') = asking sid (runFunction r) w ms c in (c', (w, ms'))) core1a busy
        | otherwise = (core1a, busy)
      sends = [ sendTo w ms | (w, ms) <- perWorker ]
      sendTo w [m] = Send w Urgent m
      sendTo w ms = SendAll w ms
      (core2, dropOut) = foldl (\(c, acc) (w, why) -> let (c', o) = drop w why c in (c', acc ++ o)) (core1, []) drops
  in case M.lookup sid (coreSessions core2) of
       Just h | hostOver (runHosted h) -> (forget sid core2, sends ++ dropOut ++ [SessionEnded sid (Right (hostAnswer (runHosted h)))])
       _ -> (core2, sends ++ dropOut)

-- Whether a session's messages to a worker change anything of the core's
-- ('asking'): a reset it will be owed, or a function to name.
needsAsking :: Maybe TaskRef -> Core -> (WorkerId, [ToWorker]) -> Bool
needsAsking function core (w, ms) = any isReset ms || (function /= Nothing && M.lookup w (coreRunners core) /= function && any evolvesOrNames ms)
  where
    isReset m = case m of { StatesReset -> True; _ -> False }
    evolvesOrNames m = case m of { EvolveState {} -> True; EvolveWith _ -> True; _ -> False }

-- A session's messages to one worker: the resets it will be owed, and
-- its function named first where the worker was last told another's. A
-- session names no other function than its own, so a worker whose last
-- function is the session's needs nothing (the common case: no work).
asking :: Word64 -> Maybe TaskRef -> WorkerId -> [ToWorker] -> Core -> (Core, [ToWorker])
asking sid function w msgs core0 = case function of
  Nothing -> (core, msgs)
  Just f
    | M.lookup w (coreRunners core) == function -> (core, msgs)
    | not (any evolves msgs) && not (any names msgs) -> (core, msgs)
    | otherwise ->
        ( core { coreRunners = M.insert w f (coreRunners core) }
        -- named at the front, unless the session names it before its first request
        , if namesFirst msgs then msgs else EvolveWith f : msgs )
  where
    core | any isReset msgs = core0 { coreResets = M.insertWith (flip (++)) w [ sid | m <- msgs, isReset m ] (coreResets core0) }
         | otherwise = core0
    isReset m = case m of { StatesReset -> True; _ -> False }
    evolves m = case m of { EvolveState {} -> True; _ -> False }
    names m = case m of { EvolveWith _ -> True; _ -> False }
    namesFirst ms = case dropWhile (\m -> not (evolves m || names m)) ms of
      EvolveWith _ : _ -> True
      _ -> False

-- Forget a session and the resets it is owed.
forget :: Word64 -> Core -> Core
forget sid core
  | not (M.member sid (coreSessions core)) = core
  | otherwise = core { coreSessions = M.delete sid (coreSessions core)
                     , coreResets = if M.null (coreResets core) then M.empty else M.map (filter (/= sid)) (coreResets core) }
