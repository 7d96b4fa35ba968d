-- | Memory governance for the workers the master starts on its own host:
-- a few times a second the master reads each one's resident set
-- ("Herd.Node.Memory"), keeps the readings for the dashboard, and kills a
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
-- a worker whose process is gone is skipped, not an error. The shell's
-- state is reached only through the shell's own calls.
module Herd.Master.MemoryWatch
  ( withMemoryWatch
  ) where

import Control.Concurrent (threadDelay)
import Control.Concurrent.Async (withAsync)
import Control.Concurrent.STM (readTVarIO)
import Control.Exception (IOException, try)
import Control.Monad (forM, forM_, forever, when)
import qualified Data.Map.Strict as M
import qualified Data.Set as S
import Data.Maybe (catMaybes)
import Data.IORef
import Herd.Settings (Config (..), MemoryLimit (..))
import Herd.Core.Fault (LinkFault (..), renderFault)
import Herd.Core.Launch.MemoryPolicy (HostShares (..), MemoryVerdict (..), memoryVerdict, shareHosts)
import Herd.Core.Wire.Host (HostControl (..), HostLimit (..))
import Herd.Core.Master.Events (Event (..))
import Herd.Core.Master.Workers (WorkerInfo (..))
import Herd.Node.Memory (memoryWatchPeriod, residentBytes, resolveMemoryLimit)
import Herd.Master.Shell (HostHandle (..), Shell, shellHosts, shellRecordHosts, shellRecordLocalMemory, shellSetMemoryLimit, shellStep, shellWorkers)
import System.Posix.Unistd (getSystemID, nodeName)
import System.Posix.Signals (sigKILL, signalProcess)

-- | Run the body while the workers of this host's launch (group
-- @local@) are watched against the configured limit, for this many local
-- workers; with no limit, their memory is still read for the dashboard.
-- Under the automatic limit the host's budget is shared among every herd
-- worker on it: the master's own, and those of agents that joined from
-- the same host (each agent is told how many there are beside its own).
withMemoryWatch :: Config -> Shell -> Int -> IO a -> IO a
withMemoryWatch cfg sh localWorkers body = do
  mine <- nodeName <$> getSystemID
  limit0 <- resolveMemoryLimit (configWorkerMemoryLimit cfg) localWorkers
  -- the workers linked already learn their budget for shared values
  -- (those linking later learn it as they link)
  shellSetMemoryLimit sh limit0
  held <- newIORef (S.empty, M.empty)
  told <- newIORef (limit0, M.empty)
  withAsync (forever (share mine told >>= watchOnce held >> pause)) (const body)
  where
    pause = threadDelay (round (memoryWatchPeriod * 1e6))
    -- the host budgets shared out again; the local limit as it is now
    share mine told = do
      hosts <- shellHosts sh
      agents <- forM hosts $ \(hid, h) -> (\n -> (hid, h, n)) <$> hostMembers h
      let shares = shareHosts mine localWorkers [ (hid, hostName h, n) | (hid, h, n) <- agents ]
          here = M.findWithDefault 0 mine (sharesPerHost shares)
      (lastLimit, lastTold) <- readIORef told
      limit <- case configWorkerMemoryLimit cfg of
        MemoryLimitAuto -> do
          limit <- resolveMemoryLimit MemoryLimitAuto (max 1 here)
          when (limit /= lastLimit) $ shellSetMemoryLimit sh limit
          forM_ [ (hid, h) | (hid, h, _) <- agents ] $ \(hid, h) -> do
            let others = M.findWithDefault 0 hid (sharesElsewhere shares)
            when (M.findWithDefault 0 hid lastTold /= others) $
              hostTell h (HostMemoryLimit (HostLimitShared (fromIntegral others)))
          pure limit
        _ -> pure lastLimit
      writeIORef told (limit, sharesElsewhere shares)
      shellRecordHosts sh [ (name, n, if name == mine then limit else Nothing) | (name, n) <- M.toList (sharesPerHost shares) ]
      pure limit
    watchOnce held limit = do
      workers <- readTVarIO (shellWorkers sh)
      let pids = M.map infoPid (M.filter ((== "local") . infoGroup) workers)
      readings <- fmap catMaybes $ forM (M.toList pids) $ \(w, pid) -> fmap ((,) w) <$> residentBytes pid
      shellRecordLocalMemory sh (M.keysSet pids) (M.fromList readings)
      (was, previous) <- readIORef held
      let verdict = memoryVerdict limit was previous (M.keysSet workers) readings
          changes = map (`WorkerHeld` True) (verdictHold verdict) ++ map (`WorkerHeld` False) (verdictRelease verdict)
      writeIORef held (verdictHeld verdict, M.fromList readings)
      when (not (null changes)) $ shellStep sh True changes
      forM_ [ (w, rss, cap, pid) | Just cap <- [limit], (w, rss) <- verdictKill verdict, Just pid <- [M.lookup w pids] ] $
        \(w, rss, cap, pid) -> do
          let fault = MemoryExceeded rss cap
          configLog cfg ("herd: killing worker " ++ show w ++ " (pid " ++ show pid ++ "): " ++ renderFault fault)
          -- the core first, so the death is charged to memory, not to a closed link
          shellStep sh True [LinkDown w fault]
          _ <- try (signalProcess sigKILL (fromIntegral pid)) :: IO (Either IOException ())
          pure ()
