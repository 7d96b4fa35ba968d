{-# LANGUAGE BangPatterns #-}
-- | Giving the workers of an evolve call work ("Herd.Core.Evolve.Schedule"'s
-- steps end here): a worker's queue filled from the states it holds once
-- it is down to half ('refillDue'), and a worker with nothing left to give
-- it taking states from the worker with the most unstarted ones, when
-- that shortens the step. Pure.
--
-- Promise: every entry of a worker these functions change is put back
-- through 'putWorker', so the plan's index of victims stays true, and a
-- worker is in the plan's idle set exactly when it holds, queues and
-- awaits nothing.
module Herd.Core.Evolve.Settle
  ( settle
  , settleIdle
  , settleWorker
  ) where

import Data.Foldable (toList)
import Data.List (foldl')
import qualified Data.Map.Strict as M
import qualified Data.Sequence as Seq
import qualified Data.Set as S
import Herd.Core.Base (WorkerId)
import Herd.Core.Evolve.Plan
import qualified Herd.Core.Evolve.StateMap as SM

-- | Let idle workers take states while any worker has some to spare. Every
-- idle worker faces the same choice (the busiest victim, half of its
-- unstarted states, the same judgement of the move), so once one truly
-- idle worker takes nothing, none will: the walk stops there. Walking on
-- cost a step per idle worker on every state given back, a large share of
-- the master's time at thousands of workers when moves were refused.
settleIdle :: Double -> (Plan, [Command]) -> (Plan, [Command])
settleIdle now (p0, cmds0) = go (S.toList (plIdle p0)) p0 [cmds0]
  where
    go [] p groups = (p, concat (reverse groups))
    go (w : ws) p groups
      | S.null (plVictims p) = (p, concat (reverse groups))
      | otherwise = case settle now [w] p of
          (p', []) | idleIn p w -> (p', concat (reverse groups))
          (p', cmds') -> go ws p' (cmds' : groups)
    idleIn p w = maybe False isIdle (M.lookup w (plWorkers p))

-- | Give these workers work: fill their queues from what they hold, and let
-- those with nothing left take states from the most loaded worker.
settle :: Double -> [WorkerId] -> Plan -> (Plan, [Command])
settle now ws p0 = fmap (concat . reverse) (foldl' one (p0, []) ws)
  where
    -- commands gathered newest group first, flattened once at the end
    one (!p, groups) w = case M.lookup w (plWorkers p) of
      Nothing -> (p, groups)
      Just wp -> case settleStored now w wp p of
        (p', []) -> (p', groups)
        (p', group) -> (p', group : groups)

-- | One worker's turn of 'settle', given its plan as it is now (which the
-- plan's map may not hold yet): its queue filled, its entry put once.
-- Strict throughout: a start runs this once per worker, and the lazy
-- version left a dozen thunks per worker for the next step to force.
settleWorker :: Double -> WorkerId -> WorkerPlan -> Plan -> (Plan, [Command])
settleWorker = settleWith False

-- 'settleWorker' for an entry the plan's map holds already: when nothing
-- is asked it is not put again. A call's start settles every worker left
-- short (at 2048 workers with four states each, every worker), and
-- putting each unchanged entry back copied its path of the plan's map.
settleStored :: Double -> WorkerId -> WorkerPlan -> Plan -> (Plan, [Command])
settleStored = settleWith True

settleWith :: Bool -> Double -> WorkerId -> WorkerPlan -> Plan -> (Plan, [Command])
settleWith stored now w wp p =
  let !target = queueTarget p
      !queued = Seq.length (wpQueued wp)
      !room = if refillDue target queued then target - queued else 0
      (asked, kept) = heldTake room (wpHeld wp)
      !askedIds = map snd asked
      -- work given to a worker that had none starts now
      !heard = if Seq.null (wpQueued wp) && not (null askedIds) then now else wpHeard wp
      !wp' = wp { wpHeld = kept, wpQueued = if null askedIds then wpQueued wp else wpQueued wp <> Seq.fromList askedIds
                , wpHeard = heard }
      !p' = if stored && null askedIds then p else putWorker w wp' p
      (!p'', stealCmds) = if heldNull kept && Seq.length (wpQueued wp') < target && wpIncoming wp' == 0
                            then steal now w p'
                            else (p', [])
      !idle = maybe False isIdle (M.lookup w (plWorkers p''))
      -- inserting a worker already there would copy its path anyway
      idleSet = plIdle p''
      !idleSet' = if idle then (if S.member w idleSet then idleSet else S.insert w idleSet) else S.delete w idleSet
  in (p'' { plIdle = idleSet' }, if null askedIds then stealCmds else Ask w askedIds : stealCmds)

-- A worker with nothing held and room in its queue takes states from the
-- worker with the most unstarted ones, but only when that shortens the
-- step: it takes half the difference between the victim's unstarted
-- states and its own, so a move never leaves the thief with more to do
-- than the victim (moves between workers with about the same work are
-- what made states cross the network again and again). The victim's count
-- is what it has probably not started by now ('likelyUnstarted'), not
-- what its last answer said: its later answers may be waiting unread.
-- An idle thief takes half of what the victim last said, and the last one
-- too (it has nothing else to do, and a state already started is simply
-- kept). Either takes nothing when the move would arrive after the victim
-- would have started the states anyway.
steal :: Double -> WorkerId -> Plan -> (Plan, [Command])
steal now thief p = case victimOf of
  Nothing -> (p, [])
  Just (n, victim) | not (moveShortens p n (takeOf n)) -> (p, [])
                   | otherwise ->
    let vp = plWorkers p M.! victim
        count = takeOf n
        (fromHeld, heldLeft) = heldTake count (wpHeld vp)
        fromQueue = take (count - length fromHeld)
                      [ s | s <- toList (Seq.reverse (Seq.drop (1 + wpStarted vp) (wpQueued vp))), not (SM.member s (plMoving p)) ]
        moves = [ (s, Move victim thief c False now) | (c, s) <- fromHeld ]
             ++ [ (s, Move victim thief fallback True now) | s <- fromQueue ]
        p' = p { plMoving = foldl' (\m (s, mv) -> SM.insert s mv m) (plMoving p) moves }
        p'' = adjust victim (\v -> v { wpHeld = heldLeft
                                     , wpLeaving = wpLeaving v + length fromQueue })
            $ adjust thief (\t -> t { wpIncoming = wpIncoming t + length moves }) p'
    in (p'', [ Release victim s | (s, _) <- moves ])
  where
    thiefIdle = maybe True (Seq.null . wpQueued) (M.lookup thief (plWorkers p))
    takeOf n = if thiefIdle then max 1 (n `div` 2) else (n - own) `div` 2
    own = maybe 0 unstarted (M.lookup thief (plWorkers p))
    -- the worker with the most unstarted states, other than the thief
    victimOf = case S.lookupMax (plVictims p) of
      Just (n, w) | w /= thief -> pick n w
      Just top -> S.lookupLT top (plVictims p) >>= uncurry pick
      Nothing -> Nothing
    pick n w | thiefIdle = Just (n, w)
             | n' - own >= 2 = Just (n', w)
             | otherwise = Nothing
      where n' = maybe n (likelyUnstarted now p) (M.lookup w (plWorkers p))
    fallback = maybe 0 id (meanCost p)
