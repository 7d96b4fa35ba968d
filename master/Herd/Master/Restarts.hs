-- | Wiring a cluster's shell to the supervisor of its local workers
-- ("Herd.Node.Supervise"): a local worker whose link goes down is
-- awaited by the core until its replacement joins, the replacement is
-- recognised by its process id, and restarts are counted.
module Herd.Master.Restarts
  ( withRestarts
  ) where

import Control.Concurrent.STM
import Control.Exception (bracket)
import Control.Monad (void)
import qualified Data.Map.Strict as M
import Herd.Settings
import Herd.Core.Launch.Backoff (defaultBackoff)
import Herd.Node.Supervise
import Herd.Master.Launching (LocalSet (..))
import Herd.Master.Shell
import Herd.Master.Types (ConnectionCounters (..), WorkerInfo (..))

-- | Keep the local workers up while the action runs (when the
-- configuration asks for restarts and there are local workers); stop them
-- after it, also when it throws.
withRestarts :: Config -> Shell -> TVar Bool -> Maybe LocalSet -> IO a -> IO a
withRestarts cfg sh closed local act = case local of
  Just set | configRestartWorkers cfg -> bracket (start set) stopSupervisor (const act)
  _ -> act
  where
    start set = do
      sup <- startSupervisor SuperviseHooks
        { hookSpawn = \cpu -> do
            w <- localRespawn set cpu
            bumpCounter sh (\c -> c { countRestarts = countRestarts c + 1 })
            pure w
        , hookJoined = \pid -> any (\i -> infoPid i == pid && infoGroup i == "local") . M.elems
                                 <$> readTVarIO (shellWorkers sh)
        , hookAwaited = shellAwaitedChanged sh
        , hookLog = configLog cfg
        , hookStartTimeout = configStartTimeout cfg
        , hookBackoff = defaultBackoff
        , hookClosing = readTVarIO closed
        , hookRestarts = const True
        } (localStarted set)
      setLossHooks sh LossHooks
        { lossClaim = \info -> if infoGroup info == "local" then void (claimLoss sup (infoPid info)) else pure ()
        , lossAwaited = awaitedCount sup }
      pure sup
