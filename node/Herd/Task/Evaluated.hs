{-# LANGUAGE MagicHash, UnboxedTuples, UnliftedFFITypes #-}
-- | Whether a value is evaluated, without evaluating it: a look at the
-- pointer and, when that does not tell, at the closure it points to. A
-- stream's feeder uses it to tell an input element that is ready from one
-- still to be computed, so that ready ones can travel together
-- ("Herd.Task.StreamSend").
--
-- GHC tags a pointer to a constructor it has built or found evaluated; a
-- pointer to a thunk evaluated since (until the next garbage collection
-- shortens it) or to an evaluated top-level value carries no tag, so then
-- a small C function ("cbits/herd_heap.c") follows the indirection.
--
-- Promise: 'True' only for a value in weak head normal form. 'False' for
-- anything not yet evaluated, being evaluated by a thread, or a function:
-- callers treat it as "maybe not ready", so a wrong 'False' costs only
-- speed. Pointer tags are 3 bits on the 64-bit platforms herd builds for.
module Herd.Task.Evaluated
  ( isEvaluated
  ) where

import GHC.Exts (Addr#, Int (..), addr2Int#, andI#, anyToAddr#, isTrue#, (/=#))
import GHC.IO (IO (..), unIO)

-- | Whether this value is in weak head normal form already.
isEvaluated :: a -> IO Bool
isEvaluated x = IO $ \s -> case anyToAddr# x s of
  (# s', a #)
    | isTrue# (andI# (addr2Int# a) 7# /=# 0#) -> (# s', True #)
    -- the call is an IO action, so it happens here, in order: nothing
    -- allocates between taking the address and the unsafe call, so the
    -- collector cannot move the closure in between (a pure call was put
    -- off into a thunk by the optimiser, to run after the collector might
    -- have moved the closure)
    | otherwise -> case unIO (c_whnf a) s' of
        (# s'', I# r #) -> (# s'', isTrue# (r /=# 0#) #)
{-# INLINE isEvaluated #-}

foreign import ccall unsafe "herd_whnf" c_whnf :: Addr# -> IO Int
