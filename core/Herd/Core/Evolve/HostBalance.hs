-- | The master's balance between hosts under two-level evolve, pure:
-- before a call, which of the call's states to move from a host that
-- would run long to hosts that would idle, judged per host by its states
-- per worker (the call's time there if every step costs the same).
--
-- Promises (checked by @HostLossSpec@): only the call's states move, each
-- at most once, from its own host to another host with workers; nothing
-- moves while every host is within the slack of the mean; after the
-- moves no host with workers is above the mean by more than the slack,
-- and no receiving host ends above the mean rounded up.
module Herd.Core.Evolve.HostBalance
  ( HostLoad (..)
  , hostMoves
  , moveSlack
  ) where

import Data.List (foldl', sortOn)
import Herd.Core.Evolve.StateMap (StateId)

-- | One host as the balance sees it: its workers and the call's states it holds.
data HostLoad = HostLoad
  { loadHost    :: !Int
  , loadWorkers :: !Int
  , loadStates  :: ![StateId]
  } deriving (Eq, Show)

-- | How far above the mean a host may run before states leave it, in
-- steps per worker: a move's round trip in steps (seconds over the mean
-- step), and at least one step, so that moves pay for themselves.
moveSlack :: Maybe Double -> Maybe Double -> Double
moveSlack (Just roundTrip) (Just step) | step > 0 = max 1 (roundTrip / step)
moveSlack _ _ = 1

-- | The moves (state, from, to) that bring every host within the slack
-- (steps per worker) of the mean. A host without workers gives all its states.
hostMoves :: Double -> [HostLoad] -> [(StateId, Int, Int)]
hostMoves slack loads
  | workers == 0 || null donors = []
  | otherwise = assign (concatMap give donors) receivers
  where
    workers = sum [ loadWorkers l | l <- loads ]
    total = sum [ length (loadStates l) | l <- loads ]
    mean = fromIntegral total / fromIntegral workers :: Double
    time :: HostLoad -> Double
    time l = fromIntegral (length (loadStates l)) / fromIntegral (loadWorkers l)
    share l = ceiling (mean * fromIntegral (loadWorkers l)) :: Int
    donors = [ l | l <- loads, loadWorkers l == 0 && not (null (loadStates l))
                               || loadWorkers l > 0 && time l > mean + slack ]
    -- a donor keeps its share rounded up, and gives the rest
    give l = [ (s, loadHost l) | s <- drop (if loadWorkers l == 0 then 0 else share l) (loadStates l) ]
    -- receivers take up to their share rounded up, the idlest first
    receivers = [ (loadHost l, room) | l <- sortOn time [ l | l <- loads, loadWorkers l > 0, time l < mean ]
                                     , let room = share l - length (loadStates l), room > 0 ]
    assign leaving rooms = reverse (fst (foldl' place ([], rooms) leaving))
    place (acc, rooms) (s, from) = case rooms of
      (to, room) : rest -> ((s, from, to) : acc, if room > 1 then (to, room - 1) : rest else rest)
      [] -> (acc, [])
