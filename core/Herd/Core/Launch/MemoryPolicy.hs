-- | What the master does about its workers' memory, decided from one
-- round of readings: which workers to hold (no new batch while another
-- worker can take one), which to release, and which to kill. The watcher
-- ("Herd.Node.Memory") reads the memory and carries the verdict out.
--
-- A worker is held too while it grows fast (more than 'growthShare' of
-- the limit since the last round): a task that is filling its memory is
-- fed nothing more, and the farm does not copy it as a straggler
-- ("Herd.Core.Farm.Straggle"), which would double what it takes.
--
-- Promises: a worker is held only while its reading is at most the limit
-- and either above the soft share of it or grown by more than the growth
-- share since the last round; one above the limit is killed (and not
-- held); holds and releases name only changes from the last round; with
-- no limit, nothing is held or killed.
module Herd.Core.Launch.MemoryPolicy
  ( MemoryVerdict (..)
  , memoryVerdict
  , softShare
  , growthShare
  , heldBudget
  , HostShares (..)
  , shareHosts
  ) where

import qualified Data.Map.Strict as M
import qualified Data.Set as S
import Herd.Core.Base (WorkerId)

-- | The share of its limit above which a worker gets no new work: 0.8.
softShare :: Double
softShare = 0.8

-- | The share of its limit by which a worker's reading may grow from one
-- round to the next (a fifth of a second apart) before it is held as
-- growing: 0.1 (at that pace it reaches the limit within two seconds).
growthShare :: Double
growthShare = 0.1

-- | How one memory budget per host is shared out: the herd workers on
-- each host, and for each agent the workers on its host that are not its
-- own (it shares its host's budget among its own and those).
data HostShares = HostShares
  { sharesPerHost   :: !(M.Map String Int)   -- ^ herd workers on each host, by its name
  , sharesElsewhere :: !(M.Map Int Int)      -- ^ per agent (by its number): the others on its host
  } deriving (Eq, Show)

-- | Share out the hosts, given the master's host name, its own workers
-- there, and each agent's number, host name and workers.
shareHosts :: String -> Int -> [(Int, String, Int)] -> HostShares
shareHosts mine local agents =
  let perHost = M.fromListWith (+) ((mine, max 0 local) : [ (name, max 0 n) | (_, name, n) <- agents ])
  in HostShares perHost (M.fromList [ (a, M.findWithDefault 0 name perHost - max 0 n) | (a, name, n) <- agents ])

-- | The bytes of shared values (encoded) a worker with this memory limit
-- keeps in memory before it spills them to disk ("Herd.Node.Store"): a
-- quarter of the limit. A value read by a task is kept decoded too, about
-- as large again, which leaves half the limit for the tasks' own work.
heldBudget :: Int -> Int
heldBudget limit = limit `div` 4

-- | One round's decisions.
data MemoryVerdict = MemoryVerdict
  { verdictHeld    :: !(S.Set WorkerId)   -- ^ the workers held after this round
  , verdictHold    :: ![WorkerId]         -- ^ newly held
  , verdictRelease :: ![WorkerId]         -- ^ no longer held, and still connected
  , verdictKill    :: ![(WorkerId, Int)]  -- ^ over the limit, with their readings
  } deriving (Eq, Show)

-- | Decide, given the limit in bytes ('Nothing': none), the workers held
-- after the last round and that round's readings, the workers connected
-- now, and this round's readings (resident bytes per worker).
memoryVerdict :: Maybe Int -> S.Set WorkerId -> M.Map WorkerId Int -> S.Set WorkerId -> [(WorkerId, Int)] -> MemoryVerdict
memoryVerdict Nothing was _ present _ = MemoryVerdict S.empty [] (S.toList (was `S.intersection` present)) []
memoryVerdict (Just cap) was previous present readings = MemoryVerdict
  { verdictHeld = held
  , verdictHold = S.toList (held `S.difference` was)
  , verdictRelease = S.toList ((was `S.difference` held) `S.intersection` present)
  , verdictKill = [ (w, rss) | (w, rss) <- readings, rss > cap ]
  }
  where
    soft = floor (softShare * fromIntegral cap) :: Int
    growth = floor (growthShare * fromIntegral cap) :: Int
    growing w rss = maybe False (\p -> rss - p > growth) (M.lookup w previous)
    held = S.fromList [ w | (w, rss) <- readings, rss <= cap, rss > soft || growing w rss ]
