-- | The master's balance between hosts under two-level evolve, pure:
-- before a call, which of the call's states to move from a host that
-- would run long to hosts that would idle, judged per host in whole
-- steps per worker: a host of @w@ workers holding @n@ states of like cost
-- runs @ceiling (n / w)@ steps, so the call takes as long as the host
-- with the most. The call's best is @ceiling@ of the mean over all
-- workers; a host beyond it by more than a move costs gives the states
-- above that, and hosts below it take them. (Judged against the mean
-- plus one step, as before, a host 3% over its share never gave: at 512
-- simulated workers on 4 hosts, 16 states each, the resampling's few
-- dozen extra states on one host made every call a step longer.)
--
-- Promises (checked by @HostBalanceSpec@): only the call's states move,
-- each at most once, from its own host to another host with workers;
-- nothing moves while every host with workers is within the slack of the
-- best; no receiving host ends above the best; a host without workers
-- gives all its states; after the moves no host is beyond the best by
-- more than the slack unless the others had no room left.
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

-- | Whole steps a move between hosts costs: its round trip over the
-- mean step, rounded down (a move before the call waits for both hosts,
-- so a host is worth relieving only of steps beyond that). None until
-- both are measured.
moveSlack :: Maybe Double -> Maybe Double -> Int
moveSlack (Just roundTrip) (Just step) | step > 0 = floor (roundTrip / step)
moveSlack _ _ = 0

-- | The moves (state, from, to) that bring every host within the slack
-- (whole steps) of the call's best, as far as the others have room.
hostMoves :: Int -> [HostLoad] -> [(StateId, Int, Int)]
hostMoves slack loads
  | workers == 0 || null donors = []
  | otherwise = assign (concatMap give donors) receivers
  where
    workers = sum [ loadWorkers l | l <- loads ]
    total = sum [ length (loadStates l) | l <- loads ]
    best = (total + workers - 1) `div` workers
    steps l = (length (loadStates l) + loadWorkers l - 1) `div` loadWorkers l
    share l = best * loadWorkers l
    donors = [ l | l <- loads, loadWorkers l == 0 && not (null (loadStates l))
                               || loadWorkers l > 0 && steps l > best + slack ]
    -- a donor keeps what fits in the best, and gives the rest
    give l = [ (s, loadHost l) | s <- drop (if loadWorkers l == 0 then 0 else share l) (loadStates l) ]
    -- receivers take up to what fits in the best, the idlest first
    receivers = [ (loadHost l, room) | l <- sortOn load [ l | l <- loads, loadWorkers l > 0 ]
                                     , let room = share l - length (loadStates l), room > 0 ]
    load l = fromIntegral (length (loadStates l)) / fromIntegral (loadWorkers l) :: Double
    assign leaving rooms = reverse (fst (foldl' place ([], rooms) leaving))
    place (acc, rooms) (s, from) = case rooms of
      (to, room) : rest -> ((s, from, to) : acc, if room > 1 then (to, room - 1) : rest else rest)
      [] -> (acc, [])
