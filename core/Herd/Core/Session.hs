{-# LANGUAGE ExistentialQuantification #-}
-- | Sessions: the evolve API's calls as pure machines that the master core
-- hosts beside farm jobs and stream processes.
--
-- A session is a state machine over workers' evolve messages
-- ('machineMessage') and losses ('machineLost'); it answers with 'Out's
-- that the core turns into sends. The core feeds a session each evolve
-- message of its workers once, in the order the worker sent it, and each
-- loss of one of its workers once; it ends the session when the machine
-- says it is done, when it fails, or when none of its workers is left.
-- Nothing here does IO.
module Herd.Core.Session
  ( Machine (..)
  , Out (..)
  , SessionEnd (..)
  , SessionRequest (..)
  , SessionOutcome (..)
  , outcomeEnd
  , SessionView (..)
  , isEvolveMessage
    -- * Hosting (for "Herd.Core.Master")
  , Hosted
  , hostStart
  , hostMessage
  , hostLost
  , hostJoined
  , hostLive
  , hostStarved
  , hostApply
  , hostOver
  , hostAnswer
  , hostAbort
  , hostView
  , hostHas
  , hostClaims
  , answerState
  , claimsNothing
  ) where

import Data.List (sortBy)
import qualified Data.Map.Strict as M
import Data.Ord (comparing)
import qualified Data.Set as S
import Data.Typeable (Typeable, cast)
import Herd.Core.Error (HerdError)
import Herd.Core.Base (TaskRef, WorkerId)
import Data.Word (Word64)
import Herd.Core.Wire (FromWorker (..), ToWorker)

-- | A session's logic: pure functions of its state.
-- Each event comes with the time it is taken at (seconds of the master's
-- monotonic clock).
data Machine st = Machine
  { machineMessage :: Double -> WorkerId -> FromWorker -> st -> (st, [Out])
  , machineLost    :: Double -> WorkerId -> String -> st -> (st, [Out])
  , machineJoined  :: Double -> WorkerId -> st -> (st, [Out])
    -- ^ a worker joined the cluster during the session and is now one of its
  , machineStarved :: st -> (st, [Out])
    -- ^ none of its workers is live and none is being restarted
  , machineDone    :: st -> Bool
  , machineView    :: st -> Maybe SessionView
    -- ^ what a watcher of the cluster is shown ('Nothing': nothing worth showing)
  , machineClaims  :: WorkerId -> FromWorker -> st -> Bool
    -- ^ whether this worker's answer about a state ('answerState') is the
    -- session's: asked only while other sessions run beside it (a session
    -- running alone is given every evolve message of its workers)
  }

-- | A running session as the dashboard shows it.
data SessionView = SessionView
  { viewFunction  :: !String              -- ^ the function's name
  , viewStates    :: ![(WorkerId, Int)]   -- ^ states of the call on each worker
  , viewLeft      :: !Int                 -- ^ evolutions not yet answered
  , viewMoved     :: !Int                 -- ^ states moved to idle workers so far
  , viewRecovered :: !Int                 -- ^ states recomputed after a loss so far
  } deriving (Eq, Show)

-- | What a session asks the core to do.
data Out
  = SendTo !WorkerId !ToWorker    -- ^ send a message (the last one to each worker of a step is urgent)
  | Fail !HerdError               -- ^ end the session with this error
  | DropPeer !WorkerId !String    -- ^ the worker broke the protocol: close its link
  deriving (Eq, Show)

-- | How a session ended: its final state, its error if it failed, and the
-- workers lost during it (with why).
data SessionEnd st = SessionEnd
  { endState :: !st
  , endError :: !(Maybe HerdError)
  , endLost  :: ![(WorkerId, String)]
  } deriving (Eq, Show)

-- | A caller's request for a session: what it is (a name for traces), how
-- many workers it may use (the lowest numbered; 'Nothing': all), and how
-- to start it given those workers (or why it cannot start). The caller's
-- answer is not here: the shell keeps it under the request's number and
-- gives it the 'SessionOutcome' the core ends the session with.
data SessionRequest = forall st. (Typeable st, Show st, Eq st) => SessionRequest
  { requestName   :: !String
  , requestLimit  :: !(Maybe Int)
  , requestFunction :: !(Maybe TaskRef)
    -- ^ the evolve function its requests to evolve ('EvolveState') need:
    -- the core names it to a worker first whenever another session's
    -- function was the last that worker was told
  , requestStart  :: [WorkerId] -> Either HerdError (Machine st, st, [Out])
  }

