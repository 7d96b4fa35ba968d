{-# LANGUAGE InterruptibleFFI #-}
-- | Simulated cost: a task or evolve step that stands for work it does not
-- do. In a worker process the cost is a sleep on the computing thread's
-- own OS thread, so hundreds of workers fit on a few cores; in a
-- simulated host ("Herd.Simulate.Host"), where one process plays many
-- workers from one event loop, nothing sleeps: the cost is added up while
-- the step runs and the host answers the master that much later, from its
-- timer wheel. A thread the host gives its own account ('withOwnCost':
-- a simulated worker running a "Herd.Par" computation that others may
-- steal from) adds its cost there instead, and sleeps it off
-- ('payOwnCost') before anything it does can be seen.
--
-- Promise: 'simulatedWork' returns its second argument unchanged; only
-- when it returns differs between the two kinds of process.
--
-- Why a process-wide cell: 'simulatedWork' is pure and is evaluated deep
-- inside the user's step, where nothing of the host can be passed in. It
-- is 'Nothing' in every process but a simulated host (a test and
-- benchmark harness, "Herd.Simulate.Host"), which sets it once as it
-- starts and is then the only one to read and reset it.
module Herd.Task.WorkCost
  ( simulatedWork
    -- * For the simulated host
  , beginSimulatedHost
  , takeSimulatedCost
  , withOwnCost
  , payOwnCost
  , sleepOsThread
  ) where

import Control.Concurrent (ThreadId, myThreadId, threadDelay)
import Control.Exception (bracket_)
import Data.IORef
import qualified Data.Map.Strict as M
import Foreign.C.Types (CInt (..), CUInt (..))
import System.IO.Unsafe (unsafePerformIO)

-- 'Nothing' in a worker process; in a simulated host, the cost added up
-- since the host last took it.
simulatedCost :: IORef (Maybe Double)
simulatedCost = unsafePerformIO (newIORef Nothing)
{-# NOINLINE simulatedCost #-}

-- The threads of a simulated host that keep their own account of cost.
ownAccounts :: IORef (M.Map ThreadId (IORef Double))
ownAccounts = unsafePerformIO (newIORef M.empty)
{-# NOINLINE ownAccounts #-}

ownAccount :: IO (Maybe (IORef Double))
ownAccount = do
  accounts <- readIORef ownAccounts
  if M.null accounts then pure Nothing else M.lookup <$> myThreadId <*> pure accounts

-- | The value, once this many seconds of simulated work have passed.
-- Evaluating it in a worker sleeps that long (a blocking call: the rest of
-- the runtime goes on); in a simulated host it returns at once and the
-- host delays the answer instead. Zero or less costs nothing.
simulatedWork :: Double -> a -> a
simulatedWork secs x
  | secs <= 0 = x
  | otherwise = unsafePerformIO $ do
      hosting <- readIORef simulatedCost
      case hosting of
        Just _ -> do
          own <- ownAccount
          case own of
            Just cell -> modifyIORef' cell (+ secs)
            Nothing -> atomicModifyIORef' simulatedCost (\c -> (fmap (+ secs) c, ()))
        Nothing -> sleepOsThread (min 4000 secs)
      pure x
{-# NOINLINE simulatedWork #-}

foreign import ccall interruptible "usleep" c_usleep :: CUInt -> IO CInt

-- | Sleep this many seconds (rounded up to a microsecond) on the calling
-- OS thread, not through the runtime's timer: the rest of the runtime goes
-- on, and no timer thread is woken.
sleepOsThread :: Double -> IO ()
sleepOsThread secs = () <$ c_usleep (ceiling (secs * 1e6))

-- | Make this process a simulated host: from now on 'simulatedWork' adds
-- up its cost instead of sleeping.
beginSimulatedHost :: IO ()
beginSimulatedHost = writeIORef simulatedCost (Just 0)

-- | The simulated cost added up since the last call, reset to zero.
takeSimulatedCost :: IO Double
takeSimulatedCost = atomicModifyIORef' simulatedCost $ \c -> case c of
  Just total -> (Just 0, total)
  Nothing -> (Nothing, 0)

-- | Run an action keeping this thread's simulated cost apart from the
-- host's, to be slept off by 'payOwnCost' (in a worker process it runs
-- the action as it is).
withOwnCost :: IO a -> IO a
withOwnCost act = do
  hosting <- readIORef simulatedCost
  case hosting of
    Nothing -> act
    Just _ -> do
      me <- myThreadId
      cell <- newIORef 0
      bracket_ (atomicModifyIORef' ownAccounts (\m -> (M.insert me cell m, ())))
               (atomicModifyIORef' ownAccounts (\m -> (M.delete me m, ())))
               act

-- | Sleep off the cost this thread's account holds (see 'withOwnCost'),
-- so that what it does next happens when the work would have ended.
-- Nothing happens in a thread without an account.
payOwnCost :: IO ()
payOwnCost = do
  own <- ownAccount
  case own of
    Nothing -> pure ()
    Just cell -> do
      owed <- readIORef cell
      writeIORef cell 0
      -- a green thread's sleep: the host's other workers go on meanwhile
      if owed > 0 then threadDelay (ceiling (owed * 1e6)) else pure ()
