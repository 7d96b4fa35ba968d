-- | The adaptive-scaling policy: how many batch-system jobs (each one host
-- agent) a cluster should hold, given the work waiting and the hosts'
-- idleness.
--
-- Pure: the driver observes (work waiting, each job's state, the clock)
-- and carries out the decisions ('Submit', 'Cancel'), each with its
-- reason for the log. It promises, for every view:
--
-- * never more than the maximum of live jobs (pending or running);
-- * the minimum always requested, except while a failure's backoff holds;
-- * no job cancelled while work waits, and none below the minimum;
-- * growth only once work has waited 'adaptGrowAfter', shrinkage only of
--   a job idle for 'adaptIdleAfter', so a short lull does not thrash;
-- * of the jobs idle long enough, those holding the fewest values (Refs,
--   evolve states) go first, so the least is recomputed elsewhere.
module Herd.Core.Adapt
  ( AdaptLimits (..)
  , defaultAdaptLimits
  , validAdaptLimits
  , JobPhase (..)
  , AdaptJob (..)
  , AdaptView (..)
  , Decision (..)
  , decide
  , backoffSeconds
  , liveJobs
  ) where

import Data.List (sortOn)

-- | The knobs.
data AdaptLimits = AdaptLimits
  { adaptMin       :: !Int     -- ^ jobs always requested
  , adaptMax       :: !Int     -- ^ jobs never exceeded
  , adaptHostSlots :: !Int     -- ^ workers one job brings (tasks it can run at once)
  , adaptGrowAfter :: !Double  -- ^ seconds work must wait before a job is added
  , adaptIdleAfter :: !Double  -- ^ seconds a job's host must idle before it is cancelled
  , adaptBackoff   :: !Double  -- ^ seconds of hold after the first failed job, doubling per failure
  } deriving (Eq, Show)

-- | One to four jobs of one worker each, growing after 2 s of waiting
-- work, shrinking after 10 s idle, holding 5 s after a failure.
defaultAdaptLimits :: AdaptLimits
defaultAdaptLimits = AdaptLimits 1 4 1 2 10 5

-- | The limits, or what is wrong with them.
validAdaptLimits :: AdaptLimits -> Either String AdaptLimits
validAdaptLimits l
  | adaptMin l < 0 = Left ("the minimum of jobs is negative: " ++ show (adaptMin l))
  | adaptMax l < 1 = Left ("the maximum of jobs must be at least 1, not " ++ show (adaptMax l))
  | adaptMin l > adaptMax l = Left ("the minimum of jobs (" ++ show (adaptMin l) ++ ") exceeds the maximum (" ++ show (adaptMax l) ++ ")")
  | adaptHostSlots l < 1 = Left ("a job must bring at least one worker, not " ++ show (adaptHostSlots l))
  | any (< 0) [adaptGrowAfter l, adaptIdleAfter l, adaptBackoff l] = Left "the adaptive waits must not be negative"
  | otherwise = Right l

-- | Where a job is.
data JobPhase
  = Pending            -- ^ submitted, its agent not yet connected
  | Running !(Maybe Double)  -- ^ its agent connected; idle since that time, if idle
  | Retiring           -- ^ cancelled by the policy, not yet gone
  deriving (Eq, Show)

-- | One job the driver knows.
data AdaptJob = AdaptJob
  { ajId    :: !String    -- ^ the batch system's job id
  , ajPhase :: !JobPhase
  , ajHeld  :: !Int       -- ^ values its workers hold (Refs, evolve states)
  } deriving (Eq, Show)

-- | What the driver saw.
data AdaptView = AdaptView
  { avNow          :: !Double        -- ^ the clock
  , avWaiting      :: !Int           -- ^ tasks waiting for a worker
  , avWaitingSince :: !(Maybe Double)  -- ^ since when work has waited without a break
  , avJobs         :: ![AdaptJob]
  , avFailures     :: !Int           -- ^ jobs failed in a row (never connected, or refused)
  , avLastFailure  :: !Double        -- ^ when the last one failed
  } deriving (Eq, Show)

-- | What to do.
data Decision
  = Submit !Int String       -- ^ submit this many jobs, for this reason
  | Cancel ![String] String  -- ^ cancel these jobs, for this reason
  deriving (Eq, Show)

-- | Jobs pending or running.
liveJobs :: [AdaptJob] -> [AdaptJob]
liveJobs = filter ((/= Retiring) . ajPhase)

-- | The hold after @n@ failures in a row: none before the first, then
-- doubling, at most 64 times the base.
backoffSeconds :: AdaptLimits -> Int -> Double
backoffSeconds l n
  | n <= 0 = 0
  | otherwise = adaptBackoff l * 2 ^ min 6 (n - 1)

-- | The decisions for one view; at most one 'Submit' and one 'Cancel'.
decide :: AdaptLimits -> AdaptView -> [Decision]
decide l v
  | held = []
  | live < adaptMin l = [Submit (adaptMin l - live) ("below the minimum of " ++ show (adaptMin l) ++ " jobs")]
  | avWaiting v > 0 = grow
  | otherwise = shrink
  where
    held = avFailures v > 0 && avNow v < avLastFailure v + backoffSeconds l (avFailures v)
    lives = liveJobs (avJobs v)
    live = length lives
    grow = case avWaitingSince v of
      Just since | avNow v - since >= adaptGrowAfter l, extra > 0 ->
        [Submit extra (show (avWaiting v) ++ " tasks waited " ++ showSeconds (avNow v - since))]
      _ -> []
    slots = adaptHostSlots l
    wanted = min (adaptMax l) (running + (avWaiting v + slots - 1) `div` slots)
    running = length [ () | AdaptJob _ (Running _) _ <- lives ]
    pending = live - running
    extra = wanted - running - pending
    idleLong = sortOn snd
      [ (ajId j, (ajHeld j, since)) | j@(AdaptJob _ (Running (Just since)) _) <- lives
      , avNow v - since >= adaptIdleAfter l ]
    spare = take (live - adaptMin l) (map fst idleLong)
    shrink
      | null spare = []
      | otherwise = [Cancel spare ("idle for " ++ showSeconds (adaptIdleAfter l) ++ " or more with no work waiting")]

showSeconds :: Double -> String
showSeconds s = show (fromIntegral (round (s * 10) :: Int) / 10 :: Double) ++ " s"