-- | Shows the name, the limit and the function (the start function has no text).
instance Show SessionRequest where
  showsPrec d (SessionRequest name limit fn _) = showParen (d > 10) $
    showString "SessionRequest " . showsPrec 11 name . showChar ' ' . showsPrec 11 limit . showChar ' ' . showsPrec 11 fn

-- | Requests are equal when their names, limits and functions are: start
-- functions cannot be compared, so a trace compares what it can print.
instance Eq SessionRequest where
  SessionRequest a m f _ == SessionRequest b n g _ = a == b && m == n && f == g

-- | How a session ended, for its caller: its final state (of the type its
-- request started it with), its error and its lost workers.
data SessionOutcome = forall st. (Typeable st, Show st, Eq st) => SessionOutcome !(SessionEnd st)

instance Show SessionOutcome where
  showsPrec d (SessionOutcome end) = showParen (d > 10) $ showString "SessionOutcome " . showsPrec 11 end

-- | Outcomes are equal when their states have one type and are equal.
instance Eq SessionOutcome where
  SessionOutcome a == SessionOutcome b = cast a == Just b

-- | The end of a session whose state has this type ('Nothing': another
-- type, which a caller that started the session never sees).
outcomeEnd :: Typeable st => SessionOutcome -> Maybe (SessionEnd st)
outcomeEnd (SessionOutcome end) = cast end

-- | Whether a worker's message belongs to an evolve session.
isEvolveMessage :: FromWorker -> Bool
isEvolveMessage m = case m of
  StateEvolved {} -> True
  EvolveThrew {} -> True
  EvolveRejected {} -> True
  StateReleased {} -> True
  StateKept {} -> True
  StateMissing {} -> True
  StatesCleared -> True
  StateReplayed {} -> True
  _ -> False

-- | A running session as the core hosts it: its machine and state, its
-- workers, those lost (with why), and its error.
data Hosted = forall st. (Typeable st, Show st, Eq st) =>
  Hosted !(Machine st) !st !(S.Set WorkerId) !(M.Map WorkerId String) !(Maybe HerdError)

-- | Start a request on these workers: the session and its first outs, or
-- why it could not start.
hostStart :: [WorkerId] -> SessionRequest -> Either HerdError (Hosted, [Out])
hostStart workers (SessionRequest _ _ _ start) = case start workers of
  Left err -> Left err
  Right (machine, st0, outs) -> Right (Hosted machine st0 (S.fromList workers) M.empty Nothing, outs)

