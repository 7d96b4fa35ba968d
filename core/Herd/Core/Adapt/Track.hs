-- | The adaptive driver's memory: every batch job it submitted, what
-- SLURM and the cluster last said of it, and what to do next.
--
-- Pure: the driver ("Herd.Master.Launch.Adapt") feeds it one 'Observation'
-- per round (the queue, each job's workers, the work waiting) and each
-- submission's outcome, and carries out the 'Action's. It promises:
--
-- * a job is a failure (counted once, with backoff) when its submission is
--   refused, when it ends before its agent connected, when it runs past
--   the start timeout without connecting (it is cancelled), or when it
--   ends while working without having been retired (preempted, cancelled
--   by hand); a connection resets the failures in a row;
-- * a job nearing its walltime is retired: its workers are held (no new
--   work while others can take it), a replacement is decided as for any
--   missing job, and it is cancelled once its workers have been idle for
--   a second, or at the latest shortly before its end; retirements are
--   staggered by job;
-- * a job is cancelled at most once, and only when retired;
-- * every event has a log line with its reason.
module Herd.Core.Adapt.Track
  ( Knobs (..)
  , TrackedJob (..)
  , Tracker (..)
  , emptyTracker
  , Observation (..)
  , JobWorkers (..)
  , Action (..)
  , observe
  , submitted
  , awaitedWorkers
  , AdaptSummary (..)
  , summary
  , retireAt
  ) where

import qualified Data.Map.Strict as M
import Data.Maybe (isJust, isNothing)
import Herd.Core.Adapt
import Herd.Core.Adapt.Slurm (SlurmState (..))

-- | What the driver is set to.
data Knobs = Knobs
  { knobLimits       :: !AdaptLimits
  , knobWalltime     :: !(Maybe Double)  -- ^ each job's walltime in seconds, if it has one
  , knobLead         :: !Double          -- ^ seconds before the walltime a job retires
  , knobStartTimeout :: !Double          -- ^ seconds a running job may take to connect
  } deriving (Eq, Show)

-- | One job as the driver knows it.
data TrackedJob = TrackedJob
  { tjSeq       :: !Int             -- ^ its place among the submissions (for the stagger)
  , tjSubmitted :: !Double
  , tjStarted   :: !(Maybe Double)  -- ^ when it was first seen running
  , tjJoined    :: !Bool            -- ^ one of its workers has connected
  , tjIdleSince :: !(Maybe Double)  -- ^ since when all its workers have been idle
  , tjRetiring  :: !(Maybe String)  -- ^ retired, and why
  , tjCancelled :: !Bool            -- ^ scancel was asked for
  } deriving (Eq, Show)

-- | Everything the driver remembers.
data Tracker = Tracker
  { trJobs         :: !(M.Map String TrackedJob)
  , trSubmitted    :: !Int             -- ^ jobs submitted since the start
  , trFailures     :: !Int             -- ^ failures in a row
  , trLastFailure  :: !Double
  , trFailedTotal  :: !Int             -- ^ failures since the start
  , trWaitingSince :: !(Maybe Double)  -- ^ since when work has waited without a break
  } deriving (Eq, Show)

-- | Nothing submitted yet.
emptyTracker :: Tracker
emptyTracker = Tracker M.empty 0 0 0 0 Nothing

-- | A job's workers as the cluster sees them.
data JobWorkers = JobWorkers
  { jwCount :: !Int   -- ^ connected now
  , jwIdle  :: !Bool  -- ^ none has work
  , jwHeld  :: !Int   -- ^ values they hold (Refs, evolve states)
  } deriving (Eq, Show)

-- | One round's view.
data Observation = Observation
  { obNow     :: !Double
  , obQueue   :: !(Maybe (M.Map String SlurmState))  -- ^ the master's jobs in the queue ('Nothing': squeue failed)
  , obWorkers :: !(M.Map String JobWorkers)  -- ^ by job id
  , obWaiting :: !Int                        -- ^ tasks waiting for a worker
  } deriving (Eq, Show)

-- | What to do, in order.
data Action
  = SubmitJobs !Int String     -- ^ submit this many jobs (then report each with 'submitted')
  | CancelJobs ![String] String  -- ^ scancel these, for this reason
  | HoldJobs ![String]         -- ^ give these jobs' workers no new work while others can take it
  | Say String                 -- ^ a log line
  deriving (Eq, Show)

-- | When a job that started at @start@ retires: its walltime less the
-- lead, brought forward by up to a fifth of the rest by its place, so
-- jobs started together leave one by one.
retireAt :: Knobs -> Double -> Int -> Maybe Double
retireAt k start sq = do
  wall <- knobWalltime k
  let useful = max 0 (wall - knobLead k)
      x = fromIntegral sq * 0.6180339887 :: Double
      spread = x - fromIntegral (floor x :: Int)
  pure (start + useful * (1 - 0.2 * spread))

-- | The outcome of one submission.
submitted :: Double -> Either String String -> Tracker -> (Tracker, [Action])
submitted now outcome tr = case outcome of
  Right jid ->
    ( tr { trJobs = M.insert jid (TrackedJob (trSubmitted tr) now Nothing False Nothing Nothing False) (trJobs tr)
         , trSubmitted = trSubmitted tr + 1 }
    , [Say ("herd: adaptive: submitted SLURM job " ++ jid)] )
  Left why -> failed now ("SLURM refused a job: " ++ why) tr

-- Count a failure and say so, with the hold it brings.
failed :: Double -> String -> Tracker -> (Tracker, [Action])
failed now why tr =
  let tr' = tr { trFailures = trFailures tr + 1, trLastFailure = now, trFailedTotal = trFailedTotal tr + 1 }
  in (tr', [Say ("herd: adaptive: " ++ why ++ "; failure " ++ show (trFailures tr') ++ " in a row")])

