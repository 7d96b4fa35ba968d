{-# LANGUAGE ScopedTypeVariables #-}
-- | A host agent's memory governance over its workers, as the master's
-- over its own ("Herd.Node.Memory"): each round, every worker's
-- resident memory goes to the master for the dashboard, a worker above
-- the soft share is held (fed no new work) until it falls back, and one
-- above the limit is reported gone for memory, then killed (its
-- supervisor starts it again). The decisions are the pure
-- 'Herd.Core.Launch.MemoryPolicy.memoryVerdict'.
--
-- Promise: a worker killed for memory is reported to the master before
-- it is killed, so its death is charged to memory, not to a closed link.
module Herd.Node.Agent.Memory
  ( AgentWorkers (..)
  , hostLimitBytes
  , watchAgentMemory
  ) where

import Control.Exception (IOException, try)
import Control.Monad (forM, forM_, unless, void)
import Data.IORef
import Data.Maybe (catMaybes)
import qualified Data.Map.Strict as M
import qualified Data.Set as S
import Herd.Settings (MemoryLimit (..))
import Herd.Core.Fault (LinkFault (..), renderFault)
import Herd.Core.Launch.MemoryPolicy (MemoryVerdict (..), memoryVerdict)
import Herd.Core.Wire.Host
import Herd.Node.Memory (resolveMemoryLimit, residentBytes)
import Herd.Sys.Log (logToStderr)
import System.Posix.Signals (sigKILL, signalProcess)

-- | What the watch needs of the agent: its workers (number and process),
-- the limit the master set, the way to speak on the host link, and the
-- way to let a worker go.
data AgentWorkers = AgentWorkers
  { awWorkers :: IO [(Int, Int)]          -- ^ each worker's number and process
  , awLimit   :: IO HostLimit             -- ^ the limit the master sent
  , awControl :: HostControl -> IO ()     -- ^ say this to the master
  , awFlush   :: IO ()                    -- ^ send what was said now
  , awGone    :: Int -> GoneReason -> IO ()
    -- ^ a worker is gone for this reason: the agent forgets it, closes
    -- its link and tells the master ("Herd.Core.Agent")
  }

-- | The bytes each of this many workers may hold under a host limit
-- ('Nothing': no limit).
hostLimitBytes :: HostLimit -> Int -> IO (Maybe Int)
hostLimitBytes setting n = case setting of
  NoHostLimit -> pure Nothing
  HostLimitBytes b -> pure (Just (fromIntegral b))
  HostLimitAuto -> resolveMemoryLimit MemoryLimitAuto (max 1 n)
  HostLimitShared others -> resolveMemoryLimit MemoryLimitAuto (max 1 (n + fromIntegral others))

-- | One round of the watch; the workers held after the last round, and
-- its readings, are in the reference, and are updated.
watchAgentMemory :: AgentWorkers -> IORef (S.Set Int, M.Map Int Int) -> IO ()
watchAgentMemory aw heldRef = do
  ls <- awWorkers aw
  readings <- fmap catMaybes $ forM ls $ \(w, pid) -> fmap ((,) w) <$> residentBytes pid
  limit <- awLimit aw >>= \setting -> hostLimitBytes setting (length ls)
  (was, previous) <- readIORef heldRef
  let verdict = memoryVerdict limit was previous (S.fromList (map fst ls)) readings
  writeIORef heldRef (verdictHeld verdict, M.fromList readings)
  unless (null readings) $
    awControl aw (WorkerMemory [ (fromIntegral w, fromIntegral b) | (w, b) <- readings ])
  forM_ (verdictHold verdict) $ \w -> awControl aw (WorkerHold (fromIntegral w) True)
  forM_ (verdictRelease verdict) $ \w -> awControl aw (WorkerHold (fromIntegral w) False)
  forM_ [ (w, rss, cap) | Just cap <- [limit], (w, rss) <- verdictKill verdict ] $ \(w, rss, cap) ->
    forM_ (lookup w ls) $ \pid -> do
      logToStderr ("herd agent: killing worker " ++ show w ++ " (pid " ++ show pid ++ "): "
                   ++ renderFault (MemoryExceeded rss cap))
      awGone aw w (GoneMemory (fromIntegral rss) (fromIntegral cap))
      void (try (signalProcess sigKILL (fromIntegral pid)) :: IO (Either IOException ()))
  awFlush aw
