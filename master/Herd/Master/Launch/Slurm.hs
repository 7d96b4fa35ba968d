{-# LANGUAGE ScopedTypeVariables #-}
-- | Starting workers inside a SLURM allocation.
--
-- Run the master inside @salloc@ or an @sbatch@ script: it reads the
-- allocation from @SLURM_*@ variables and starts, with a single @srun@,
-- one host agent on every node of it (the same executable), which starts
-- that node's share of the allocated tasks as workers pinned to its
-- physical cores, keeps them up, watches their memory, and carries them
-- on one link to the master. The secret reaches every task through
-- @srun@'s standard input (broadcast to all tasks), never a command line;
-- when the master ends, that input closes and every worker exits with it.
module Herd.Master.Launch.Slurm
  ( SlurmLaunch (..)
  , slurmTaskCount
  , startSlurmLaunch
  ) where

import Control.Concurrent (forkIO)
import Control.Exception
import Control.Monad (unless, void)
import qualified Data.ByteString as B
import Data.Char (isDigit)
import Herd.Transport.Auth (Secret, secretToLine)
import Herd.Core.Config.Parse (parseTasksPerNode)
import Herd.Sys.Env
import Herd.Master.Launch.Process
import System.Environment (getArgs, getEnvironment, getExecutablePath)
import System.IO
import System.Process

-- | What the SLURM launch needs from the cluster.
data SlurmLaunch = SlurmLaunch
  { slurmAddress    :: String       -- ^ @HOST:PORT@ the workers connect to
  , slurmRtsOptions :: [String]
  , slurmHeapReserve :: Int       -- ^ MiB of heap each worker touches before it joins
  , slurmSecret     :: Secret
  , slurmLog        :: String -> IO ()
  }

-- | The number of tasks in the enclosing allocation, from an environment;
-- the 'Left' says what is missing or wrong.
slurmTaskCount :: [(String, String)] -> Either String Int
slurmTaskCount env = case lookup "SLURM_JOB_ID" env of
  Nothing -> Left "not inside a SLURM allocation (SLURM_JOB_ID is not set); run under salloc or sbatch"
  Just _ -> case (lookup "SLURM_NTASKS" env, lookup "SLURM_NPROCS" env) of
    (Just n, _) -> count "SLURM_NTASKS" n
    (Nothing, Just n) -> count "SLURM_NPROCS" n
    (Nothing, Nothing) -> Left "SLURM_NTASKS is not set; ask for tasks, e.g. salloc -n 8 or sbatch -n 8"
  where
    count var n
      | not (null n), all isDigit n, length n < 7, read n >= (1 :: Int) = Right (read n)
      | otherwise = Left (var ++ " is not a task count: " ++ show n)

-- | Start one host agent per node with @srun@, each starting as many
-- workers as the allocation has tasks on its node and carrying them on
-- one host link ("Herd.Node.Agent.Serve"); with no per-node task counts
-- in the environment, one worker per task, as before.
startSlurmLaunch :: SlurmLaunch -> Int -> IO Launch
startSlurmLaunch cfg tasks = do
  exe <- getExecutablePath
  args <- getArgs
  outer <- getEnvironment
  let baseEnv = filter (\(k, _) -> k `notElem` ("GHCRTS" : herdVariables)) outer
      perNode = lookup "SLURM_TASKS_PER_NODE" outer >>= either (const Nothing) Just . parseTasksPerNode
      common =
        [ (envConnect, slurmAddress cfg), (envSecretStdin, "1"), (envWatchStdin, "1")
        , (envGroup, "slurm"), ("GHCRTS", unwords (slurmRtsOptions cfg))
        , (envHeapReserve, show (slurmHeapReserve cfg)) ]
      (env, srunArgs) = case perNode of
        Just counts | sum counts == tasks ->
          ( baseEnv ++ common ++ [ (envAgent, "slurm"), (envSlurmTasks, maybe "" id (lookup "SLURM_TASKS_PER_NODE" outer)) ]
          , [ "--nodes=" ++ show (length counts), "--ntasks=" ++ show (length counts), "--ntasks-per-node=1"
            , "--kill-on-bad-exit=0", "--input=all", "--job-name=herd-agents", exe ] ++ args )
        _ -> ( baseEnv ++ common
             , [ "--ntasks=" ++ show tasks, "--kill-on-bad-exit=0", "--input=all"
               , "--job-name=herd-workers", exe ] ++ args )
  lp <- startLogged (slurmLog cfg) "slurm" "srun" (proc "srun" srunArgs) { env = Just env }
  -- Workers print nothing, but drain srun's output so it can never block.
  let drain = B.hGetSome (loggedStdout lp) 65536 >>= \b -> unless (B.null b) drain
  void $ forkIO $ handle (\(_ :: IOException) -> pure ()) drain
  (hPutStrLn (loggedStdin lp) (secretToLine (slurmSecret cfg)) >> hFlush (loggedStdin lp))
    `catch` \(_ :: IOException) -> pure ()
  pure Launch
    { launchName = "slurm"
    , launchExpected = pure (Just tasks)
    , launchFailure = loggedFailure lp
    , launchStop = stopLogged lp
    }