-- | A message from a worker; 'Nothing' if it is not one of the session's
-- live workers (a late answer of a call that ended).
hostMessage :: Double -> WorkerId -> FromWorker -> Hosted -> Maybe (Hosted, [Out])
hostMessage now w msg (Hosted machine st ws lost err)
  | S.member w ws, not (M.member w lost) =
      let (st', outs) = machineMessage machine now w msg st
      in Just (Hosted machine st' ws lost err, outs)
  | otherwise = Nothing

-- | A worker that joined the cluster becomes one of the session's
-- ('Nothing' if it is one already).
hostJoined :: Double -> WorkerId -> Hosted -> Maybe (Hosted, [Out])
hostJoined now w (Hosted machine st ws lost err)
  | S.member w ws = Nothing
  | otherwise = let (st', outs) = machineJoined machine now w st
                in Just (Hosted machine st' (S.insert w ws) lost err, outs)

-- | How many of the session's workers are live.
hostLive :: Hosted -> Int
hostLive (Hosted _ _ ws lost _) = S.size (S.filter (\w -> not (M.member w lost)) ws)

-- | No worker of the session is live, and none is coming.
hostStarved :: Hosted -> (Hosted, [Out])
hostStarved (Hosted machine st ws lost err) =
  let (st', outs) = machineStarved machine st in (Hosted machine st' ws lost err, outs)

-- | One of the session's workers was lost (each is told once).
hostLost :: Double -> WorkerId -> String -> Hosted -> Maybe (Hosted, [Out])
hostLost now w why (Hosted machine st ws lost err)
  | S.member w ws, not (M.member w lost) =
      let (st', outs) = machineLost machine now w why st
      in Just (Hosted machine st' ws (M.insert w why lost) err, outs)
  | otherwise = Nothing

-- | Take in a step's outs: the first failure is kept; messages to each of
-- the session's live workers (those the predicate accepts too) are
-- gathered per worker, in order; the peers to drop are listed.
hostApply :: (WorkerId -> Bool) -> [Out] -> Hosted -> (Hosted, [(WorkerId, [ToWorker])], [(WorkerId, String)])
hostApply linked outs (Hosted machine st ws lost err) =
  let err' = case (err, [ e | Fail e <- outs ]) of
        (Nothing, e : _) -> Just e
        _ -> err
      live w = S.member w ws && not (M.member w lost) && linked w
      -- runs of messages to one worker (a session's outs come so: a
      -- worker's asks together), put in the workers' order by a stable
      -- sort, which takes the long ascending stretches the outs have (a
      -- call's start asks every worker in order) whole: a map built by
      -- an insert a run copied a path of thousands of workers each time
      perWorker = joinRuns (sortBy (comparing fst) [ run | run@(w, _) <- runsOf outs, live w ])
  in (Hosted machine st ws lost err', perWorker, [ (w, why) | DropPeer w why <- outs ])
  where
    runsOf (SendTo w m : rest) = let (more, rest') = sameWorker w rest in (w, m : more) : runsOf rest'
    runsOf (_ : rest) = runsOf rest
    runsOf [] = []
    sameWorker w (SendTo v m : rest) | v == w = let (more, rest') = sameWorker w rest in (m : more, rest')
    sameWorker _ rest = ([], rest)
    -- neighbouring runs to one worker joined, in order
    joinRuns ((w, ms) : rest) = let (same, rest') = span ((== w) . fst) rest
                                in (w, if null same then ms else ms ++ concatMap snd same) : joinRuns rest'
    joinRuns [] = []

-- | What a watcher is shown of the session.
hostView :: Hosted -> Maybe SessionView
hostView (Hosted machine st _ _ _) = machineView machine st

-- | Whether the session is over: done, failed, or left with no worker.
hostOver :: Hosted -> Bool
hostOver (Hosted machine st _ _ err) =
  -- a session whose workers are all lost is not over: a worker may join
  -- (a replacement) and take up its states; the master tells it when none
  -- is coming ('hostStarved'), and the machine then ends it
  maybe False (const True) err || machineDone machine st

-- | How the session ended, for its caller.
hostAnswer :: Hosted -> SessionOutcome
hostAnswer (Hosted _ st _ lost err) = SessionOutcome (SessionEnd st err (M.toList lost))

-- | The outcome when the session is cut short with this error.
hostAbort :: HerdError -> Hosted -> SessionOutcome
hostAbort e (Hosted _ st _ lost _) = SessionOutcome (SessionEnd st (Just e) (M.toList lost))

-- | Whether this worker is one of the session's live workers.
hostHas :: WorkerId -> Hosted -> Bool
hostHas w (Hosted _ _ ws lost _) = S.member w ws && not (M.member w lost)

-- | Whether the session claims this worker's answer ('machineClaims').
hostClaims :: WorkerId -> FromWorker -> Hosted -> Bool
hostClaims w msg (Hosted machine st _ _ _) = machineClaims machine w msg st

-- | The state a worker's evolve answer is about, if it names one.
answerState :: FromWorker -> Maybe Word64
answerState msg = case msg of
  StateEvolved s _ _ -> Just s
  EvolveThrew s _ -> Just s
  StateReleased s _ -> Just s
  StateKept s -> Just s
  StateMissing s -> Just s
  StateReplayed s -> Just s
  _ -> Nothing

-- | 'machineClaims' of a session that asks workers nothing about states.
claimsNothing :: WorkerId -> FromWorker -> st -> Bool
claimsNothing _ _ _ = False
