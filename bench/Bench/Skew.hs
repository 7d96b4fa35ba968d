-- | @herd bench skew@: the skew case of FP Complete's article. Ten states
-- on two workers, nine whose step takes 1 s and one (the middle one) that
-- takes 10 s; a child takes what its parent took. The optimum is 10 s, an
-- even split 14 s, first come first served 12 s. The first call cannot
-- know the costs; later calls use the step times measured before (longest
-- first), and should come close to the optimum.
module Bench.Skew
  ( Options (..)
  , run
  ) where

import Control.Monad (when)
import qualified Data.Map.Strict as M
import Data.List (foldl', sort)
import Bench.Common (timed)
import Herd
import Herd.Config
import Herd.Examples.Skew
import Herd.Core.Report
import System.IO

-- | Benchmark settings.
data Options = Options
  { optSteps  :: Int
  , optStates :: Int
  , optUnit   :: Double
  , optSlow   :: Double
  , optLoop   :: Maybe MasterLoop
  , optJson   :: Bool
  , optDashboard :: Maybe String  -- ^ serve the live dashboard at this HOST:PORT
  }

-- | Run the benchmark: one row per call.
run :: Options -> IO ()
run o = do
  hSetBuffering stdout LineBuffering
  let costs = skewStates (optStates o) (optUnit o) (optSlow o)
      optimum = max (maximum costs) (sum costs / 2)
      fcfs = firstComeFirstServed 2 costs
      cfg = defaultConfig { configWorkers = Just 2, configDashboard = optDashboard o, configMasterLoop = maybe EpollLoop id (optLoop o) }
      opts = defaultEvolveOptions
  rows <- withCluster cfg $ \cluster -> do
    ids <- resetStatesWith opts cluster skewStep costs
    let go _ 0 = pure []
        go current k = do
          (secs, (out, _)) <- timed (evolveManyWith opts cluster skewStep (M.fromList [ (i, ()) | i <- current ]))
          let next = concat [ map fst (M.findWithDefault [] i out) | i <- current ]
          hPutStrLn stderr ("  step " ++ show (optSteps o - k + 1) ++ ": " ++ fixed 3 secs ++ " s")
          (secs :) <$> go next (k - 1)
    go ids (optSteps o)
  putStr $ renderTable ["step", "seconds", "optimum", "ratio"]
    [ [show n, fixed 3 s, fixed 1 optimum, fixed 3 (s / optimum)] | (n, s) <- zip [1 :: Int ..] rows ]
  putStrLn ("first come first served would take " ++ fixed 1 fcfs ++ " s; an even split "
            ++ fixed 1 (evenSplit costs) ++ " s")
  when (optJson o) $ putStrLn $ renderJson $ JObject
    [ ("bench", JString "skew")
    , ("rows", JArray [ JObject [ ("step", JInt (fromIntegral n)), ("seconds", JNumber s), ("optimum", JNumber optimum) ]
                      | (n, s) <- zip [1 :: Int ..] rows ]) ]

-- Each state in input order goes to the worker free first.
firstComeFirstServed :: Int -> [Double] -> Double
firstComeFirstServed n = maximum . foldl' (\free c -> let (t : rest) = sort free in t + c : rest) (replicate n 0)

-- The first half of the states on one worker, the rest on the other.
evenSplit :: [Double] -> Double
evenSplit costs = let (a, b) = splitAt (length costs `div` 2) costs in max (sum a) (sum b)
