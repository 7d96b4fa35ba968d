{-# LANGUAGE StaticPointers #-}
-- | The Fibonacci farm of the HaLVM study: naive doubly recursive
-- Fibonacci, the same computation repeated as independent tasks.
--
-- The static pointer is bound at top level in a library module, the pattern
-- that links reliably with GHC 9.0 under optimisation.
module Herd.Examples.Fib
  ( fib
  , fibTask
  , fibSumReducer
  ) where

import GHC.StaticPtr (StaticPtr)
import Herd (Reducer, Task, named, reducer, task)

-- | Naive Fibonacci, deliberately exponential so each call is real work.
fib :: Int -> Int
fib n
  | n < 2 = n
  | otherwise = fib (n - 1) + fib (n - 2)

-- | The sum of 'fib' over the inputs, combined on the workers
-- ('Herd.farmReduce').
fibSumReducer :: StaticPtr (Reducer Int Int)
fibSumReducer = static (reducer fib (+))

-- | 'fib' as a task workers can run.
fibTask :: StaticPtr (Task Int Int)
fibTask = static (named "fib" (task fib))
