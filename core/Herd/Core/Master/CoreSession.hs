-- | The evolve session's side of the master's core ("Herd.Core.Master.Core"):
-- starting the one session ("Herd.Core.Master.Session"), handing it its
-- workers' messages, arrivals and losses, and turning what it decides
-- into the core's commands; a report of a call that ended drops the
-- states it made. Pure. A session's peer that broke its protocol is
-- dropped by the core's own means, passed in ('DropPeer').
module Herd.Core.Master.CoreSession
  ( DropPeer
  , startSession
  , sessionMessage
  , sessionJoined
  , sessionStarved
  , sessionLost
  ) where

import qualified Data.Map.Strict as M
import Data.Word (Word64)
import Herd.Core.Base (WorkerId)
import Herd.Core.Error (HerdError (..))
import Herd.Core.Master.CoreState
import Herd.Core.Master.Events
import Herd.Core.Master.Session
import Herd.Core.Packet.Policy (Urgency (..))
import qualified Herd.Core.Scheduler as S
import Herd.Core.Wire (FromWorker (..), ToWorker (..))

-- | Drop a worker that broke the session's protocol, saying why.
type DropPeer = WorkerId -> String -> Core -> (Core, [Command])

-- | Start a session on the live workers (the lowest numbered, up to its limit).
startSession :: DropPeer -> Word64 -> SessionRequest -> Core -> (Core, [Command])
startSession drop sid req core
  | coreStopping core = (core, [SessionEnded sid (Left ClusterClosed)])
  | Just _ <- coreSession core =
      (core, [SessionEnded sid (Left (EvolveFailed "" "" "another evolve call is running on this cluster"))])
  | otherwise = case hostStart (maybe id take (requestLimit req) (M.keys (coreLinks core))) req of
      Left err -> (core, [SessionEnded sid (Left err)])
      Right (hosted, outs) -> settle drop hosted outs core { coreSessionLimit = requestLimit req }

-- | Hand a worker's evolve message to the session, if it is one of its workers.
sessionMessage :: DropPeer -> Double -> WorkerId -> FromWorker -> Core -> (Core, [Command])
sessionMessage drop now w msg core = case coreSession core >>= hostMessage now w msg of
  Just (hosted, outs) -> settle drop hosted outs core
  Nothing -> case msg of
    -- a late answer of a call that ended: what it made is nobody's
    StateEvolved _ _ children | not (null children) -> (core, [Send w Urgent (StatesDrop (map fst children))])
    _ -> (core, [])

-- | A worker joined while a session runs: it becomes one of the session's,
-- up to the session's limit (so a lost worker's replacement can take up
-- its states).
sessionJoined :: DropPeer -> Double -> WorkerId -> Core -> (Core, [Command])
sessionJoined drop now w core = case coreSession core of
  Just h | maybe True (hostLive h <) (coreSessionLimit core), Just (hosted, outs) <- hostJoined now w h -> settle drop hosted outs core
  _ -> (core, [])

-- | No worker of the session is live and none is being restarted: states
-- waiting for a worker will not get one.
sessionStarved :: DropPeer -> Double -> Core -> (Core, [Command])
sessionStarved drop now core = case coreSession core of
  Just h | hostLive h == 0 ->
    -- a live worker outside the session (beyond its limit before) takes
    -- up its states; else one being restarted will; else none will
    case [ x | w <- M.keys (coreLinks core), Just x <- [hostJoined now w h] ] of
      (hosted, outs) : _ -> settle drop hosted outs core
      [] | S.awaitedWorkers (coreSched core) == 0 -> let (hosted, outs) = hostStarved h in settle drop hosted outs core
         | otherwise -> (core, [])
  _ -> (core, [])

-- | A worker of the session was lost.
sessionLost :: DropPeer -> Double -> WorkerId -> String -> Core -> (Core, [Command])
sessionLost drop now w why core = case coreSession core >>= hostLost now w why of
  Just (hosted, outs) -> settle drop hosted outs core
  Nothing -> (core, [])

-- Carry out a session's outs and end it if it is over. Messages to one
-- worker go out together, in one command, the last one urgent; a dropped
-- peer is a lost worker for the session too.
settle :: DropPeer -> Hosted -> [Out] -> Core -> (Core, [Command])
settle drop hosted outs core0 =
  let (hosted1, perWorker, drops) = hostApply (`M.member` coreLinks core0) outs hosted
      sends = [ sendTo w ms | (w, ms) <- perWorker, not (null ms) ]
      sendTo w [m] = Send w Urgent m
      sendTo w ms = SendAll w ms
      (core2, dropOut) = foldl (\(c, acc) (w, why) -> let (c', o) = drop w why c in (c', acc ++ o))
                               (core0 { coreSession = Just hosted1 }, []) drops
  in case coreSession core2 of
       Just h | hostOver h -> (core2 { coreSession = Nothing }, sends ++ dropOut ++ [SessionEnded (coreSessionOf core2) (Right (hostAnswer h))])
       _ -> (core2, sends ++ dropOut)
