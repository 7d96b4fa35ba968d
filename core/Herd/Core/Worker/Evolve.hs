-- | The worker's side of the evolve API as a pure state machine: the states
-- a worker holds, the queue of evolutions the master asked for, and the
-- one in progress. The real holder ("Herd.Node.Worker.Evolve") runs it under
-- one 'Control.Concurrent.STM.TVar' with a thread that computes; the
-- simulated host ("Herd.Simulate.Host") runs the same machine from its
-- event loop, with a timer in place of the computation. Looking up
-- functions and applying them is the driver's part; every decision is
-- here.
--
-- Promises (checked by properties in "EvolveHeldSpec"): every
-- 'EvolveState' is answered once, by 'StateEvolved', 'EvolveThrew' or
-- 'StateMissing', or not at all when its state was given back or dropped
-- first (also while it was being evolved); every
-- 'StateRelease' by 'StateReleased', 'StateKept' or 'StateMissing'; every
-- 'StateReplay' by 'StateReplayed' or 'EvolveThrew'; 'StatesReset' by
-- 'StatesCleared', after the answer to the job in progress. A child's id
-- carries the worker's number in its high bits, so ids never collide
-- across workers.
module Herd.Core.Worker.Evolve
  ( Held
  , newHeld
  , Job (..)
  , jobState
  , Finished (..)
  , heldMessage
  , heldTake
  , heldFinish
  , heldBusy
  , heldStateCount
  ) where

import Data.Bits (shiftL, (.|.))
import qualified Data.ByteString as B
import qualified Data.Map.Strict as M
import qualified Data.Set as S
import Data.Sequence (Seq, ViewL (..), viewl, (|>))
import qualified Data.Sequence as Seq
import qualified Data.Text as T
import Data.Word (Word64)
import Herd.Core.Base (TaskRef)
import Herd.Core.Evolve.Registry (stateIdBits)
import Herd.Core.Wire (FromWorker (..), ToWorker (..))

