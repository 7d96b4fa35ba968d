{-# LANGUAGE BangPatterns #-}
-- | The pure scheduler of one 'Herd.Master.Job.Evolve.evolveMany' call: which worker
-- evolves which state when, and which states move to an idle worker.
--
-- It is the master state machine of FP Complete's distributed particle
-- filter, with two changes. Batches are not a fixed five states: each
-- worker is kept a queue of about 'settingsLead' seconds of work (at least
-- two states, so the next one is there when one finishes), sized from the
-- step times measured so far. And a worker that runs low takes states
-- from the worker with the most unstarted ones, longest first, as
-- estimated from the time each state's parent took ("a child costs what
-- its parent cost"), so from the second call on the long states start
-- first and end up alone. It takes only what shortens the step: half the
-- difference between the victim's unstarted states and its own (an idle
-- worker takes half, down to the last one), and nothing the victim would
-- start before the move could deliver it, judged by the round trips of
-- the moves so far ('moveShortens').
--
-- Moved states travel through the master: the holder gives a state back
-- ('Release', answered by 'Herd.Wire.StateReleased' or, if it had started,
-- by 'Herd.Wire.StateKept'), and the master hands it to the thief ('Place'). Workers
-- need no connections to each other.
--
-- Promises (checked by QuickCheck properties): every state given to
-- 'startPlan' is asked to evolve exactly once unless its worker is lost;
-- a state is never in two workers' lists; a released state is placed
-- exactly once; no worker is left with nothing to do while another holds
-- two or more unstarted states, as long as moves are quick (a round trip
-- shorter than the step time; a slower one makes such a move pointless).
module Herd.Core.Evolve.Schedule
  ( -- * Identities
    StateId (..)
  , WorkerId
    -- * One call
  , PlanSettings (..)
  , defaultPlanSettings
  , Plan
  , PlanEvent (..)
  , Command (..)
  , holdingsOf
  , startPlan
  , stepPlan
  , planDone
  , planLeft
  , planUnstarted
  , planIsMoving
  , planIdleWorkers
  , moveRoundTrip
    -- * Between calls
  , Registry (..)
  , emptyRegistry
  , Origin (..)
  , lineage
  , pruneOrigins
  , planWorkers
  , planBusy
  ) where

