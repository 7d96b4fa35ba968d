-- | The evolve population's sessions besides calls ("Herd.Master.Job.Evolve"):
-- running one and waiting for its end, and the uploads and releases that
-- let values be held and dropped one by one ("Herd.Master.Job.Refs"), beside the
-- states already there.
--
-- Promises: an upload registers exactly the states whose worker took
-- them; a release drops the states from the registry whatever the
-- workers answer (a worker lost meanwhile took them with it).
module Herd.Master.Job.Population
  ( session
  , quietMachine
  , addStatesRaw
  , releaseStatesRaw
  ) where

import Control.Concurrent.MVar
import Control.Exception
import qualified Data.ByteString as B
import Data.List (foldl')
import qualified Data.Map.Strict as M
import Data.Typeable (Typeable)
import Data.Word (Word64)
import Herd.Core.Error
import Herd.Core.Evolve.Registry (Origin (..), Placed (..), Registry (..), StateId (..))
import qualified Herd.Core.Evolve.StateMap as SM
import Herd.Core.Session
import Herd.Core.Wire
import Herd.Core.Base (WorkerId)
import Herd.Master
import Herd.Task (TaskRef)

-- | Run a session on the cluster and wait for its end; a session that
-- could not start, or failed, throws its error.
-- The function is the evolve function its requests to evolve need, if any.
session :: (Typeable st, Show st, Eq st)
        => Cluster -> String -> Maybe Int -> Maybe TaskRef -> ([WorkerId] -> Either HerdError (Machine st, st, [Out])) -> IO (SessionEnd st)
session cluster name limit function start = do
  answer <- newEmptyMVar
  -- a caller interrupted while waiting cancels its session
  outcome <- runSession cluster (SessionRequest name limit function start) (putMVar answer) (takeMVar answer) >>= either throwIO pure
  end <- maybe (throwIO (EvolveFailed name "" "the session ended with a state of another type")) pure (outcomeEnd outcome)
  maybe (pure end) throwIO (endError end)

-- | A session that only sends: done at once, deaf to every answer.
quietMachine :: Machine st
quietMachine = Machine (\_ _ _ p -> (p, [])) (\_ _ _ p -> (p, [])) (\_ _ p -> (p, [])) (\p -> (p, [])) (const True) (const Nothing) claimsNothing

-- | Upload encoded states into this population beside those the workers
-- hold (nothing is reset), spread round robin over the live workers (the
-- lowest numbered, up to the limit). Returns their ids, in order. Throws
-- 'NoWorkers' with no worker.
addStatesRaw :: MVar Registry -> Maybe Int -> Cluster -> [B.ByteString] -> IO [StateId]
addStatesRaw _ _ _ [] = pure []
addStatesRaw population limit cluster encoded =
  modifyMVar population $ \reg -> do
    let ids = [ StateId k | k <- [regNextId reg .. regNextId reg + fromIntegral (length encoded) - 1] ]
    placed <- session cluster "hold" limit Nothing $ \ws -> case ws of
      [] -> Left NoWorkers
      _ -> let placement = zip3 ids encoded (cycle ws)
           in Right ( quietMachine, placement, [ SendTo w (StateAdd k bytes) | (StateId k, bytes, w) <- placement ] )
    let placement = endState placed
        lost = M.fromList (endLost placed)
        kept = [ (i, bytes, w) | (i, bytes, w) <- placement, not (M.member w lost) ]
    -- a state whose worker was lost while it was sent is uploaded again
    -- by the caller's retry; here it is simply not registered
    pure ( reg { regStates = foldl' (\m (i, _, w) -> SM.insert i (Placed w 0) m) (regStates reg) kept
               , regOrigin = foldl' (\m (i, bytes, _) -> SM.insert i (Seen bytes) m) (regOrigin reg) kept
               , regNextId = regNextId reg + fromIntegral (length encoded) }
         , [ i | (i, _, _) <- kept ] )

-- | Drop these states from this population and from the workers holding
-- them (each gives its state back, and the bytes are discarded). States
-- not in the population are ignored.
releaseStatesRaw :: MVar Registry -> Cluster -> [StateId] -> IO ()
releaseStatesRaw population cluster sids = modifyMVar_ population $ \reg -> do
  let held = [ (sid, placedOn p) | sid <- sids, Just p <- [SM.lookup sid (regStates reg)] ]
      waiting = M.fromListWith (++) [ (w, [k]) | (StateId k, w) <- held ]
  if null held then pure reg else do
    _ <- try (session cluster "release" Nothing Nothing $ \ws ->
      let here = M.filterWithKey (\w _ -> w `elem` ws) waiting
      in Right (releaseMachine, here, [ SendTo w (StateRelease k) | (w, ks) <- M.toList here, k <- ks ]))
      :: IO (Either SomeException (SessionEnd (M.Map WorkerId [Word64])))
    pure reg { regStates = foldl' (flip SM.delete) (regStates reg) (map fst held) }
  where
    releaseMachine = Machine
      { machineMessage = \_ wid msg pending -> case msg of
          StateReleased k _ -> (answered wid k pending, [])
          StateKept k -> (answered wid k pending, [])
          StateMissing k -> (answered wid k pending, [])
          _ -> (pending, [])
      , machineLost = \_ wid _ pending -> (M.delete wid pending, [])
      , machineDone = M.null
      , machineClaims = \wid msg pending -> maybe False (\k -> k `elem` M.findWithDefault [] wid pending) (answerState msg)
      , machineJoined = \_ _ st -> (st, [])
      , machineStarved = \st -> (st, [])
      , machineView = const Nothing
      }
    answered wid k = M.update (\ks -> case filter (/= k) ks of { [] -> Nothing; rest -> Just rest }) wid
