{-# LANGUAGE ScopedTypeVariables #-}
-- | The per-host agent: what a remote launch (ssh) starts on each host. It
-- starts that host's workers, one pinned to each physical core (or as many
-- as asked), hands each the secret through its pipe, reports the count on
-- standard output, and waits. It ends, and with it every worker it started,
-- as soon as its standard input (the ssh session) closes, so a master that
-- dies or loses the host leaves nothing running there.
module Herd.Launch.Agent
  ( runAgent
  , agentReadyPrefix
  , parseAgentCount
  ) where

import Herd.Log (logToStderr)
import Control.Exception (IOException, catch)
import Control.Monad (forM_, when)
import Data.Char (isDigit)
import Herd.Auth (Secret)
import Herd.HeapReserve (parseWorkerHeapReserve)
import Herd.Launch.Env (envHeapReserve)
import Herd.Launch.Local
import Herd.Launch.Topology (physicalCores)
import Herd.Sys (exitWhenStdinCloses)
import System.Environment (lookupEnv)
import System.Exit
import System.IO
import System.Process (waitForProcess)

-- | The line the agent prints once its workers are started, followed by
-- their count.
agentReadyPrefix :: String
agentReadyPrefix = "herd-agent: started "

-- | Parse the agent's worker count: a number from 1, or @auto@ (one per
-- physical core).
parseAgentCount :: String -> Either String (Maybe Int)
parseAgentCount "auto" = Right Nothing
parseAgentCount s
  | not (null s), all isDigit s, length s < 6, read s >= (1 :: Int) = Right (Just (read s))
  | otherwise = Left ("expected a worker count or auto, got " ++ show s)

-- | Run as the agent: start the workers, report, wait, and exit.
runAgent :: String -> Maybe Int -> String -> Secret -> IO ()
runAgent address count group secret = do
  rc <- exitWhenStdinCloses
  when (rc /= 0) $ logToStderr ("herd agent: cannot watch the ssh session (error " ++ show rc ++ ")")
  cores <- physicalCores
  let n = maybe (length cores) id count
      plan = take n (map Just (cycle cores))
  rts <- maybe [] words <$> lookupEnv "GHCRTS"
  -- the master's setting for the workers' heap reserve, passed on
  reserveText <- lookupEnv envHeapReserve
  reserve <- case traverse parseWorkerHeapReserve reserveText of
    Left why -> do
      logToStderr ("herd agent: " ++ envHeapReserve ++ ": " ++ why)
      exitWith (ExitFailure 2)
    Right r -> pure r
  workers <- spawnLocalWorkers (LocalLaunch address rts group secret 0 reserve) plan
  putStrLn (agentReadyPrefix ++ show n)
  hFlush stdout
  codes <- mapM (waitForProcess . localHandle) workers
  forM_ [ c | c@(ExitFailure _) <- codes ] $ \c ->
    logToStderr ("herd agent: a worker ended with " ++ show c)
  -- a worker's standard input is its lifeline (it exits with code 70 when
  -- that pipe closes). Closed here, after every worker ended, the handles
  -- stay reachable until then; unreachable, a collection in the agent may
  -- close them through their finalizers and end the workers. The ssh test's
  -- partial run began losing its worker that way when the master's start
  -- took longer (its heap reserve); what set off the agent's collection
  -- then was not traced
  mapM_ (\w -> hClose (localStdin w) `catch` \(_ :: IOException) -> pure ()) workers
  exitSuccess