-- | Work for the driver: evolve a held state (its id, its bytes, the input
-- and the function), or recompute a lost state from a root along its
-- lineage (each step's function, input and the child to keep).
data Job r
  = Evolve !Word64 !B.ByteString !B.ByteString r
  | Replay !Word64 !B.ByteString ![(TaskRef, B.ByteString, Int)]

-- | The state a job is about.
jobState :: Job r -> Word64
jobState (Evolve sid _ _ _) = sid
jobState (Replay sid _ _) = sid

-- | How a job went.
data Finished
  = Children !Word64 ![(B.ByteString, B.ByteString)]
    -- ^ evolved in this many nanoseconds into these children (state, output)
  | Replayed !B.ByteString      -- ^ recomputed: the state's bytes
  | Failed !T.Text              -- ^ the function threw, or its input did not decode

-- | One worker's evolve states. @r@ is the driver's evolve function.
data Held r = Held
  { hStates    :: !(M.Map Word64 B.ByteString)
  , hQueue     :: !(Seq (Word64, B.ByteString, r))  -- ^ evolutions asked for: state, input, function
  , hReplays   :: !(Seq (Job r))                     -- ^ recomputations asked for, before evolutions
  , hCurrent   :: !(Maybe Word64)                    -- ^ the state of the job in progress
  , hResetting :: !Int      -- ^ resets that came during the job in progress
  , hRunner    :: !(Maybe (Either String r))         -- ^ the function of this call
  , hDropped   :: !Bool     -- ^ the state of the job in progress was dropped meanwhile
  , hNext      :: !Word64   -- ^ the next child's number
  , hPrefix    :: !Word64   -- ^ the worker's number, in the high bits
  }

-- | Nothing held, for the worker with this number.
newHeld :: Word64 -> Held r
newHeld wid = Held M.empty Seq.empty Seq.empty Nothing 0 Nothing False 0 (wid `shiftL` stateIdBits)

-- | Whether a job is in progress.
heldBusy :: Held r -> Bool
heldBusy = maybe False (const True) . hCurrent

-- | How many states are held.
heldStateCount :: Held r -> Int
heldStateCount = M.size . hStates

-- | Take one evolve message from the master. 'EvolveWith' needs its
-- function found by the driver first (given as the second argument, for
-- that message only; 'Left' says why it cannot run here). Other messages
-- are ignored.
heldMessage :: ToWorker -> Maybe (Either String r) -> Held r -> (Held r, [FromWorker])
heldMessage msg found h = case msg of
  StatesReset ->
    let cleared = h { hStates = M.empty, hQueue = Seq.empty, hReplays = Seq.empty }
    in case hCurrent h of
         -- the job in progress is answered first, then the reset
         Just _ -> (cleared { hResetting = hResetting h + 1 }, [])
         Nothing -> (cleared, [StatesCleared])
  StateAdd sid bytes -> (h { hStates = M.insert sid bytes (hStates h) }, [])
  StatesDrop sids ->
    let gone = S.fromList sids
    in (h { hStates = M.withoutKeys (hStates h) gone, hQueue = Seq.filter (\(s, _, _) -> not (S.member s gone)) (hQueue h)
          , hDropped = hDropped h || maybe False (`S.member` gone) (hCurrent h) }, [])
  EvolveWith _ -> case found of
    Just runner -> (h { hRunner = Just runner }, either (\why -> [EvolveRejected (T.pack why)]) (const []) runner)
    Nothing -> (h, [EvolveRejected (T.pack "the evolve function was not looked up")])
  EvolveState sid input -> case hRunner h of
    Just (Right r)
      | M.member sid (hStates h) -> (h { hQueue = hQueue h |> (sid, input, r) }, [])
      | otherwise -> (h, [StateMissing sid])
    Just (Left _) -> (h, [])   -- refused already; the master gives up the call
    Nothing -> (h, [EvolveRejected (T.pack "an evolve request came before its function")])
  StateReplay sid root path ->
    (h { hReplays = hReplays h |> Replay sid root [ (ref, input, fromIntegral k) | (ref, input, k) <- path ] }, [])
  StateRelease sid
    | hCurrent h == Just sid -> (h, [StateKept sid])
    | Just bytes <- M.lookup sid (hStates h) ->
        ( h { hStates = M.delete sid (hStates h), hQueue = Seq.filter (\(s, _, _) -> s /= sid) (hQueue h) }
        , [StateReleased sid bytes] )
    | otherwise -> (h, [StateMissing sid])
  _ -> (h, [])

-- | The next job, if none is in progress and one is waiting: replays
-- first (an evolution may be waiting for the state they make), then
-- evolutions in the order asked. An evolution whose state is no longer
-- held is answered at once instead.
heldTake :: Held r -> Maybe (Either FromWorker (Job r), Held r)
heldTake h
  | heldBusy h = Nothing
  | job :< rest <- viewl (hReplays h) = Just (Right job, h { hReplays = rest, hCurrent = Just (jobState job) })
  | (sid, input, r) :< rest <- viewl (hQueue h) = Just $ case M.lookup sid (hStates h) of
      Just bytes -> (Right (Evolve sid bytes input r), h { hQueue = rest, hCurrent = Just sid })
      Nothing -> (Left (StateMissing sid), h { hQueue = rest })
  | otherwise = Nothing

-- | The job in progress ended this way: its answer (and a 'StatesCleared'
-- for each reset that came meanwhile; its children are then dropped).
heldFinish :: Finished -> Held r -> (Held r, [FromWorker])
heldFinish outcome h = case hCurrent h of
  Nothing -> (h, [])
  Just sid ->
    let done = h { hCurrent = Nothing, hResetting = 0, hDropped = False }
        cleared = replicate (hResetting h) StatesCleared
        keep f = if hResetting h > 0 then done else f done
    in case outcome of
         -- its state was dropped while it ran (its call was given up): nothing
         -- of it is kept or said, and a new state of the same id stays as it is
         _ | hDropped h -> (done, cleared)
         Failed why -> (done, EvolveThrew sid why : cleared)
         Replayed bytes -> (keep (\d -> d { hStates = M.insert sid bytes (hStates d) }), StateReplayed sid : cleared)
         Children ns children ->
           let ids = [ hPrefix h .|. n | n <- [hNext h ..] ]
               named = zip ids children
               h' = keep $ \d -> d { hStates = foldr (\(c, (s, _)) -> M.insert c s) (M.delete sid (hStates d)) named }
           in ( h' { hNext = hNext h + fromIntegral (length children) }
              , StateEvolved sid ns [ (c, o) | (c, (_, o)) <- named ] : cleared )
