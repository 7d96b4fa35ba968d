-- | The records of the broker of stolen "Herd.Par" children
-- ("Herd.Core.Steal"): the holders and what each has, the thieves
-- waiting, the steals asked and the children handed out, with the
-- indexes the broker looks things up by (holders ranked by their
-- children, the waiting thieves as a set, the children handed out by
-- holder).
--
-- Promise: every change made through this module keeps each index equal
-- to what its record says ('setHolding', 'notIdle', 'nowIdle',
-- 'handOut', 'handBack'; 'awayOf' makes the last one again). Pure.
module Herd.Core.Steal.Book
  ( StealCounts (..)
  , noStealCounts
  , Handed (..)
  , Steals (..)
  , emptySteals
  , emptyStealsFrom
  , holderFor
  , notIdle
  , nowIdle
  , handOut
  , handBack
  , awayOf
  , setHolding
  ) where

import qualified Data.Map.Strict as M
import Data.Ord (Down (..))
import qualified Data.Set as S
import Data.Sequence (Seq, (|>))
import qualified Data.Sequence as Seq
import Data.Word (Word64)
import Herd.Core.Base (WorkerId)

-- | What one worker's children went through, for watchers, as the worker
-- counts them (a host agent's own steals included).
data StealCounts = StealCounts
  { countSpawned :: !Int -- ^ stealable children this worker spawned, as it last said
  , countStolen :: !Int  -- ^ children taken from this worker by others
  , countRan    :: !Int  -- ^ children of others this worker ran
  , countRerun  :: !Int  -- ^ its children it ran itself after their thief was lost
  , countStopped :: !Int -- ^ stolen children it stopped because their holder no longer wanted them
  } deriving (Eq, Show)

-- | Nothing stolen.
noStealCounts :: StealCounts
noStealCounts = StealCounts 0 0 0 0 0

-- | A child handed to a thief.
data Handed = Handed
  { hThief  :: !WorkerId  -- ^ who runs it
  , hHolder :: !WorkerId  -- ^ who spawned it
  , hChild  :: !Word64    -- ^ its number in its holder's pool
  } deriving (Eq, Show)

-- | The broker's state.
data Steals = Steals
  { stHolding :: !(M.Map WorkerId Int)   -- ^ children each holder has, as last said, less those asked for since
  , stRanked  :: !(S.Set (Down Int, WorkerId))
    -- ^ the same holders, most children first (the holder asked is the first that is not the thief)
  , stIdle    :: !(Seq WorkerId)          -- ^ thieves waiting for a holder, oldest first
  , stIdleSet :: !(S.Set WorkerId)        -- ^ the same thieves, to look one up
  , stAsked   :: !(M.Map Word64 (Maybe WorkerId, WorkerId))
    -- ^ steals asked of a holder: the thief ('Nothing' once it was lost) and the holder
  , stHanded  :: !(M.Map Word64 Handed)  -- ^ steals whose child a thief runs
  , stAway    :: !(M.Map WorkerId (M.Map Word64 WorkerId))
    -- ^ the same by holder: each steal of its children and the thief running it
  , stNext    :: !Word64                 -- ^ the next steal's number
  , stCounts  :: !(M.Map WorkerId StealCounts)  -- ^ each worker's counts, as it last said
  , stBrokered :: !Int                   -- ^ children handed to thieves so far
  } deriving (Eq, Show)

-- | No holders, no thieves.
emptySteals :: Steals
emptySteals = emptyStealsFrom 1

-- | No holders, no thieves; steals numbered from this one on (a host
-- agent's own numbers are apart from the master's).
emptyStealsFrom :: Word64 -> Steals
emptyStealsFrom first = Steals M.empty S.empty Seq.empty S.empty M.empty M.empty M.empty first M.empty 0

-- | The holder with the most children (the lowest number among equals)
-- other than this thief.
holderFor :: WorkerId -> Steals -> Maybe WorkerId
holderFor t st = case S.lookupMin (stRanked st) of
  Just first@(_, v)
    | v /= t -> Just v
    | otherwise -> snd <$> S.lookupGT first (stRanked st)
  Nothing -> Nothing

-- | Off the queue of waiting thieves.
notIdle :: WorkerId -> Steals -> Steals
notIdle t st
  | S.member t (stIdleSet st) = st { stIdle = Seq.filter (/= t) (stIdle st), stIdleSet = S.delete t (stIdleSet st) }
  | otherwise = st

-- | At the end of the queue of waiting thieves.
nowIdle :: WorkerId -> Steals -> Steals
nowIdle t st = st { stIdle = stIdle st |> t, stIdleSet = S.insert t (stIdleSet st) }

-- | A child handed to a thief, and one back from it.
handOut, handBack :: Word64 -> Handed -> Steals -> Steals
handOut n h st = st { stHanded = M.insert n h (stHanded st)
                    , stAway = M.insertWith M.union (hHolder h) (M.singleton n (hThief h)) (stAway st) }
handBack n h st = st { stHanded = M.delete n (stHanded st), stAway = M.update dropIt (hHolder h) (stAway st) }
  where dropIt m = let m' = M.delete n m in if M.null m' then Nothing else Just m'

-- | The steals by holder, made again from the steals.
awayOf :: M.Map Word64 Handed -> M.Map WorkerId (M.Map Word64 WorkerId)
awayOf handed = M.fromListWith M.union [ (hHolder h, M.singleton n (hThief h)) | (n, h) <- M.toList handed ]

-- | A holder has this many children (none: it is no holder).
setHolding :: WorkerId -> Int -> Steals -> Steals
setHolding v k st = st { stHolding = holding', stRanked = ranked' }
  where
    old = M.lookup v (stHolding st)
    unranked = maybe (stRanked st) (\k0 -> S.delete (Down k0, v) (stRanked st)) old
    (holding', ranked')
      | k > 0 = (M.insert v k (stHolding st), S.insert (Down k, v) unranked)
      | otherwise = (M.delete v (stHolding st), unranked)
