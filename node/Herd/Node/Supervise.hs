{-# LANGUAGE ScopedTypeVariables #-}
-- | Keeping local worker processes up: a process that dies is started
-- again (with the pauses of "Herd.Core.Launch.Backoff") and its replacement
-- joins the cluster as a new worker; one that keeps dying is left down
-- with a log line.
--
-- Promises:
--
-- * A slot is /awaited/ from the moment its worker is known lost (its link
--   went down, or its process exited) until its replacement has joined or
--   it is left down, and never longer than the start timeout per attempt:
--   the master's jobs wait for awaited workers instead of failing for want
--   of workers, and never wait forever.
-- * A worker whose link is gone but whose process lives on (stopped, or
--   hung) is killed after a short grace, so that it can be replaced.
-- * After 'stopSupervisor' nothing is restarted and every current process
--   is stopped.
module Herd.Node.Supervise
  ( Supervisor
  , SuperviseHooks (..)
  , startSupervisor
  , claimLoss
  , awaitedCount
  , restartCount
  , allDown
  , stopSupervisor
  ) where

import Control.Concurrent (forkIO, threadDelay)
import Control.Concurrent.STM
import Control.Exception
import Control.Monad (forM_, void, when)
import qualified Data.IntMap.Strict as IM
import Herd.Sys.Clock (monotonicSeconds)
import Herd.Core.Launch.Backoff
import Herd.Node.Local (LocalWorker (..), stopLocalWorkers)
import Herd.Node.Store (removeSpillsOf)
import System.Exit (ExitCode (..))
import System.Posix.Signals (sigKILL, signalProcess)
import System.Process (getPid, getProcessExitCode)

-- | What a supervisor needs from the cluster.
data SuperviseHooks = SuperviseHooks
  { hookSpawn        :: Maybe Int -> IO LocalWorker   -- ^ start a worker on this CPU
  , hookJoined       :: Int -> IO Bool                -- ^ has the worker of this process id joined?
  , hookAwaited      :: IO ()                         -- ^ the number of awaited workers changed
  , hookLog          :: String -> IO ()
  , hookStartTimeout :: Double                        -- ^ seconds a replacement has to join
  , hookBackoff      :: Backoff
  , hookClosing      :: IO Bool                       -- ^ is the cluster closing (no restart then)?
  , hookRestarts     :: ExitCode -> Bool              -- ^ whether a worker that ended so is replaced
  }

data Slot = Slot
  { slotWorker  :: !LocalWorker
  , slotPid     :: !(Maybe Int)
  , slotAwaited :: !Bool       -- ^ lost, and being replaced
  , slotLostAt  :: !(Maybe Double)  -- ^ when its link was seen to go down
  , slotDeaths  :: ![Double]   -- ^ recent deaths, newest first
  , slotDown    :: !Bool       -- ^ left down
  }

-- | The local workers of one cluster, kept up.
data Supervisor = Supervisor
  { supSlots    :: !(TVar (IM.IntMap Slot))
  , supStopping :: !(TVar Bool)
  , supRestarts :: !(TVar Int)
  }

-- | Watch these started workers, one slot each.
startSupervisor :: SuperviseHooks -> [LocalWorker] -> IO Supervisor
startSupervisor hooks workers = do
  slots <- mapM (\w -> (\p -> Slot w p False Nothing [] False) <$> pidOf w) workers
  sup <- Supervisor <$> newTVarIO (IM.fromList (zip [0 ..] slots)) <*> newTVarIO False <*> newTVarIO 0
  forM_ [0 .. length workers - 1] $ \i -> forkIO (watch hooks sup i `catch` \(_ :: SomeException) -> pure ())
  pure sup

pidOf :: LocalWorker -> IO (Maybe Int)
pidOf w = fmap fromIntegral <$> getPid (localHandle w)

-- | A worker's link went down: if its process is one of this supervisor's,
-- mark its slot awaited (it will be replaced). Returns whether it was.
claimLoss :: Supervisor -> Int -> IO Bool
claimLoss sup pid = do
  t <- monotonicSeconds
  atomically $ do
    stopping <- readTVar (supStopping sup)
    slots <- readTVar (supSlots sup)
    case [ (i, s) | (i, s) <- IM.toList slots, slotPid s == Just pid, not (slotDown s) ] of
      (i, s) : _ | not stopping -> do
        writeTVar (supSlots sup) (IM.insert i s { slotAwaited = True, slotLostAt = Just t } slots)
        pure True
      _ -> pure False

-- | How many workers are being replaced now.
awaitedCount :: Supervisor -> IO Int
awaitedCount sup = IM.size . IM.filter slotAwaited <$> readTVarIO (supSlots sup)

-- | How many times a worker was restarted.
restartCount :: Supervisor -> IO Int
restartCount = readTVarIO . supRestarts

-- | Whether every worker has ended for good (left down, or ended in a way
-- that is not restarted).
allDown :: Supervisor -> IO Bool
allDown sup = all slotDown . IM.elems <$> readTVarIO (supSlots sup)

-- | Restart nothing more, and stop every current worker process.
stopSupervisor :: Supervisor -> IO ()
stopSupervisor sup = do
  slots <- atomically $ do
    writeTVar (supStopping sup) True
    IM.elems <$> readTVar (supSlots sup)
  stopLocalWorkers (map slotWorker slots)

-- One slot's life: wait for its process to exit, then replace it.
watch :: SuperviseHooks -> Supervisor -> Int -> IO ()
watch hooks sup i = do
  code <- waitExit hooks sup i
  -- a worker killed cannot remove the shared values it spilled: its
  -- supervisor does ("Herd.Node.Store")
  (slotPid . (IM.! i) <$> readTVarIO (supSlots sup)) >>= mapM_ removeSpillsOf
  stopping <- halted hooks sup
  if stopping then pure () else if not (hookRestarts hooks code) then
    atomically $ modifyTVar' (supSlots sup) (IM.adjust (\s -> s { slotAwaited = False, slotDown = True }) i)
  else do
    t <- monotonicSeconds
    decision <- atomically $ do
      slots <- readTVar (supSlots sup)
      let s = slots IM.! i
          (recent, d) = afterDeath (hookBackoff hooks) t (slotDeaths s)
      writeTVar (supSlots sup) (IM.insert i s { slotDeaths = recent, slotAwaited = d /= LeaveDown
                                               , slotDown = d == LeaveDown } slots)
      pure (d, length recent, slotWorker s)
    hookAwaited hooks
    case decision of
      (LeaveDown, k, w) ->
        hookLog hooks ("herd: local worker" ++ cpuText w ++ " died " ++ show k ++ " times within "
                       ++ show (round (backoffWindow (hookBackoff hooks)) :: Int) ++ " s (last: " ++ exitText code
                       ++ "); it is left down")
      (RestartAfter pause, _, w) -> do
        hookLog hooks ("herd: local worker" ++ cpuText w ++ " " ++ exitText code ++ "; restarting it"
                       ++ (if pause > 0 then " in " ++ show pause ++ " s" else ""))
        threadDelay (round (pause * 1e6))
        again <- not <$> halted hooks sup
        when again $ restart hooks sup i w

-- Start the slot's worker again, wait for it to join, and watch it.
restart :: SuperviseHooks -> Supervisor -> Int -> LocalWorker -> IO ()
restart hooks sup i w = do
  fresh <- try (hookSpawn hooks (localCpu w))
  case fresh of
    Left (e :: SomeException) -> do
      hookLog hooks ("herd: could not restart a local worker: " ++ displayException e)
      watch hooks sup i
    Right w' -> do
      pid <- pidOf w'
      atomically $ do
        modifyTVar' (supSlots sup) (IM.adjust (\s -> s { slotWorker = w', slotPid = pid, slotLostAt = Nothing }) i)
        modifyTVar' (supRestarts sup) (+ 1)
      awaitJoin hooks sup i w' pid
      watch hooks sup i

