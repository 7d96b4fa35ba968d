-- | A worker's states that it was asked to evolve, as the evolve scheduler
-- ("Herd.Core.Evolve.Plan") keeps them: a queue, oldest first (the first
-- may be running), and how many behind the first the worker is known to
-- have started (it kept one asked back, so that one and those before it
-- run or ran). Pure.
--
-- Promise: the known-started count stays within the queue behind its
-- first, and costs nothing while it is 0, the case of every answer of a
-- call whose workers keep nothing.
module Herd.Core.Evolve.Queued
  ( dequeue
  , isQueued
  , keptAt
  , leaving
  ) where

import Data.Sequence (Seq, ViewL (..), viewl)
import qualified Data.Sequence as Seq
import Herd.Core.Evolve.StateMap (StateId)

-- | A queue without this state: the first one, at once, in the common
-- case (a worker answers its states in order); else searched for.
dequeue :: StateId -> Seq StateId -> Seq StateId
dequeue s q = case viewl q of
  x :< rest | x == s -> rest
  _ -> Seq.filter (/= s) q

-- | Whether a state is in a queue, looking at its first one first.
isQueued :: StateId -> Seq StateId -> Bool
isQueued s q = case viewl q of
  x :< _ | x == s -> True
  _ -> s `elem` q

-- | The known-started count after the worker kept this state of its
-- queue, asked back: it and those before it are started.
keptAt :: StateId -> Seq StateId -> Int -> Int
keptAt s q started = maybe started (max started) (Seq.elemIndexL s q)

-- | The queue and its known-started count after this state left it
-- (answered or given back): one fewer known started when it was one of
-- them.
leaving :: StateId -> Seq StateId -> Int -> (Seq StateId, Int)
leaving s q 0 = (dequeue s q, 0)
leaving s q started =
  let wasStarted = maybe False (<= started) (Seq.elemIndexL s q)
      q' = dequeue s q
      k = if wasStarted then started - 1 else started
  in (q', max 0 (min k (Seq.length q' - 1)))
