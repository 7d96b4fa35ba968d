{-# LANGUAGE BangPatterns #-}
-- | The master's half of two-level evolve, pure: the master knows which
-- host holds each state, not which worker; a call is one 'HostEvolve' per
-- host, naming that host's states and their inputs, and the master's work
-- per state is to route its input and take its reported children
-- ('HostEvolved', a batch at a time). Each host agent schedules its own
-- workers ("Herd.Core.Agent.Evolve").
--
-- Promises (checked by @HostEvolveSpec@ with the agents' real machine and
-- the workers'): every state given an input is answered once or the call
-- fails naming why; a report about a state the host was not asked for, or
-- twice about one, ends the call; the call ends when every host has
-- ended its part or been lost; a lost host's unanswered states are named
-- ('hostCallUnanswered'), and 'rehome' gives every state of a lost host to
-- a live one with the lineage that makes it again (kept per call by
-- 'originsAfter'), so the caller can evolve them there.
module Herd.Core.Evolve.Hosts
  ( HostId
  , HostPlacement (..)
  , placementOf
  , placeOn
  , hostOf
  , HostCall
  , startHostCall
  , hostCallReport
  , hostCallLost
  , hostCallUnanswered
  , hostCallLosses
  , hostCallDone
  , hostCallOutputs
  , hostCallSummaries
  , placementAfter
  , originsAfter
  , Adoption (..)
  , rehome
  ) where

import qualified Data.ByteString as B
import Data.List (foldl')
import qualified Data.Map.Strict as M
import qualified Data.Text as T
import Data.Word (Word64)
import Herd.Core.Base (TaskRef)
import Herd.Core.Error (HerdError (..))
import Herd.Core.Evolve.Registry (Origin (..), Placed (..), lineage, pruneOrigins)
import Herd.Core.Evolve.StateMap (StateId (..), StateMap)
import qualified Herd.Core.Evolve.StateMap as SM
import Herd.Core.Wire.HostCall

-- | A host link's number at the master.
type HostId = Int

-- | Which host holds each live state: a hosted registry's states
-- ('Herd.Core.Evolve.Registry.regHosted'), 'placedOn' naming the host link.
newtype HostPlacement = HostPlacement { placementStates :: StateMap Placed }
  deriving (Eq, Show)

-- | States on these hosts.
placementOf :: [(StateId, HostId)] -> HostPlacement
placementOf xs = HostPlacement (SM.fromList [ (s, Placed (fromIntegral h) 0) | (s, h) <- xs ])

-- | These states are (now) on this host.
placeOn :: HostId -> [StateId] -> HostPlacement -> HostPlacement
placeOn h ss (HostPlacement m) = HostPlacement (foldl' (\acc s -> SM.insert s (Placed (fromIntegral h) 0) acc) m ss)

-- | The host of a state, if it is live.
hostOf :: HostPlacement -> StateId -> Maybe HostId
hostOf (HostPlacement m) s = fromIntegral . placedOn <$> SM.lookup s m

-- | One call in progress at the master.
data HostCall = HostCall
  { hcNumber   :: !Word64
  , hcName     :: !String
  , hcInputs   :: !(StateMap B.ByteString)               -- ^ the call's states and inputs
  , hcPlacement :: !HostPlacement                        -- ^ where they were at the start
  , hcLeft     :: !(M.Map HostId Int)                    -- ^ states each host has not reported yet
  , hcOutputs  :: !(StateMap [(StateId, B.ByteString)])  -- ^ reported: each state's children
  , hcMade     :: !(StateMap Placed)                     -- ^ children made, on their parents' hosts
  , hcRef      :: !TaskRef                             -- ^ the call's function, for the children's origins
  , hcOrigins  :: !(StateMap Origin)                     -- ^ the children's origins
    -- (the made and the origins grow as reports come, while the hosts
    -- still work, so that the end of a call has little left to do)
  , hcOpen     :: !(M.Map HostId ())                     -- ^ hosts whose part has not ended
  , hcSummaries :: ![(HostId, CallSummary)]
  , hcLost     :: !(M.Map HostId String)                 -- ^ hosts lost before ending their part, and why
  }

-- | Start a call: one message for each host holding some of the states.
-- 'Left': states no host holds.
startHostCall :: Word64 -> String -> TaskRef -> Int -> HostPlacement -> StateMap B.ByteString
              -> Either [StateId] (HostCall, [(HostId, HostCallMessage)])
startHostCall n name ref deaths placement inputs = case [ s | s <- SM.keys inputs, hostOf placement s == Nothing ] of
  unknown@(_ : _) -> Left unknown
  [] ->
    let byHost = M.fromListWith (++) [ (h, [(k, i)]) | (s@(StateId k), i) <- reverse (SM.toList inputs), Just h <- [hostOf placement s] ]
        call = HostCall n name inputs placement (M.map length byHost) SM.empty SM.empty ref SM.empty (M.map (const ()) byHost) [] M.empty
    in Right (call, [ (h, HostEvolve n ref (fromIntegral deaths) states) | (h, states) <- M.toList byHost ])

-- | A host's message about the call: 'Left' ends the call with an error.
hostCallReport :: HostId -> HostCallMessage -> HostCall -> Either HerdError HostCall
hostCallReport h msg call = case msg of
  HostEvolved n done | n == hcNumber call ->
    fmap (\c -> c { hcLeft = M.adjust (subtract (length done)) h (hcLeft c) }) (foldl' (\acc d -> acc >>= evolved d) (Right call) done)
  HostCallEnded n (Right summary) | n == hcNumber call -> case M.findWithDefault 0 h (hcLeft call) of
    0 -> Right call { hcOpen = M.delete h (hcOpen call), hcSummaries = (h, summary) : hcSummaries call }
    _ -> Left (StatesLost (map show (unreported h call)) ("host " ++ show h ++ " ended its part of the call without them"))
  HostCallEnded n (Left why) | n == hcNumber call ->
    Left (EvolveFailed (hcName call) ("the states of host " ++ show h) (T.unpack why))
  _ -> Right call   -- another call's: one that ended already
  where
    -- asked of this host (a state of the call on it) and not reported before
    evolved (k, kids) c
      | Just input <- SM.lookup s (hcInputs c), hostOf (hcPlacement c) s == Just h, not (SM.member s (hcOutputs c)) =
          let children = [ (StateId ck, o) | (ck, o) <- kids ]
              placed = Placed (fromIntegral h) 0
          in Right c { hcOutputs = SM.insert s children (hcOutputs c)
                     , hcMade = foldl' (\m (ch, _) -> SM.insert ch placed m) (hcMade c) children
                     , hcOrigins = foldl' (\m (j, (ch, _)) -> SM.insert ch (ChildOf s (hcRef c) input j) m) (hcOrigins c)
                                          (zip [0 ..] children) }
      | otherwise = Left (EvolveFailed (hcName c) (show s)
                            ("host " ++ show h ++ " reported it, which it was not asked to evolve or reported before"))
      where s = StateId k

-- The call's states on this host that it has not reported.
unreported :: HostId -> HostCall -> [StateId]
unreported h call = [ s | s <- SM.keys (hcInputs call), hostOf (hcPlacement call) s == Just h, not (SM.member s (hcOutputs call)) ]

-- | A host was lost: its part of the call is over, and the states it did
-- not report are unanswered ('hostCallUnanswered').
hostCallLost :: HostId -> String -> HostCall -> HostCall
hostCallLost h why call
  | not (M.member h (hcOpen call)) = call
  | otherwise = call { hcOpen = M.delete h (hcOpen call), hcLost = M.insert h why (hcLost call) }

-- | The states of the call that lost hosts did not report, with their
-- hosts: once rehomed, they are to be evolved again.
hostCallUnanswered :: HostCall -> [(StateId, HostId)]
hostCallUnanswered call = [ (s, h) | h <- M.keys (hcLost call), s <- unreported h call ]

-- | The hosts lost during the call, and why.
hostCallLosses :: HostCall -> [(HostId, String)]
hostCallLosses = M.toList . hcLost

-- | Whether every host has ended its part (then every state was reported).
hostCallDone :: HostCall -> Bool
hostCallDone = M.null . hcOpen

-- | Each evolved state's children, with their outputs.
hostCallOutputs :: HostCall -> StateMap [(StateId, B.ByteString)]
hostCallOutputs = hcOutputs

-- | What each host said of its part.
hostCallSummaries :: HostCall -> [(HostId, CallSummary)]
hostCallSummaries = hcSummaries

-- | Where the live states are after a finished call: the evolved states
-- are gone, their children are on their parents' hosts.
placementAfter :: HostCall -> HostPlacement -> HostPlacement
placementAfter call (HostPlacement m)
  -- every live state was evolved (a filter's every step): the children are all
  | SM.size (hcOutputs call) == SM.size m = HostPlacement (hcMade call)
  | otherwise = HostPlacement (SM.union (hcMade call) (SM.withoutKeys m (hcOutputs call)))

-- | The lineage a call adds: each reported child was made of its parent
-- by the call's function, with the parent's input (the same record a
-- one-level call keeps, "Herd.Core.Evolve.Call"), so that a lost host's
-- states can be made again elsewhere.
originsAfter :: HostCall -> StateMap Origin -> StateMap Origin
originsAfter call origins0 = SM.union (hcOrigins call) origins0

-- | What one live host is to take over from lost ones: the states, and
-- the origins of every state their lineages pass through.
data Adoption = Adoption
  { adoptHost    :: !HostId
  , adoptStates  :: ![StateId]
  , adoptOrigins :: ![(StateId, Origin)]
  } deriving (Eq, Show)

-- | Give the states of hosts that are not live to the live ones (with
-- their worker counts; each takes states in proportion, in turn), each
-- with the origins its lineages need. 'Left' names the states that cannot
-- be made again: no live host has a worker, or some ancestor's origin is
-- unknown.
rehome :: [(HostId, Int)] -> HostPlacement -> StateMap Origin -> Either HerdError (HostPlacement, [Adoption])
rehome live placement origins
  | null gone = Right (placement, [])
  | null slots = Left (StatesLost (map show gone) "their host was lost and no other host has a worker")
  | unknown@(_ : _) <- [ s | s <- gone, lineage origins s == Nothing ] =
      Left (StatesLost (map show unknown) "their host was lost and their lineage is not known")
  | otherwise = Right (foldl' (\p a -> placeOn (adoptHost a) (adoptStates a) p) placement adoptions, adoptions)
  where
    open = M.fromList [ (h, ()) | (h, _) <- live ]
    gone = [ s | (s, p) <- SM.toList (placementStates placement), not (M.member (fromIntegral (placedOn p)) open) ]
    slots = concat [ replicate c h | (h, c) <- live, c > 0 ]
    shares = M.map reverse (M.fromListWith (++) (zip (cycle slots) [ [s] | s <- gone ]))
    adoptions = [ Adoption h ss (SM.toList (pruneOrigins ss origins)) | (h, ss) <- M.toList shares ]
