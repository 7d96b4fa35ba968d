-- | The host's part of a population in two-level evolve
-- ("Herd.Core.Agent.Evolve" runs its calls), pure: where each of the
-- host's states lives among its workers and how to make it again, the
-- events and outputs of the host's machine, and the moves of states
-- between the master and the host (added, given back, put, adopted from
-- a lost host), each a transition of the population.
--
-- Promises (checked by @HostEvolveSpec@ with the calls): a state added or
-- put is held on a live worker of the host, or, with none, on no worker
-- until the next call remakes it from its bytes; a give answers the
-- master once, with every state a worker gave back, and a given-up give
-- holds those states again; each move ends with one 'HostCallEnded'.
module Herd.Core.Agent.Population
  ( HostPopulation (..)
  , Giving (..)
  , Running (..)
  , newHostPopulation
  , hostRegistry
  , hostWorkers
  , hostCallRunning
  , HostEvent (..)
  , HostOut (..)
  , addStates
  , giveStates
  , given
  , giveDone
  , keepGiven
  , putStates
  , placeStates
  , adoptStates
  , onNoWorker
  ) where

import qualified Data.ByteString as B
import Data.List (foldl')
import qualified Data.Map.Strict as M
import qualified Data.Set as S
import qualified Data.Text as T
import Data.Word (Word64)
import Herd.Core.Base (TaskRef (..), WorkerId)
import Herd.Core.Evolve.Call (Call)
import Herd.Core.Evolve.Registry
import qualified Herd.Core.Evolve.StateMap as SM
import Herd.Core.Wire (FromWorker (..), ToWorker (..))
import Herd.Core.Wire.HostCall

-- | The host's part of a population, and the call it runs, if any.
data HostPopulation = HostPopulation
  { hpRegistry :: !Registry
  , hpWorkers  :: !(S.Set WorkerId)   -- ^ the host's live workers
  , hpRunning  :: !(Maybe Running)
  , hpNextPut  :: !Int                -- ^ where the next added state goes (round robin)
  , hpGiving   :: !(Maybe Giving)     -- ^ states being given back to the master, if any
  }

-- | States being taken back from the workers, to be given to the master.
data Giving = Giving
  { gvNumber  :: !Word64
  , gvWaiting :: !(M.Map Word64 WorkerId)    -- ^ asked of this worker, not yet answered
  , gvGot     :: ![(Word64, B.ByteString)]   -- ^ given back, newest first
  }

-- | A call in progress.
data Running = Running
  { rnNumber :: !Word64
  , rnRef    :: !TaskRef
  , rnCall   :: !Call
  , rnFresh  :: ![StateId]   -- ^ evolved since the last report, newest first
  }

-- | A host with no states and no worker yet.
newHostPopulation :: HostPopulation
newHostPopulation = HostPopulation emptyRegistry S.empty Nothing 0 Nothing

-- | Where the host's states live and how to make them again.
hostRegistry :: HostPopulation -> Registry
hostRegistry = hpRegistry

-- | The host's live workers.
hostWorkers :: HostPopulation -> [WorkerId]
hostWorkers = S.toList . hpWorkers

-- | The number of the call running, if one is.
hostCallRunning :: HostPopulation -> Maybe Word64
hostCallRunning = fmap rnNumber . hpRunning

-- | What happens to the host's population (with the agent's clock, seconds).
data HostEvent
  = MasterSaid !HostCallMessage          -- ^ the master's part of a host call
  | LocalSaid !WorkerId !FromWorker      -- ^ a local worker's evolve answer
  | LocalJoined !WorkerId                -- ^ a local worker was numbered
  | LocalLost !WorkerId !String          -- ^ a local worker is gone, and why
  | RoundEnded                           -- ^ the driver's round is over: report what is new
  deriving (Eq, Show)

-- | What the driver is to do, in order.
data HostOut
  = ToLocal !WorkerId !ToWorker          -- ^ send this to a local worker
  | ToMasterCall !HostCallMessage        -- ^ send this to the master (slot 'hostCallSlot')
  | DropLocal !WorkerId !String          -- ^ this worker broke the protocol: end it
  deriving (Eq, Show)

