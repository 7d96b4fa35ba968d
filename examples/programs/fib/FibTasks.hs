{-# LANGUAGE StaticPointers #-}
-- | Counting nfib's calls as one task whose top calls are children that
-- idle workers steal ('spawnTask'): the worker that runs the task keeps
-- the smaller call of each pair itself and offers the larger; a worker
-- with nothing to do takes the oldest offer (the largest), and its own
-- offers in turn can be taken. Below the cut a call is counted plainly.
module FibTasks (fibTask, nfib) where

import GHC.StaticPtr (StaticPtr)
import Herd
import Herd.Par

-- | The calls naive Fibonacci makes, counted one by one.
nfib :: Int -> Int
nfib n
  | n < 2 = 1
  | otherwise = nfib (n - 1) + nfib (n - 2) + 1

-- | @(n, cut)@: nfib's calls for @n@, the calls above @cut@ stealable.
fibTask :: StaticPtr (Task (Int, Int) Int)
fibTask = static (named "nfib" (task calls))

calls :: (Int, Int) -> Int
calls (n, cut) = runPar (go n)
  where
    go k
      | k <= cut = pure (nfib k)
      | otherwise = do
          larger <- spawnTask fibTask (k - 1, cut)   -- offered: another worker may take it
          smaller <- go (k - 2)                      -- meanwhile, here
          x <- get larger                            -- run here if nobody took it
          pure (x + smaller + 1)