-- Whether the supervisor or the cluster is stopping.
halted :: SuperviseHooks -> Supervisor -> IO Bool
halted hooks sup = (||) <$> readTVarIO (supStopping sup) <*> hookClosing hooks

-- The slot's process's exit; a process whose link died is killed after a grace.
waitExit :: SuperviseHooks -> Supervisor -> Int -> IO ExitCode
waitExit hooks sup i = do
  s <- (IM.! i) <$> readTVarIO (supSlots sup)
  code <- getProcessExitCode (localHandle (slotWorker s))
  case code of
    Just c -> pure c
    Nothing -> do
      stopping <- halted hooks sup
      if stopping then pure ExitSuccess else do
        t <- monotonicSeconds
        forM_ (slotLostAt s) $ \lost -> when (t - lost > 2) $
          mapM_ killPid (slotPid s)
        threadDelay 20000
        waitExit hooks sup i

-- The replacement joins, dies, or runs out of time (then it is killed and
-- counts as a death).
awaitJoin :: SuperviseHooks -> Supervisor -> Int -> LocalWorker -> Maybe Int -> IO ()
awaitJoin hooks sup i w pid = do
  deadline <- (+ hookStartTimeout hooks) <$> monotonicSeconds
  let loop = do
        joined <- maybe (pure False) (hookJoined hooks) pid
        exited <- getProcessExitCode (localHandle w)
        t <- monotonicSeconds
        stopping <- halted hooks sup
        if joined then do
          atomically $ modifyTVar' (supSlots sup) (IM.adjust (\s -> s { slotAwaited = False }) i)
          hookAwaited hooks
        else if exited /= Nothing || stopping then pure ()
        else if t > deadline then do
          hookLog hooks ("herd: a restarted local worker did not join within "
                         ++ show (hookStartTimeout hooks) ++ " s; killing it")
          mapM_ killPid pid
        else threadDelay 10000 >> loop
  loop

-- SIGKILL a process, which may have gone already.
killPid :: Int -> IO ()
killPid p = void (try (signalProcess sigKILL (fromIntegral p)) :: IO (Either SomeException ()))

cpuText :: LocalWorker -> String
cpuText w = maybe "" (\c -> " on CPU " ++ show c) (localCpu w)

exitText :: ExitCode -> String
exitText code = case code of
  ExitSuccess -> "exited"
  ExitFailure n | n < 0 -> "was killed by signal " ++ show (negate n)
                | otherwise -> "exited with code " ++ show n
