-- | @herd bench evolvecore@: the master's core alone on evolve calls, with
-- no socket, no process and no clock but a simulated one. Simulated
-- workers answer the core's messages after a fixed delay and take a fixed
-- time per step; the core ("Herd.Core.Master") and the call's two ends
-- ("Herd.Core.Evolve.Start") are the ones a real master runs. What is timed is
-- the core's own work: each event's step, forced, with the collections it
-- causes. So a row says what one state costs the master's CPU, without
-- the kernel, at each worker count: the particle-filter seed asks for a
-- master whose cost per event does not grow with the workers.
--
-- Promises: every state of every call is evolved once (the bench fails
-- otherwise); the simulated times are exact, so @sim_efficiency@ (the
-- plan's own efficiency with a master that costs nothing) is the same on
-- every run.
module Bench.EvolveCore
  ( Options (..)
  , run
  ) where

import Control.Exception (evaluate)
import Control.Monad (foldM, forM, forM_, unless, when)
import Data.List (maximumBy, minimumBy)
import Data.Ord (comparing)
import qualified Data.ByteString as B
import Data.Bits (shiftL, (.|.))
import qualified Data.IntMap.Strict as IM
import qualified Data.Map.Strict as M
import qualified Data.Sequence as Seq
import qualified Data.Set as S
import Data.Word (Word64)
import GHC.Clock (getMonotonicTimeNSec)
import System.Exit (die)
import System.IO
import System.Mem (getAllocationCounter, performMajorGC)
import Herd.Core.Evolve.Call (Call (..), callMachine)
import Herd.Task.Evolver (evolverRef)
import Herd.Core.Evolve.Registry (Origin (..), Registry (..), emptyRegistry, placedAt, stateIdBits)
import Herd.Core.Evolve.Start (CallStart (..), estimateFrom, registryAfter, startCall)
import Herd.Core.Evolve.StateMap (StateId (..))
import qualified Herd.Core.Evolve.StateMap as SM
import Herd.Examples.ParticleFilter (particleStep)
import Herd.Core.Master (Core, emptyCore, step)
import Herd.Core.Master.Events (Command (..), Event (..))
import Herd.Core.Session (SessionEnd (..), SessionOutcome, SessionRequest (..), outcomeEnd)
import Herd.Core.Error (HerdError)
import Herd.Core.Fault (renderFault)
import Herd.Core.Report
import Herd.Core.Wire (FromWorker (..), ToWorker (..))

-- | Benchmark settings.
data Options = Options
  { optWorkers    :: [Int]
  , optStates     :: Int
  , optSteps      :: Int
  , optCost       :: Double  -- ^ simulated seconds of one state's step
  , optDelay      :: Double  -- ^ simulated seconds a message takes either way
  , optChildBytes :: Int     -- ^ bytes of each state's one child's output
  , optJson       :: Bool
  }

data Row = Row
  { rowWorkers  :: !Int
  , rowEvolved  :: !Int
  , rowEvents   :: !Int
  , rowSeconds  :: !Double   -- ^ the core's time, summed over its steps
  , rowBytes    :: !Int      -- ^ bytes the core allocated in its steps
  , rowSimulated :: !Double  -- ^ simulated seconds of all calls
  , rowIdeal    :: !Double
  , rowMoved    :: !Int
  , rowCalls    :: !Int
  , rowStartSeconds :: !Double  -- ^ the core's time on the calls' starts (part of 'rowSeconds')
  , rowStartBytes   :: !Int     -- ^ and its allocation there
  }

-- | Run the benchmark: table and JSON line.
run :: Options -> IO ()
run o = do
  hSetBuffering stdout LineBuffering
  -- one untimed run first: the first timed call otherwise paid for the
  -- code's and the heap's first touch (the first start took 3-5 times
  -- as long as the next two)
  _ <- measure o { optSteps = 1 } (minimum (optWorkers o))
  rows <- forM (optWorkers o) $ \w -> do
    performMajorGC
    row <- measure o w
    hPutStrLn stderr ("  " ++ show w ++ " workers: " ++ fixed 2 (perState rowSeconds row * 1e6) ++ " us and "
                      ++ show (round (perState (fromIntegral . rowBytes) row) :: Int) ++ " B per state")
    pure row
  let us r = perState rowSeconds r * 1e6
      fewest = minimumBy (comparing rowWorkers) rows
      most = maximumBy (comparing rowWorkers) rows
      growth = us most / max 1e-9 (us fewest)
  putStr $ renderTable ["workers", "states evolved", "core events", "core s", "core us/state", "core B/state"
                       , "start ms/call", "start B/state", "simulated s", "ideal s", "sim efficiency", "moved"]
    [ [ show (rowWorkers r), show (rowEvolved r), show (rowEvents r), fixed 3 (rowSeconds r), fixed 2 (us r)
      , show (round (perState (fromIntegral . rowBytes) r) :: Int), fixed 2 (startMs r)
      , show (round (perState (fromIntegral . rowStartBytes) r) :: Int), fixed 3 (rowSimulated r), fixed 3 (rowIdeal r)
      , fixed 3 (rowIdeal r / rowSimulated r), show (rowMoved r) ]
    | r <- rows ]
  putStrLn ("core cost per state at " ++ show (rowWorkers most) ++ " workers / at "
            ++ show (rowWorkers fewest) ++ ": " ++ fixed 2 growth)
  when (optJson o) $ putStrLn $ renderJson $ JObject
    [ ("bench", JString "evolvecore")
    , ("rows", JArray [ JObject
        [ ("workers", JInt (fromIntegral (rowWorkers r))), ("states_evolved", JInt (fromIntegral (rowEvolved r)))
        , ("core_events", JInt (fromIntegral (rowEvents r))), ("core_s", JNumber (rowSeconds r))
        , ("core_us_per_state", JNumber (us r)), ("core_bytes_per_state", JNumber (perState (fromIntegral . rowBytes) r))
        , ("start_ms", JNumber (startMs r)), ("start_bytes_per_state", JNumber (perState (fromIntegral . rowStartBytes) r))
        , ("simulated_s", JNumber (rowSimulated r)), ("ideal_s", JNumber (rowIdeal r))
        , ("sim_efficiency", JNumber (rowIdeal r / rowSimulated r)), ("moved", JInt (fromIntegral (rowMoved r))) ]
      | r <- rows ])
    , ("growth", JNumber growth) ]
  where
    perState :: (Row -> Double) -> Row -> Double
    perState f r = f r / fromIntegral (max 1 (rowEvolved r))
    -- the core's time on one call's start: the plan made, every worker's
    -- first asks decided (the part of a call no worker computes in)
    startMs r = rowStartSeconds r * 1e3 / fromIntegral (max 1 (rowCalls r))

-- What a simulated worker holds: the states it was asked to evolve, in
-- order (the first is running when it is busy), the states it holds
-- without being asked, and its next child number.
data Worker = Worker
  { wQueue :: !(Seq.Seq Word64)
  , wHeld  :: !(S.Set Word64)
  , wBusy  :: !Bool
  , wNext  :: !Word64
  }

-- What happens next in simulated time.
data SimEvent
  = Arrive !Int !FromWorker   -- ^ a worker's message reaches the master
  | Deliver !Int !ToWorker    -- ^ a master's message reaches a worker
  | Finish !Int               -- ^ a worker finishes the state it runs

data Sim = Sim
  { simCore    :: !Core
  , simWorkers :: !(IM.IntMap Worker)
  , simQueue   :: !(M.Map (Double, Int) SimEvent)
  , simSeq     :: !Int
  , simEvents  :: !Int
  , simNanos   :: !Word64
  , simBytes   :: !Int
  , simStartNanos :: !Word64  -- ^ of 'simNanos', on calls' starts
  , simStartBytes :: !Int
  , simEnded   :: !(Maybe (Either HerdError SessionOutcome))  -- ^ the call's answer, once the core gave it
  }

-- One worker count: every call of the run, the core's cost summed.
measure :: Options -> Int -> IO Row
measure o nWorkers = do
  let ref = evolverRef particleStep
      input = B.replicate 16 7
      child = B.replicate (optChildBytes o) 3
      states = [ StateId (fromIntegral i) | i <- [1 .. optStates o] ]
      reg0 = emptyRegistry
        { regStates = placedAt [ (s, 1 + i `mod` nWorkers) | (i, s) <- zip [0 ..] states ]
        , regOrigin = SM.fromList [ (s, Seen input) | s <- states ]
        , regNextId = fromIntegral (optStates o) + 1 }
      workers0 = IM.fromList [ (w, Worker Seq.empty S.empty False 0) | w <- [1 .. nWorkers] ]
  -- links come up before anything is timed
  sim0 <- foldM (\s w -> coreStep o 0 (LinkUp w) s) (Sim emptyCore workers0 M.empty 0 0 0 0 0 0 Nothing) [1 .. nWorkers]
  let zeroed = sim0 { simEvents = 0, simNanos = 0, simBytes = 0, simStartNanos = 0, simStartBytes = 0 }
      oneCall (sim, reg, now, evolved, moved, k) = do
        let live = SM.keys (regStates reg)
            start = CallStart
              { startRef = ref, startRegistry = reg, startStates = live
              , startInputs = SM.fromList [ (s, input) | s <- live ]
              , startEstimate = estimateFrom reg
              , startLead = 0.1, startMaxDeaths = 3, startTime = now }
            request = SessionRequest "evolvecore" Nothing (Just ref)
              (\ws -> (\(call, outs) -> (callMachine "evolvecore", call, outs)) <$> startCall start ws)
        (sim1, finished) <- driveCall o child now =<< coreStep o now (SessionStart k request) sim { simEnded = Nothing }
        case fmap (fmap outcomeEnd) (simEnded sim1) of
          Just (Right (Just end)) | Nothing <- endError end -> do
            let call = endState end
            unless (SM.size (callOutputs call) == length live) $
              die ("evolvecore: " ++ show (SM.size (callOutputs call)) ++ " of " ++ show (length live) ++ " states evolved")
            pure (sim1, registryAfter ref call reg, finished, evolved + length live, moved + callMoved call, k + 1)
          Just (Right (Just end)) -> die ("evolvecore: the call failed: " ++ show (endError (end :: SessionEnd Call)))
          Just (Right Nothing) -> die "evolvecore: the call ended with a state of another type"
          Just (Left e) -> die ("evolvecore: the call did not start: " ++ show e)
          Nothing -> die "evolvecore: the call never ended"
  (simN, _, simulated, evolved, moved, _) <- foldM (\acc _ -> oneCall acc) (zeroed, reg0, 0, 0, 0, 1) [1 .. optSteps o]
  pure Row { rowWorkers = nWorkers, rowEvolved = evolved, rowEvents = simEvents simN
           , rowSeconds = fromIntegral (simNanos simN) / 1e9, rowBytes = simBytes simN
           , rowSimulated = simulated
           , rowIdeal = fromIntegral evolved * optCost o / fromIntegral nWorkers, rowMoved = moved
           , rowCalls = optSteps o, rowStartSeconds = fromIntegral (simStartNanos simN) / 1e9
           , rowStartBytes = simStartBytes simN }

-- Run simulated events until the call's answer is in, returning the
-- simulation and the simulated time it ended at.
driveCall :: Options -> B.ByteString -> Double -> Sim -> IO (Sim, Double)
driveCall o child = go
  where
    go lastT sim =
      case (simEnded sim, M.minViewWithKey (simQueue sim)) of
        (Just _, _) -> pure (sim, lastT)
        (Nothing, Nothing) -> die "evolvecore: nothing left to happen, and the call has not ended"
        (Nothing, Just (((t, _), ev), rest)) -> do
          let sim' = sim { simQueue = rest }
          next <- case ev of
            Arrive w msg -> coreStep o t (Received w msg) sim'
            Deliver w msg -> pure (atWorker o t w msg sim')
            Finish w -> pure (finish o child t w sim')
          go t next

-- One forced step of the core, timed, its commands carried out.
coreStep :: Options -> Double -> Event -> Sim -> IO Sim
coreStep o now ev sim = do
  a0 <- getAllocationCounter
  t0 <- getMonotonicTimeNSec
  let (core', cmds) = step now ev (simCore sim)
  _ <- evaluate core'
  forM_ cmds $ \c -> evaluate c
  t1 <- getMonotonicTimeNSec
  a1 <- getAllocationCounter
  let starting = case ev of { SessionStart {} -> True; _ -> False }
      timed = sim { simCore = core', simEvents = simEvents sim + 1, simNanos = simNanos sim + (t1 - t0)
                  , simBytes = simBytes sim + fromIntegral (a0 - a1)
                  , simStartNanos = simStartNanos sim + (if starting then t1 - t0 else 0)
                  , simStartBytes = simStartBytes sim + (if starting then fromIntegral (a0 - a1) else 0) }
  foldM (command o now) timed cmds

-- Carry out one command of the core.
command :: Options -> Double -> Sim -> Command -> IO Sim
command o now sim c = case c of
  Send w _ m -> pure (sendAt (now + optDelay o) (Deliver w m) sim)
  SendAll w ms -> pure (foldl (\s m -> sendAt (now + optDelay o) (Deliver w m) s) sim ms)
  SessionEnded _ outcome -> pure sim { simEnded = Just outcome }
  Drop w why -> die ("evolvecore: the core dropped worker " ++ show w ++ ": " ++ renderFault why)
  _ -> pure sim

-- A master's message reaches a worker.
atWorker :: Options -> Double -> Int -> ToWorker -> Sim -> Sim
atWorker o t w msg sim = case msg of
  EvolveState k _ -> startIfIdle o t w (withWorker w (\x -> x { wQueue = wQueue x Seq.|> k, wHeld = S.delete k (wHeld x) }) sim)
  StateAdd k _ -> withWorker w (\x -> x { wHeld = S.insert k (wHeld x) }) sim
  StateRelease k ->
    let x = simWorkers sim IM.! w
        running = wBusy x && Seq.lookup 0 (wQueue x) == Just k
        queuedAt = Seq.elemIndexL k (wQueue x)
    in case () of
         _ | running -> reply (StateKept k) sim
           | Just i <- queuedAt -> reply (StateReleased k B.empty) (withWorker w (\y -> y { wQueue = Seq.deleteAt i (wQueue y) }) sim)
           | S.member k (wHeld x) -> reply (StateReleased k B.empty) (withWorker w (\y -> y { wHeld = S.delete k (wHeld y) }) sim)
           | otherwise -> reply (StateMissing k) sim
  _ -> sim
  where
    reply m = sendAt (t + optDelay o) (Arrive w m)

-- A worker finishes the state it runs: its answer leaves, the next starts.
finish :: Options -> B.ByteString -> Double -> Int -> Sim -> Sim
finish o child t w sim = case Seq.viewl (wQueue x) of
  k Seq.:< rest ->
    let kid = (fromIntegral w `shiftL` stateIdBits) .|. wNext x
        answer = StateEvolved k (round (optCost o * 1e9)) [(kid, child)]
        sim1 = sendAt (t + optDelay o) (Arrive w answer)
                 (withWorker w (\y -> y { wQueue = rest, wBusy = False, wNext = wNext y + 1 }) sim)
    in startIfIdle o t w sim1
  Seq.EmptyL -> sim
  where x = simWorkers sim IM.! w

startIfIdle :: Options -> Double -> Int -> Sim -> Sim
startIfIdle o t w sim
  | not (wBusy x), not (Seq.null (wQueue x)) = sendAt (t + optCost o) (Finish w) (withWorker w (\y -> y { wBusy = True }) sim)
  | otherwise = sim
  where x = simWorkers sim IM.! w

-- Queue an event at this simulated time (after those already queued for it).
sendAt :: Double -> SimEvent -> Sim -> Sim
sendAt at ev sim = sim { simQueue = M.insert (at, simSeq sim) ev (simQueue sim), simSeq = simSeq sim + 1 }

withWorker :: Int -> (Worker -> Worker) -> Sim -> Sim
withWorker w f sim = sim { simWorkers = IM.adjust f w (simWorkers sim) }
