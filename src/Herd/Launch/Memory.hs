{-# LANGUAGE ScopedTypeVariables #-}
-- | Memory governance for the workers the master starts on its own host:
-- a few times a second the master reads each one's resident set (Linux's
-- @/proc/PID/status@), keeps the readings for the dashboard, and kills a
-- worker above its limit, after telling the core why
-- ('Herd.Core.Fault.MemoryExceeded'), so that the tasks it ran are
-- charged with its death and a task that always blows the limit is named.
-- The supervisor then restarts the worker, as after any death.
--
-- Above 'softShare' of its limit a worker is held: the scheduler gives it
-- no new batch while another worker can take one (as Dask's nanny pauses
-- a worker at 80%), until it falls back below. What to hold, release and
-- kill is decided by "Herd.Core.Launch.MemoryPolicy".
--
-- Promises: only workers of this host's own launch are read or killed
-- (never one that joined by hand, nor one on another host); the core hears
-- of the kill before the link's end, so the death is charged to memory;
-- a worker whose process is gone is skipped, not an error.
module Herd.Launch.Memory
  ( resolveMemoryLimit
  , residentBytes
  , hostMemoryBytes
  , withMemoryWatch
  , memoryWatchPeriod
  ) where

import Control.Concurrent (threadDelay)
import Control.Concurrent.MVar (withMVar)
import Control.Concurrent.Async (withAsync)
import Control.Concurrent.STM
import Control.Exception (IOException, try)
import Control.Monad (forM, forM_, forever, when)
import Data.Char (isDigit, isSpace)
import Data.List (isPrefixOf)
import qualified Data.Map.Strict as M
import qualified Data.Set as S
import Data.Maybe (catMaybes)
import Herd.Config (Config (..), MemoryLimit (..))
import Herd.Core.Fault (LinkFault (..), renderFault)
import Herd.Core.Launch.MemoryPolicy (MemoryVerdict (..), memoryVerdict)
import Data.IORef
import Herd.Core.Master.Events (Event (..))
import Herd.Core.Master.Workers (WorkerInfo (..))
import Herd.Master.Shell (Shell, shellStep, shellWorkers)
import Herd.Master.Link (WorkerLink (..), sendHoldBudget, trySync)
import Herd.Master.ShellState (Shell (..), ShellState (..))
import System.Posix.Signals (sigKILL, signalProcess)

-- | How often each watched worker's memory is read: 0.2 s.
memoryWatchPeriod :: Double
memoryWatchPeriod = 0.2

-- | The limit in bytes for this many local workers ('Nothing': none).
-- 'MemoryLimitAuto' shares out 90% of this host's memory.
resolveMemoryLimit :: MemoryLimit -> Int -> IO (Maybe Int)
resolveMemoryLimit limit workers = case limit of
  NoMemoryLimit -> pure Nothing
  MemoryLimitMiB mib -> pure (Just (mib * 1024 * 1024))
  MemoryLimitAuto
    | workers <= 0 -> pure Nothing
    | otherwise -> fmap (\total -> total `div` 10 * 9 `div` workers) <$> hostMemoryBytes

-- | This host's memory ('Nothing' where @/proc/meminfo@ says nothing).
hostMemoryBytes :: IO (Maybe Int)
hostMemoryBytes = fmap (* 1024) . kibField "MemTotal:" <$> readOr "/proc/meminfo"

-- | A process's resident memory in bytes ('Nothing': no such process).
residentBytes :: Int -> IO (Maybe Int)
residentBytes pid = fmap (* 1024) . kibField "VmRSS:" <$> readOr ("/proc/" ++ show pid ++ "/status")

-- A "Name: N kB" field of a /proc file.
kibField :: String -> String -> Maybe Int
kibField name text = case [ dropWhile isSpace (drop (length name) l) | l <- lines text, name `isPrefixOf` l ] of
  v : _ | ds@(_ : _) <- takeWhile isDigit v, length ds < 16 -> Just (read ds)
  _ -> Nothing

readOr :: FilePath -> IO String
readOr path = do
  r <- try (readFile path >>= \s -> length s `seq` pure s)
  pure (either (\(_ :: IOException) -> "") id r)

-- | Run the body while the workers of this host's launch (group
-- @local@) are watched against the configured limit, for this many local
-- workers; with no limit, their memory is still read for the dashboard.
withMemoryWatch :: Config -> Shell -> Int -> IO a -> IO a
withMemoryWatch cfg sh localWorkers body = do
  limit <- resolveMemoryLimit (configWorkerMemoryLimit cfg) localWorkers
  atomically (modifyTVar' (shMemory sh) (\(_, m) -> (limit, m)))
  -- the workers linked already learn their budget for shared values
  -- (those linking later learn it as they link)
  mapM_ (shellHoldBudgets sh) limit
  held <- newIORef S.empty
  if localWorkers <= 0 then body else withAsync (forever (watchOnce held limit >> pause)) (const body)
  where
    pause = threadDelay (round (memoryWatchPeriod * 1e6))
    watchOnce held limit = do
      workers <- readTVarIO (shellWorkers sh)
      let pids = M.map infoPid (M.filter ((== "local") . infoGroup) workers)
      readings <- fmap catMaybes $ forM (M.toList pids) $ \(w, pid) -> fmap ((,) w) <$> residentBytes pid
      -- host agents report their own workers' readings beside these
      atomically (modifyTVar' (shMemory sh) (\(l, m) -> (l, M.union (M.fromList readings)
                                                               (M.filterWithKey (\w _ -> M.member w workers && not (M.member w pids)) m))))
      was <- readIORef held
      let verdict = memoryVerdict limit was (M.keysSet workers) readings
          changes = map (`WorkerHeld` True) (verdictHold verdict) ++ map (`WorkerHeld` False) (verdictRelease verdict)
      writeIORef held (verdictHeld verdict)
      when (not (null changes)) $ shellStep sh True changes
      forM_ [ (w, rss, cap, pid) | Just cap <- [limit], (w, rss) <- verdictKill verdict, Just pid <- [M.lookup w pids] ] $
        \(w, rss, cap, pid) -> do
          let fault = MemoryExceeded rss cap
          configLog cfg ("herd: killing worker " ++ show w ++ " (pid " ++ show pid ++ "): " ++ renderFault fault)
          -- the core first, so the death is charged to memory, not to a closed link
          shellStep sh True [LinkDown w fault]
          _ <- try (signalProcess sigKILL (fromIntegral pid)) :: IO (Either IOException ())
          pure ()

-- Tell every worker on a link of its own the budget for the shared values
-- it keeps in memory under this memory limit (those linking later hear
-- it as they link, "Herd.Master.Shell").
shellHoldBudgets :: Shell -> Int -> IO ()
shellHoldBudgets sh limit = withMVar (shState sh) $ \ss ->
  forM_ [ l | l <- M.elems (ssLinks ss), Nothing <- [wlHost l] ] $ \l -> trySync (sendHoldBudget l limit)
