{-# LANGUAGE ScopedTypeVariables #-}
{-# LANGUAGE RankNTypes #-}
-- | The stateful evolve API of FP Complete's distributed particle filter.
--
-- States live on the workers, behind 'StateId's. 'resetStates' uploads a
-- population, spread evenly; each 'evolveMany' applies a step to the
-- states it is given inputs for and returns, for each, its children's new
-- ids and outputs. Only outputs come back to the master; a state crosses
-- the network again only when it moves to an idle worker.
--
-- > step :: Particle -> Obs -> [(Particle, Weight)]
-- > stepFn :: StaticPtr (Evolver Particle Obs Weight)
-- > stepFn = static (evolver step)       -- top level, not in Main
-- >
-- > ids  <- resetStates cluster stepFn particles
-- > outs <- evolveMany cluster stepFn (M.fromList [ (i, obs) | i <- ids ])
--
-- Scheduling is "Herd.Core.Evolve.Schedule" (pure); each call is a session of
-- the master's core ("Herd.Core.Master"), beside farm jobs and streams,
-- driven by the cluster's loop ('configMasterLoop'): one thread per worker
-- or one thread over epoll.
--
-- Promises: every state given an input is evolved exactly once per call;
-- an unknown 'StateId' is refused before anything runs ('UnknownStates');
-- a call never hangs: a lost worker ends it with 'StatesLost' naming the
-- states that were on it, and a throwing step with 'EvolveFailed'. After
-- either, the states the call was given are gone (asking for them again
-- is refused with 'UnknownStates'), and so are those whose worker left;
-- the others stay where they are, unchanged, as do states not given an
-- input in a call that succeeds.
module Herd.Master.Job.Evolve
  ( -- * Evolve functions
    Evolve
  , Evolver
  , evolver
  , StateId
  , stateIdWord
  , stateCluster
    -- * Calls
  , resetStates
  , evolveMany
  , EvolveOptions (..)
  , defaultEvolveOptions
  , resetStatesWith
  , evolveManyWith
  , EvolveStats (..)
  , populationSize
    -- * For values held on the workers ("Herd.Master.Job.Refs")
  , evolveRaw
  ) where

import Herd.Sys.Trace (markHerd)
import Control.Concurrent.MVar
import Control.Exception
import Control.Monad (forM, unless)
import qualified Data.Map.Strict as M
import qualified Data.ByteString as B
import GHC.StaticPtr (StaticPtr)
import Herd.Sys.Clock (monotonicSeconds)
import Herd.Settings
import Herd.Core.Error
import Herd.Task.Evolver
import Herd.Master.Job.Population (quietMachine, session)
import Herd.Core.Evolve.Call
import Herd.Core.Evolve.Start (CallStart (..), estimateFrom, registryAfter, startCall)
import Herd.Core.Evolve.Registry (Placed (..), placedAt)
import Herd.Core.Evolve.Checkpoint (applyCheckpoint, checkpointStart, deepStates)
import Herd.Core.Evolve.Schedule hiding (StateId, stateIdWord)
import qualified Herd.Core.Evolve.StateMap as SM
import qualified Data.Set as S
import Herd.Master
import Herd.Core.Session
import Herd.Wire.Writer (Encoder, encoderBytes)
import Herd.Task (TaskRef (..), tryUser)
import Herd.Core.Wire
import Data.Word (Word64)
import Herd.Master.Cluster (clusterTag, describeTag)
import Herd.Master.Job.HostEvolve (HostedOutcome (..), Traffic (..), hostScheduled, hostedEvolve, hostedReset)
import Herd.Core.Wire.HostCall (CallSummary (..))

-- | A state held by one of a cluster's workers, as 'resetStates' and
-- 'evolveMany' name it. It carries its cluster's tag: given to another
-- cluster, it is refused ('ForeignHandle') before anything runs.
data StateId = StateId
  { stateCluster :: !Word64      -- ^ the tag of the cluster that holds it
  , stateKey     :: !SM.StateId  -- ^ its id among that cluster's states
  } deriving (Eq, Ord)

instance Show StateId where
  show = show . stateKey

-- | The state's id as a number, unique among its cluster's states.
stateIdWord :: StateId -> Word64
stateIdWord = SM.stateIdWord . stateKey

-- This cluster's handle for one of its states.
stateOf :: Cluster -> SM.StateId -> StateId
stateOf cluster = StateId (clusterTag cluster)

-- The cluster's own ids of these handles, or 'ForeignHandle' naming the
-- first handle of another cluster.
ownStates :: Cluster -> M.Map StateId a -> IO (M.Map SM.StateId a)
ownStates cluster m = case [ sid | sid <- M.keys m, stateCluster sid /= clusterTag cluster ] of
  [] -> pure (M.mapKeysMonotonic stateKey m)
  sid : _ -> throwIO (ForeignHandle ("state " ++ show sid) (describeTag (stateCluster sid)) (describeTag (clusterTag cluster)))

-- | Per-call choices.
data EvolveOptions = EvolveOptions
  { evolveLoop       :: !(Maybe MasterLoop)
    -- ^ the master loop the caller expects; every call runs on the
    -- cluster's one loop ('configMasterLoop'), and one that names another
    -- throws 'ConfigError' before anything runs. 'Nothing': whichever it is
  , evolveWorkerLimit :: !(Maybe Int)
    -- ^ use only this many workers (the lowest numbered); for scaling
    -- measurements on one cluster
  , evolveCostHints  :: !(M.Map StateId Double)
    -- ^ expected seconds of some states' next step; measured times are
    -- used where no hint is given
  , evolveLead       :: !Double
    -- ^ seconds of work kept queued at each worker beyond the running
    -- state, to hide the round trip to the master
  , evolveCheckpointSteps :: !Int
    -- ^ after a call, states whose recovery would replay this many steps
    -- or more are checkpointed: their bytes pass through the master once
    -- ("Herd.Core.Evolve.Checkpoint"), so a lost worker's states are recomputed
    -- from there. 0: never (recovery replays every step since upload)
  } deriving (Show)

-- | The cluster's loop, every worker, no hints, 100 ms of lead,
-- checkpoints every 16 steps.
defaultEvolveOptions :: EvolveOptions
defaultEvolveOptions = EvolveOptions Nothing Nothing M.empty 0.1 16

-- | What one call measured.
data EvolveStats = EvolveStats
  { esSeconds  :: !Double                 -- ^ wall-clock time of the call
  , esWorkers  :: !Int                    -- ^ workers that took part
  , esEvolved  :: !Int                    -- ^ states evolved
  , esChildren :: !Int                    -- ^ states made
  , esMoved    :: !Int                    -- ^ states moved to another worker
  , esBusy     :: !(M.Map WorkerId Double) -- ^ seconds each worker spent in the step function
  , esLoop     :: !MasterLoop             -- ^ the loop that ran the call
  , esRecovered :: !Int                    -- ^ states recomputed after their worker was lost
  , esHostMessages :: !Int
    -- ^ two-level calls: the messages the master sent the hosts (one per
    -- host and round, one per adoption; never one per state); 0 otherwise
  , esRehomed  :: !Int                    -- ^ two-level calls: states of lost hosts given to other hosts
  , esHostMoved :: !Int                   -- ^ two-level calls: states moved between live hosts
  } deriving (Show)

-- | The number of states the cluster holds now: its evolve states and its Refs.
populationSize :: Cluster -> IO Int
populationSize c = do
  states <- SM.size . regStates <$> readMVar (clusterRegistry c)
  refs <- SM.size . regStates <$> readMVar (clusterRefRegistry c)
  pure (states + refs)

-- | 'resetStatesWith' with the default options.
resetStates :: Cluster -> StaticPtr (Evolver s i o) -> [s] -> IO [StateId]
resetStates = resetStatesWith defaultEvolveOptions

-- | 'evolveManyWith' with the default options, without the statistics.
evolveMany :: Cluster -> StaticPtr (Evolver s i o) -> M.Map StateId i -> IO (M.Map StateId [(StateId, o)])
evolveMany c f inputs = fst <$> evolveManyWith defaultEvolveOptions c f inputs

-- | Drop every state the workers hold and upload these, spread evenly
-- (round robin over the workers in order). Returns their ids, in order.
-- Throws 'NoWorkers' with no worker, and 'ArgumentError' if a state throws
-- when encoded (before anything is sent).
resetStatesWith :: EvolveOptions -> Cluster -> StaticPtr (Evolver s i o) -> [s] -> IO [StateId]
resetStatesWith opts cluster fn states = map (stateOf cluster) <$> resetCore opts cluster fn states

resetCore :: EvolveOptions -> Cluster -> StaticPtr (Evolver s i o) -> [s] -> IO [SM.StateId]
resetCore opts cluster fn states = do
  encoded <- forM (zip [0 :: Int ..] states) $ \(k, s) -> do
    r <- tryUser (evaluate (evolverStateEncoder fn s) >>= encoderBytes)
    either (throwIO . ArgumentError k (refName (evolverRef fn))) pure r
  checkLoop opts cluster
  hosted <- hostScheduled cluster
  if hosted
    -- each host replaces its share of the population ("Herd.Master.Job.HostEvolve")
    then modifyMVar (clusterRegistry cluster) $ \_ -> do
      reg <- hostedReset cluster encoded
      pure (reg, SM.keys (regStates reg))
    else modifyMVar (clusterRegistry cluster) $ \old -> do
    -- this population's states go: each worker drops those it holds, and
    -- any a failed call left behind; the Refs' population stays. Then the
    -- new states go out, round robin over the workers; naming the
    -- function now lets each worker look it up and start its evolve
    -- thread before the first call
    let ids = [ SM.StateId k | k <- [1 .. fromIntegral (length encoded)] ]
        held = M.fromListWith (++) [ (placedOn p, [k]) | (SM.StateId k, p) <- SM.toList (regStates old) ]
        abandoned = [ k | SM.StateId k <- S.toList (regAbandoned old) ]
    placed <- session cluster "reset" (evolveWorkerLimit opts) (Just (evolverRef fn)) $ \ws -> case ws of
      [] -> Left NoWorkers
      here -> let placement = zip3 ids encoded (cycle here)
                  dropped = [ SendTo w (StatesDrop ks) | w <- here, let ks = M.findWithDefault [] w held ++ abandoned, not (null ks) ]
              in Right ( quietMachine, placement
                       , dropped ++ [ SendTo w (StateAdd k bytes) | (SM.StateId k, bytes, w) <- placement ]
                         ++ [ SendTo w (EvolveWith (evolverRef fn)) | w <- here ] )
    let placement = endState placed
        reg = emptyRegistry { regStates = placedAt [ (i, w) | (i, _, w) <- placement ]
                            , regOrigin = SM.fromList [ (i, Seen bytes) | (i, bytes, _) <- placement ]
                            , regNextId = fromIntegral (length encoded) + 1
                            , regTold = Just (evolverRef fn, S.fromList [ w | (_, _, w) <- placement ]) }
    pure (reg, ids)

-- Checkpoint the states whose lineage reached the bound (a session of
-- its own, right after the call that reached it, every so many calls). A
-- checkpoint that fails leaves the registry as it was: recovery still
-- works, from further back.
checkpointIfDue :: EvolveOptions -> Cluster -> Registry -> IO Registry
checkpointIfDue opts cluster reg
  | bound <= 0 || regDepth reg < bound = pure reg
  | otherwise = case deepStates bound reg of
      [] -> pure reg { regDepth = 0 }
      deep -> do
        r <- try (session cluster "checkpoint" Nothing Nothing (\ws -> Right (checkpointStart ws deep)))
        pure $ case r of
          Right end -> applyCheckpoint (endState end) reg
          Left (_ :: SomeException) -> reg
  where bound = evolveCheckpointSteps opts

-- A call may name the loop it expects; the cluster has one reader for
-- every API, chosen by 'configMasterLoop'.
checkLoop :: EvolveOptions -> Cluster -> IO ()
checkLoop opts cluster = case evolveLoop opts of
  Just wanted | wanted /= clusterMasterLoop cluster ->
    throwIO (ConfigError "evolveLoop" ("this cluster runs the " ++ masterLoopName (clusterMasterLoop cluster)
                                        ++ " master loop (configMasterLoop); a call cannot ask for "
                                        ++ masterLoopName wanted))
  _ -> pure ()

-- | Evolve the states named in the map with their inputs. Returns, for
-- each, its children (new ids, with their outputs), in the order the step
-- function gave them.
evolveManyWith :: forall s i o. EvolveOptions -> Cluster -> StaticPtr (Evolver s i o) -> M.Map StateId i
               -> IO (M.Map StateId [(StateId, o)], EvolveStats)
evolveManyWith opts cluster fn inputs = do
  own <- ownStates cluster inputs
  hints <- ownStates cluster (M.filterWithKey (\sid _ -> stateCluster sid == clusterTag cluster) (evolveCostHints opts))
  (out, stats) <- evolveRaw (clusterRegistry cluster) hints opts cluster (evolverRef fn) (evolverInputEncoder fn) (evolverOutputDecoder fn) own
  let here = stateOf cluster
  pure (M.mapKeysMonotonic here (M.map (map (\(c, o) -> (here c, o))) out), stats)

-- A call on a population placed on hosts: one message per host, each
-- host's agent scheduling its workers.
hostedCall :: Cluster -> TaskRef -> Registry -> SM.StateMap B.ByteString
           -> IO (Registry, Either SomeException (M.Map SM.StateId [(SM.StateId, B.ByteString)], EvolveStats))
hostedCall cluster ref reg inputs = do
  started <- monotonicSeconds
  -- an interrupted caller (timeout, an async exception) forgets the
  -- call's states as a failed call does; the hosts give the call up when
  -- the next one comes
  attempt <- try (hostedEvolve cluster ref reg inputs)
  let (reg', outcome) = case attempt of
        Left (e :: SomeException) ->
          (reg { regStates = SM.filterWithKey (\s _ -> not (SM.member s inputs)) (regStates reg) }, Left e)
        Right (r, o) -> (r, either (Left . toException) Right o)
  finished <- monotonicSeconds
  pure $ (,) reg' $ case outcome of
    Left err -> Left err
    Right (HostedOutcome outputs summaries traffic) ->
      let busy = M.fromList [ (fromIntegral w, fromIntegral ns / 1e9) | (_, c) <- summaries, (w, ns) <- summaryBusy c ]
          stats = EvolveStats (finished - started) (M.size busy) (SM.size outputs) (sum (map length (SM.elems outputs)))
                              (sum [ fromIntegral (summaryMoved c) | (_, c) <- summaries ]) busy (clusterMasterLoop cluster)
                              (sum [ fromIntegral (summaryRecovered c) | (_, c) <- summaries ])
                              (trafficMessages traffic) (trafficRehomed traffic) (trafficMoved traffic)
      in stats `seq` Right (SM.toMap outputs, stats)

-- | 'evolveManyWith' for a function known by its reference, its input's
-- encoder and its output's decoder.
-- The call runs on this population (the evolve API's, or the Refs'); the
-- hints are expected seconds of some states' next step.
evolveRaw :: MVar Registry -> M.Map SM.StateId Double -> EvolveOptions -> Cluster -> TaskRef -> (i -> Encoder) -> (B.ByteString -> IO o)
          -> M.Map SM.StateId i -> IO (M.Map SM.StateId [(SM.StateId, o)], EvolveStats)
evolveRaw population hints opts cluster ref encodeInput decodeOutput inputs = do
  markHerd ("herd evolve " ++ refName ref ++ ": " ++ show (M.size inputs) ++ " states")
  encodedInputs <- fmap SM.fromList $ forM (zip [0 :: Int ..] (M.toList inputs)) $ \(k, (sid, x)) -> do
    r <- tryUser (evaluate (encodeInput x) >>= encoderBytes)
    either (throwIO . ArgumentError k (refName ref)) (\b -> pure (sid, b)) r
  checkLoop opts cluster
  result <- modifyMVar population $ \reg -> if regHosted reg then hostedCall cluster ref reg encodedInputs else do
    let unknown = [ sid | sid <- M.keys inputs, not (SM.member sid (regStates reg)) ]
    unless (null unknown) $ throwIO (UnknownStates (map show unknown))
    started <- monotonicSeconds
    let estimate sid = M.findWithDefault (estimateFrom reg sid) sid hints
        start = CallStart
          { startRef = ref, startRegistry = reg, startStates = M.keys inputs, startInputs = encodedInputs
          , startEstimate = estimate, startLead = evolveLead opts
          , startMaxDeaths = configMaxTaskDeaths (clusterConfig cluster), startTime = started }
        begin workers = (\(call, outs) -> (callMachine (refName ref), call, outs)) <$> startCall start workers
    outcome <- try (session cluster (refName ref) (evolveWorkerLimit opts) (Just ref) begin)
    finished <- monotonicSeconds
    case outcome of
      Left (e :: SomeException) -> do
        -- the call's states are in an unknown state, and so are those of
        -- workers that left; the others were not touched. Which workers
        -- know which function is unknown too: the next call tells them all
        live <- S.fromList . map infoId <$> clusterWorkerInfo cluster
        let untouched = SM.filterWithKey (\sid p -> not (M.member sid inputs) && S.member (placedOn p) live) (regStates reg)
        pure ( reg { regStates = untouched, regTold = Nothing
                   , regAbandoned = S.union (regAbandoned reg) (S.fromList (M.keys inputs)) }
             , Left e )
      Right end -> do
          let call = endState end
              evolvedN = SM.size (callOutputs call)
              reg' = registryAfter ref call reg
              stats = EvolveStats (finished - started) (length (planWorkers (callPlan call))) evolvedN
                                  (callChildren call) (callMoved call) (callBusy call) (clusterMasterLoop cluster)
                                  (callRecovered call) 0 0 0
          -- forced now: left unevaluated, the stats kept the call's whole
          -- state and the cluster (its links' buffers, its threads) alive
          -- for as long as the caller kept them, even past 'withCluster'
          _ <- evaluate stats
          reg'' <- checkpointIfDue opts cluster reg'
          pure (reg'', Right (SM.toMap (callOutputs call), stats))
  (raw, stats) <- either throwIO pure result
  decoded <- forM raw $ \children -> forM children $ \(child, bytes) -> do
    out <- tryUser (decodeOutput bytes)
    case out of
      Right o -> pure (child, o)
      Left why -> throwIO (EvolveFailed (refName ref) (show child) ("its output does not decode: " ++ why))
  pure (decoded, stats)