import Data.List (foldl')
import Data.Foldable (toList)
import qualified Data.Map.Strict as M
import qualified Data.Sequence as Seq
import qualified Data.Set as S
import qualified Data.Vector as V
import Herd.Core.Base (WorkerId)
import Herd.Core.Evolve.Balance (balance)
import Herd.Core.Evolve.Plan
import Herd.Core.Evolve.Registry
import qualified Herd.Core.Evolve.StateMap as SM
import Herd.Core.Evolve.Settle

-- | What 'startPlan' takes, in one pass over the states to evolve: every
-- given worker with the states it holds among them (none: an empty list),
-- each with its estimated cost. States held by workers not given are left
-- out. Grouping through a map insert per state copied a path of the map
-- per state; this allocates one small record a state.
holdingsOf :: [WorkerId] -> (StateId -> Maybe WorkerId) -> [StateId] -> (StateId -> Double)
           -> M.Map WorkerId [(StateId, Double)]
holdingsOf workers whereAt toEvolve estimate = M.fromDistinctAscList (zip ws (V.toList grouped))
  where
    ws = S.toAscList (S.fromList workers)
    index = M.fromDistinctAscList (zip ws [0 ..])
    grouped = V.accum (flip (:)) (V.replicate (length ws) [])
                [ (i, (sid, estimate sid)) | sid <- toEvolve, Just w <- [whereAt sid], Just i <- [M.lookup w index] ]

-- | Start a call at this time (seconds of the master's clock; moves are
-- timed by it): each worker with the states it holds that are to be
-- evolved, each with its estimated cost (seconds; unknown costs should be
-- given as the mean). Every live worker should be listed, even with no
-- states, so that it can take some.
startPlan :: Double -> PlanSettings -> M.Map WorkerId [(StateId, Double)] -> (Plan, [Command])
startPlan now settings holdings0 = (planAfter, releases ++ asks ++ stealCmds)
  where
    -- a state whose cost is unknown (0 or less) counts as the mean of the
    -- known ones, or as 1 when none is known: then only counts matter
    (knownSum, knownN, unknownN) = M.foldl' (foldl' count) (0, 0 :: Int, 0 :: Int) holdings0
    count (!total, !n, !u) (_, c) = if c > 0 then (total + c, n + 1, u) else (total, n, u + 1)
    unit = if knownN == 0 then 1 else knownSum / fromIntegral knownN
    holdings | unknownN == 0 = holdings0
             | otherwise = M.map (map (\(s, c) -> (s, if c > 0 then c else unit))) holdings0
    held0 = M.map (\ss -> longestFirst [ (c, s) | (s, c) <- ss ]) holdings
    -- move states from overloaded workers to underloaded ones before
    -- anything starts, as far as the estimates say it helps
    moves = balance held0
    -- each worker changed once: a donor loses all its moved states in one
    -- pass over its list (one pass per move was quadratic in a skewed start)
    leaving = M.fromListWith S.union [ (from, S.singleton s) | (s, from, _, _) <- moves ]
    coming = M.fromListWith (+) [ (to, 1 :: Int) | (_, _, to, _) <- moves ]
    releases = [ Release from s | (s, from, _, _) <- moves ]
    -- every worker's queue filled from what it holds, in one pass: the
    -- maps and sets are built whole (a put per worker rebuilt a path of
    -- each, thousands of times, and was most of a start's cost)
    target = queueTarget shell
    workerPlans =
      [ (w, WorkerPlan (heldFromList kept) (Seq.fromList asked) (M.findWithDefault 0 w coming) 0 0 now 0)
      | (w, ss) <- M.toAscList held0
      , let mine = maybe ss (\gone -> filter (\(_, s) -> not (S.member s gone)) ss) (M.lookup w leaving)
            (taken, kept) = splitAt target mine
            asked = map snd taken ]
    asks = [ Ask w (toList (wpQueued wp)) | (w, wp) <- workerPlans, not (Seq.null (wpQueued wp)) ]
    shell = Plan
      { plWorkers = M.empty
      , plLeft = sum (map length (M.elems holdings))
      , plMoving = SM.empty
      , plIdle = S.empty
      , plVictims = S.empty
      , plCostSum = 0
      , plCostN = 0
      , plRoundTrip = Nothing
      , plSettings = settings
      , plGoneBusy = M.empty
      }
    planFilled = shell
      { plWorkers = M.fromDistinctAscList workerPlans
      , plMoving = SM.fromList [ (s, Move from to c False now) | (s, from, to, c) <- moves ]
      , plIdle = S.fromDistinctAscList [ w | (w, wp) <- workerPlans, isIdle wp ]
      , plVictims = S.fromList [ (n, w) | (w, wp) <- workerPlans, let n = unstarted wp, n >= 1 ] }
    -- then workers left short with nothing coming take states from the
    -- busiest, as they would at any later step
    thieves = [ w | (w, wp) <- workerPlans, heldNull (wpHeld wp), Seq.length (wpQueued wp) < target, wpIncoming wp == 0 ]
    (planAfter, stealCmds) = settle now thieves planFilled

-- | Take one event, at this time (the clock of 'startPlan'). 'Left' names a
-- broken promise of the worker (a state it was not asked for), which the
-- driver treats as a bad peer.
stepPlan :: Double -> PlanEvent -> Plan -> Either String (Plan, [Command])
stepPlan now ev p = case ev of
  Evolved w s secs -> do
    wp <- worker w
    if not (isQueued s (wpQueued wp))
      then Left ("it reported evolving " ++ show s ++ ", which it was not asked to evolve")
      -- the worker's entry is changed once, by its refill: a put here and
      -- another there rebuilt its paths in the plan's map and index twice
      else pure $ settleWorker now w (leftQueue s wp) { wpHeard = now, wpBusy = wpBusy wp + secs }
        p { plLeft = plLeft p - 1
          , plCostSum = plCostSum p + secs
          , plCostN = plCostN p + 1 }
  Released w s bytes -> case SM.lookup s (plMoving p) of
    Just mv | moveFrom mv == w -> do
      wp <- worker w
      let wp' = if moveQueued mv
                  then (leftQueue s wp) { wpLeaving = wpLeaving wp - 1 }
                  else wp
          p1 = noteRoundTrip (moveAsked mv) now (putWorker w wp' p { plMoving = SM.delete s (plMoving p) })
          to = moveTo mv
          -- the thief may have been lost meanwhile: then the least loaded live worker takes it
          target = if M.member to (plWorkers p1) then to else leastLoaded p1
          p2 = adjust target (\t -> t { wpHeld = heldInsert (moveCost mv) s (wpHeld t)
                                      , wpIncoming = if target == to then wpIncoming t - 1 else wpIncoming t }) p1
          (p3, cmds) = settleIdle now (settle now [target, w] p2)
      pure (p3, Place target s bytes : cmds)
    _ -> Left ("it gave back " ++ show s ++ ", which was not asked back from it")
  Kept w s -> case SM.lookup s (plMoving p) of
    Just mv | moveFrom mv == w ->
      -- it stays where it is and is answered from there
      let back v | moveQueued mv = (keptQueued s v) { wpLeaving = wpLeaving v - 1 }
                 | otherwise = v { wpHeld = heldInsert (moveCost mv) s (wpHeld v) }
          p1 = adjust (moveTo mv) (\t -> t { wpIncoming = wpIncoming t - 1 })
             $ adjust w back (noteRoundTrip (moveAsked mv) now p { plMoving = SM.delete s (plMoving p) })
      in pure (settleIdle now (settle now [moveTo mv, w] p1))
    _ -> Left ("it kept " ++ show s ++ ", which was not asked back from it")
  WorkerGone w -> case M.lookup w (plWorkers p) of
    Nothing -> Right (p, [])
    Just wp -> do
      let leaving = [ (s, mv) | (s, mv) <- SM.toList (plMoving p), moveFrom mv == w ]
          -- states being taken from the lost worker are lost with it
          lost = map snd (heldToList (wpHeld wp)) ++ toList (wpQueued wp) ++ [ s | (s, mv) <- leaving, not (moveQueued mv) ]
          p1 = foldl' (\q (_, mv) -> adjust (moveTo mv) (\x -> x { wpIncoming = wpIncoming x - 1 }) q)
                 (removeWorker w p)
                   { plLeft = plLeft p - length lost
                   , plIdle = S.delete w (plIdle p)
                   , plMoving = SM.filter ((/= w) . moveFrom) (plMoving p) } leaving
          -- moves towards the lost worker are re-targeted when they are answered
          (p2, cmds) = settle now (M.keys (plWorkers p1)) p1
      pure (p2, [ Lose lost | not (null lost) ] ++ cmds)
  WorkerCame w
    | M.member w (plWorkers p) -> Right (p, [])
    -- it starts idle, and takes states from the busiest as any idle worker
    | otherwise -> pure (settleIdle now (putWorker w (WorkerPlan (heldFromList []) Seq.empty 0 0 0 now 0) p { plIdle = S.insert w (plIdle p) }, []))
  Adopted w ss -> case M.lookup w (plWorkers p) of
    Nothing -> Left ("worker " ++ show w ++ " is not part of this call")
    Just _ ->
      let p1 = adjust w (\x -> x { wpHeld = foldl' (\h (s, c) -> heldInsert c s h) (wpHeld x) ss })
                 p { plLeft = plLeft p + length ss }
      in pure (settleIdle now (settle now [w] p1))
  where
    worker w = maybe (Left ("worker " ++ show w ++ " is not part of this call")) Right (M.lookup w (plWorkers p))
