{-# LANGUAGE StaticPointers #-}
-- | The pipeline's two stages, each a stream process: a list function
-- that runs on a worker, fed element by element and answering element by
-- element.
module PipelineTasks (squares, runningSums) where

import GHC.StaticPtr (StaticPtr)
import Herd

-- | Each number squared.
squares :: StaticPtr (Process Integer Integer)
squares = static (named "squares" (process (map (\x -> x * x))))

-- | The sums so far.
runningSums :: StaticPtr (Process Integer Integer)
runningSums = static (named "runningSums" (process (scanl1 (+))))