-- | One round: follow every job, then let the policy decide.
observe :: Knobs -> Observation -> Tracker -> (Tracker, [Action])
observe k ob tr0 =
  let now = obNow ob
      tr1 = tr0 { trWaitingSince = if obWaiting ob > 0 then Just (maybe now id (trWaitingSince tr0)) else Nothing }
      (tr2, followed) = M.foldrWithKey (\jid j acc -> follow k ob jid j acc) (tr1 { trJobs = M.empty }, []) (trJobs tr1)
      (tr3, decided) = policy k ob tr2
  in (tr3, followed ++ decided)

-- One job's round, added to the tracker being built.
follow :: Knobs -> Observation -> String -> TrackedJob -> (Tracker, [Action]) -> (Tracker, [Action])
follow k ob jid j (tr, acts) =
  case () of
    _ | gone, isJust (tjRetiring j) -> (tr, acts ++ [Say ("herd: adaptive: job " ++ jid ++ " has left")])
      | gone, not (tjJoined j) ->
          let (tr', say) = failed now ("job " ++ jid ++ " ended before its agent connected" ++ stateNote) tr
          in (tr', acts ++ say)
      | gone ->
          let (tr', say) = failed now ("job " ++ jid ++ " ended while it was working (preempted, cancelled or out of time)"
                                       ++ "; its tasks run elsewhere") tr
          in (tr', acts ++ say)
      | not joined, Just s <- started, now - s > knobStartTimeout k, not (tjCancelled j) ->
          let (tr', say) = failed now ("job " ++ jid ++ " ran " ++ show (round (now - s) :: Int)
                                       ++ " s without its agent connecting; cancelling it") tr
          in keep tr' j' { tjRetiring = Just "never connected", tjCancelled = True }
                  (say ++ [CancelJobs [jid] "it never connected"])
      | Just why <- tjRetiring j, not (tjCancelled j), workers == 0 || idleFor >= 1 || pastDeadline ->
          keep tr j' { tjCancelled = True } [CancelJobs [jid] why]
      | isNothing (tjRetiring j), Just s <- started, Just at <- retireAt k s (tjSeq j), now >= at ->
          keep tr j' { tjRetiring = Just "its walltime is near" }
            [ HoldJobs [jid]
            , Say ("herd: adaptive: job " ++ jid ++ " retires: its walltime ends in "
                   ++ show (round (s + maybe 0 id (knobWalltime k) - now) :: Int) ++ " s; it takes no new work") ]
      | otherwise -> keep tr j' []
  where
    now = obNow ob
    q = obQueue ob
    seen = q >>= M.lookup jid
    JobWorkers workers idle _ = M.findWithDefault (JobWorkers 0 True 0) jid (obWorkers ob)
    -- gone: the queue was read, the job is not in it or on its way out, and no worker of it is left
    gone = isJust q && maybe True (== Ending) seen && workers == 0
    stateNote = if isJust seen then " (SLURM: ending)" else " (no longer in the queue)"
    joined = tjJoined j || workers > 0
    started = case tjStarted j of
      Nothing | seen == Just Started || workers > 0 -> Just now
      s -> s
    idleSince
      | workers > 0 && idle = Just (maybe now id (tjIdleSince j))
      | otherwise = Nothing
    -- idle through a whole round, not between two batches
    idleFor = maybe 0 (now -) idleSince
    pastDeadline = case (started, knobWalltime k) of
      (Just s, Just w) -> now >= s + w - min 5 (knobLead k / 2)
      _ -> False
    j' = j { tjStarted = started, tjJoined = joined, tjIdleSince = idleSince }
    keep t jj more =
      let t' = t { trJobs = M.insert jid jj (trJobs t)
                 , trFailures = if joined && not (tjJoined j) then 0 else trFailures t }
          hello = [ Say ("herd: adaptive: job " ++ jid ++ " joined with " ++ show workers ++ " worker"
                         ++ (if workers == 1 then "" else "s")) | joined, not (tjJoined j) ]
      in (t', acts ++ hello ++ more)

-- The policy's decisions on the jobs as followed.
policy :: Knobs -> Observation -> Tracker -> (Tracker, [Action])
policy k ob tr = foldl apply (tr, []) (decide (knobLimits k) view)
  where
    view = AdaptView
      { avNow = obNow ob, avWaiting = obWaiting ob, avWaitingSince = trWaitingSince tr
      , avJobs = [ AdaptJob jid (phase j) (maybe 0 jwHeld (M.lookup jid (obWorkers ob))) | (jid, j) <- M.toList (trJobs tr) ]
      , avFailures = trFailures tr, avLastFailure = trLastFailure tr }
    phase j
      | isJust (tjRetiring j) = Retiring
      | tjJoined j = Running (tjIdleSince j)
      | otherwise = Pending
    apply (t, acts) d = case d of
      Submit n why -> (t, acts ++ [Say ("herd: adaptive: asking for " ++ show n ++ " more job" ++ plural n ++ ": " ++ why)
                                 , SubmitJobs n why])
      Cancel ids why ->
        let mark j = j { tjRetiring = Just why, tjCancelled = True }
        in ( t { trJobs = foldr (M.adjust mark) (trJobs t) ids }
           , acts ++ [Say ("herd: adaptive: cancelling job" ++ plural (length ids) ++ " " ++ unwords ids ++ ": " ++ why)
                     , CancelJobs ids why] )
    plural n = if n == 1 then "" else "s"

-- | Workers the cluster should wait for rather than fail a call for want
-- of them: those of jobs not yet joined, and of the minimum while
-- submissions have not failed three times in a row.
awaitedWorkers :: Knobs -> Tracker -> Int
awaitedWorkers k tr = adaptHostSlots l * (coming + missing)
  where
    l = knobLimits k
    live = [ j | j <- M.elems (trJobs tr), isNothing (tjRetiring j) ]
    coming = length (filter (not . tjJoined) live)
    missing = if trFailures tr < 3 then max 0 (adaptMin l - length live) else 0

-- | The jobs by phase, for the status page and metrics.
data AdaptSummary = AdaptSummary
  { sumPending   :: ![String]  -- ^ submitted, not yet joined
  , sumRunning   :: ![String]  -- ^ joined, taking work
  , sumRetiring  :: ![String]  -- ^ retired, not yet gone
  , sumSubmitted :: !Int       -- ^ jobs submitted since the start
  , sumFailed    :: !Int       -- ^ failures since the start
  } deriving (Eq, Show)

-- | The tracker's jobs by phase.
summary :: Tracker -> AdaptSummary
summary tr = AdaptSummary
  { sumPending = [ i | (i, j) <- jobs, isNothing (tjRetiring j), not (tjJoined j) ]
  , sumRunning = [ i | (i, j) <- jobs, isNothing (tjRetiring j), tjJoined j ]
  , sumRetiring = [ i | (i, j) <- jobs, isJust (tjRetiring j) ]
  , sumSubmitted = trSubmitted tr, sumFailed = trFailedTotal tr }
  where jobs = M.toList (trJobs tr)
