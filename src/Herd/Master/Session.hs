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
module Herd.Master.Session
  ( Machine (..)
  , Out (..)
  , SessionEnd (..)
  , SessionRequest (..)
  , isEvolveMessage
  ) where

import Herd.Error (HerdError)
import Herd.Scheduler (WorkerId)
import Herd.Wire (FromWorker (..), ToWorker)

-- | A session's logic: pure functions of its state.
data Machine st = Machine
  { machineMessage :: WorkerId -> FromWorker -> st -> (st, [Out])
  , machineLost    :: WorkerId -> String -> st -> (st, [Out])
  , machineDone    :: st -> Bool
  }

-- | What a session asks the core to do.
data Out
  = SendTo !WorkerId !ToWorker    -- ^ send a message (the last one to each worker of a step is urgent)
  | Fail !HerdError               -- ^ end the session with this error
  | DropPeer !WorkerId !String    -- ^ the worker broke the protocol: close its link

-- | How a session ended: its final state, its error if it failed, and the
-- workers lost during it (with why).
data SessionEnd st = SessionEnd
  { endState :: !st
  , endError :: !(Maybe HerdError)
  , endLost  :: ![(WorkerId, String)]
  }

-- | A caller's request for a session: how many workers it may use (the
-- lowest numbered; 'Nothing': all), how to start it given those workers
-- (or why it cannot start), and how to answer the caller. The answer is
-- the only part the core cannot look into; it runs once, in the driver.
data SessionRequest = forall st. SessionRequest
  { requestLimit  :: !(Maybe Int)
  , requestStart  :: [WorkerId] -> Either HerdError (Machine st, st, [Out])
  , requestAnswer :: Either HerdError (SessionEnd st) -> IO ()
  }

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
