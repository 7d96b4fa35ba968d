-- | One shape for a machine's step: a state threaded through, and the
-- commands it answers with written in order. A step made of several
-- transitions (@s -> (s, [c])@, the shape of every machine's own step)
-- is written in do-notation instead of threading @(s1, out1)@,
-- @(s2, out2)@ by hand.
--
-- Promise: 'runStep' gives the commands in the order they were written;
-- 'transition' runs its transition on the state as the earlier parts of
-- the step left it.
module Herd.Core.Step
  ( Step
  , runStep
  , transition
  , emit
  , current
  , update
  ) where

-- | A step of a machine with state @s@ answering with commands @c@. The
-- commands are kept as a difference list, so writing them costs no copy.
newtype Step s c a = Step (s -> (a, s, [c] -> [c]))

instance Functor (Step s c) where
  fmap f (Step g) = Step (\s -> let (a, s', w) = g s in (f a, s', w))

instance Applicative (Step s c) where
  pure a = Step (\s -> (a, s, id))
  Step f <*> Step g = Step (\s -> let (h, s1, w1) = f s; (a, s2, w2) = g s1 in (h a, s2, w1 . w2))

instance Monad (Step s c) where
  Step g >>= k = Step (\s -> let (a, s1, w1) = g s; Step h = k a; (b, s2, w2) = h s1 in (b, s2, w1 . w2))

-- | Run a step from this state: the state it leaves, and its commands.
runStep :: Step s c () -> s -> (s, [c])
runStep (Step g) s = let (_, s', w) = g s in (s', w [])

-- | A machine's own transition as part of a step.
transition :: (s -> (s, [c])) -> Step s c ()
transition t = Step (\s -> let (s', cs) = t s in ((), s', (cs ++)))

-- | Answer with these commands.
emit :: [c] -> Step s c ()
emit cs = Step (\s -> ((), s, (cs ++)))

-- | The state as the step has left it so far.
current :: Step s c s
current = Step (\s -> (s, s, id))

-- | Change the state.
update :: (s -> s) -> Step s c ()
update f = Step (\s -> ((), f s, id))
