-- | A host agent started by hand for a test: this test binary, run as
-- @HERD_AGENT=N@, joins the cluster's master as one host of N workers
-- over one link, as @herd agent --connect@ would.
module HandAgent
  ( withHandAgent
  ) where

import Herd
import System.Environment (getEnvironment, getExecutablePath)
import System.Process (CreateProcess (..), ProcessHandle, StdStream (..), proc, withCreateProcess)

-- | Run the action while an agent of this many workers serves the
-- cluster (whose secret is given); the agent is stopped after.
withHandAgent :: Cluster -> String -> Int -> (ProcessHandle -> IO a) -> IO a
withHandAgent cluster secret workers act = do
  let (_, port) = clusterAddress cluster
  exe <- getExecutablePath
  env0 <- getEnvironment
  let env = ("HERD_AGENT", show workers) : ("HERD_WORKER", "127.0.0.1:" ++ show port) : ("HERD_SECRET", secret)
            : filter ((`notElem` ["HERD_AGENT", "HERD_WORKER", "HERD_SECRET"]) . fst) env0
  withCreateProcess (proc exe []) { env = Just env, std_err = Inherit } $ \_ _ _ agent -> act agent