-- | Keep states the master sends on the host's workers, round robin.
addStates :: Word64 -> [(Word64, B.ByteString)] -> HostPopulation -> (HostPopulation, [HostOut])
addStates n states hp
  | S.null (hpWorkers hp) = (hp, [ToMasterCall (HostCallEnded n (Left (T.pack "the host has no worker to hold the states")))])
  | otherwise =
      let ws = S.toList (hpWorkers hp)
          placed = zip states (drop (hpNextPut hp `mod` length ws) (cycle ws))
          old = hpRegistry hp
          -- the states held before go, and any a failed call left behind
          held = M.fromListWith (++) [ (placedOn p, [k]) | (StateId k, p) <- SM.toList (regStates old) ]
          abandoned = [ k | StateId k <- S.toList (regAbandoned old) ]
          reg' = emptyRegistry
            { regStates = SM.fromList [ (StateId k, Placed w 0) | ((k, _), w) <- placed ]
            , regOrigin = SM.fromList [ (StateId k, Seen bytes) | (k, bytes) <- states ]
            , regNextId = 1 + maximum (0 : map fst states) }
      in ( hp { hpRegistry = reg', hpNextPut = hpNextPut hp + length states }
         , [ ToLocal w (StatesDrop ks) | w <- ws, let ks = M.findWithDefault [] w held ++ abandoned, not (null ks) ]
           ++ [ ToLocal w (StateAdd k bytes) | ((k, bytes), w) <- placed ]
           ++ [ToMasterCall (HostCallEnded n (Right (CallSummary [] 0 0)))] )

-- | Take these states back from the workers holding them, for the master.
giveStates :: Word64 -> [Word64] -> HostPopulation -> (HostPopulation, [HostOut])
giveStates n ids hp
  | otherwise =
      let reg = hpRegistry hp
          asked = M.fromList [ (k, placedOn p) | k <- ids, Just p <- [SM.lookup (StateId k) (regStates reg)]
                                               , S.member (placedOn p) (hpWorkers hp) ]
          gv = Giving n asked []
      in if M.null asked then giveDone gv hp
         else (hp { hpGiving = Just gv }, [ ToLocal w (StateRelease k) | (k, w) <- M.toList asked ])

-- | A worker's answer about a state being given.
given :: Giving -> Word64 -> FromWorker -> HostPopulation -> (HostPopulation, [HostOut])
given gv k msg hp =
  let reg = hpRegistry hp
      (gv', reg') = case msg of
        StateReleased _ bytes -> ( gv { gvWaiting = M.delete k (gvWaiting gv), gvGot = (k, bytes) : gvGot gv }
                                 , reg { regStates = SM.delete (StateId k) (regStates reg) } )
        -- kept (being evolved) or missing: not given, it stays here
        _ -> (gv { gvWaiting = M.delete k (gvWaiting gv) }, reg)
  in giveDone gv' hp { hpRegistry = reg', hpGiving = Just gv' }

-- | A give whose every state was answered goes to the master.
giveDone :: Giving -> HostPopulation -> (HostPopulation, [HostOut])
giveDone gv hp
  | not (M.null (gvWaiting gv)) = (hp, [])
  | otherwise = ( hp { hpGiving = Nothing }
                , [ ToMasterCall (HostStatesGiven (gvNumber gv) (reverse (gvGot gv)))
                  , ToMasterCall (HostCallEnded (gvNumber gv) (Right (CallSummary [] 0 0))) ] )

-- | A give given up: the states that came back are held again, and the
-- master hears that it ended.
keepGiven :: Giving -> HostPopulation -> (HostPopulation, [HostOut])
keepGiven gv hp =
  let (hp', outs) = placeStates (gvGot gv) hp { hpGiving = Nothing }
  in (hp', outs ++ [ToMasterCall (HostCallEnded (gvNumber gv) (Left (T.pack "given up: the master sent another message")))])

-- | Hold these states too, round robin over the workers.
putStates :: Word64 -> [(Word64, B.ByteString)] -> HostPopulation -> (HostPopulation, [HostOut])
putStates n states hp
  | S.null (hpWorkers hp) = (hp, [ToMasterCall (HostCallEnded n (Left (T.pack "the host has no worker to hold the states")))])
  | otherwise = let (hp', outs) = placeStates states hp
                in (hp', outs ++ [ToMasterCall (HostCallEnded n (Right (CallSummary [] 0 0)))])

-- | Place states on the live workers, round robin, their bytes their origin.
placeStates :: [(Word64, B.ByteString)] -> HostPopulation -> (HostPopulation, [HostOut])
placeStates [] hp = (hp, [])
placeStates states hp
  | S.null (hpWorkers hp) =
      -- no worker: placed on none, remade from their bytes at the next call
      (hp { hpRegistry = record [ (k, b, onNoWorker) | (k, b) <- states ] }, [])
  | otherwise =
      let ws = S.toList (hpWorkers hp)
          placed = [ (k, b, w) | ((k, b), w) <- zip states (drop (hpNextPut hp `mod` length ws) (cycle ws)) ]
      in ( hp { hpRegistry = record placed, hpNextPut = hpNextPut hp + length states }
         , [ ToLocal w (StateAdd k b) | (k, b, w) <- placed ] )
  where
    reg = hpRegistry hp
    record placed = reg
      { regStates = foldl' (\m (k, _, w) -> SM.insert (StateId k) (Placed w 0) m) (regStates reg) placed
      , regOrigin = foldl' (\m (k, b, _) -> SM.insert (StateId k) (Seen b) m) (regOrigin reg) placed }

-- | Take over states of a lost host: placed on no worker, so that the next
-- call recomputes them from their lineage first, as it does a lost local
-- worker's ("Herd.Core.Evolve.Start").
adoptStates :: Word64 -> [(Word64, Origin)] -> [Word64] -> HostPopulation -> (HostPopulation, [HostOut])
adoptStates n origins ids hp
  | otherwise =
      let reg = hpRegistry hp
          reg' = reg { regStates = foldl' (\m k -> SM.insert (StateId k) (Placed onNoWorker 0) m) (regStates reg) ids
                     , regOrigin = foldl' (\m (k, o) -> SM.insert (StateId k) o m) (regOrigin reg) origins
                     , regAbandoned = foldl' (flip S.delete) (regAbandoned reg) (map StateId ids) }
      in (hp { hpRegistry = reg' }, [ToMasterCall (HostCallEnded n (Right (CallSummary [] 0 0)))])

-- | Where an adopted state is until a call remakes it: no worker's number.
onNoWorker :: WorkerId
onNoWorker = -1
