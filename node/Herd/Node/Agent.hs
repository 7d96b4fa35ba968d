{-# LANGUAGE ScopedTypeVariables #-}
-- | The per-host agent: what a remote launch (ssh) starts on each host. It
-- starts that host's workers, one pinned to each physical core (or as many
-- as asked), hands each the secret through its pipe, reports the count on
-- standard output, and keeps them up: a worker that crashes or is killed
-- is started again with the pauses local workers get
-- ("Herd.Node.Supervise", "Herd.Core.Launch.Backoff"), and joins the
-- master as a new worker. A worker that ends because its master told it
-- to, or could not reach its master, is not replaced. The agent ends, and
-- with it every worker it started, as soon as its standard input (the ssh
-- session) closes, so a master that dies or loses the host leaves nothing
-- running there.
module Herd.Node.Agent
  ( runAgent
  , agentReadyPrefix
  , parseAgentCount
  , agentRestarts
  , runAgentByHand
  ) where

import Herd.Sys.Log (logToStderr)
import Control.Monad (forever, when)
import Data.List (stripPrefix)
import Data.Char (isDigit)
import Herd.Transport.Auth (Secret)
import Herd.Sys.HeapReserve (parseWorkerHeapReserve)
import Herd.Sys.Env (envHeapReserve)
import Herd.Node.Local
import Herd.Node.Topology (physicalCores)
import Herd.Sys.Calls (exitWhenStdinCloses)
import System.Environment (lookupEnv)
import System.Exit
import System.IO
import Control.Concurrent (threadDelay)
import Herd.Core.Launch.Backoff (defaultBackoff)
import Herd.Node.Supervise
import Herd.Node.Agent.Serve (HostEnd (..), withHostLink)
import Herd.Node.Address (MasterAddress (..), parseMasterAddress)

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

-- | Run as the agent of an ssh launch: start the workers, report, keep
-- them up, and end when the ssh session closes.
runAgent :: String -> Maybe Int -> String -> Secret -> IO ()
runAgent address count group secret = do
  rc <- exitWhenStdinCloses
  when (rc /= 0) $ logToStderr ("herd agent: cannot watch the ssh session (error " ++ show rc ++ ")")
  viaHostLink address group secret $ \local -> do
    (n, _) <- superviseWorkers local count group secret
    putStrLn (agentReadyPrefix ++ show n)
    hFlush stdout
    -- the supervisor holds every worker's handles (its standard input is its
    -- lifeline: it exits with code 70 when that pipe closes, so the handles
    -- must stay reachable while it runs), and the agent lives until the ssh
    -- session closes or the host link is lost, which ends it and its workers
    forever (threadDelay 1000000000)

-- Run the agent's work with the address its workers join at: the local
-- end of one host link to the master ("Herd.Node.Agent.Serve") when the
-- master is reached over TCP or TLS, else the master's own address. The
-- agent exits, and its workers with it, when the host link is lost.
viaHostLink :: String -> String -> Secret -> (String -> IO ()) -> IO ()
viaHostLink address group secret work = case parseMasterAddress address of
  Right master@(TcpAddress _ _) -> linked master
  Right master@(TlsAddress _ _) -> linked master
  _ -> work address
  where
    linked master = do
      r <- withHostLink master secret group $ \local -> do
        logToStderr ("herd agent: this host's workers are carried on one link to " ++ address)
        work local
      case r of
        Right () -> pure ()
        Left MasterClosed -> logToStderr "herd agent: the master closed its cluster; exiting"
        Left (LinkLost why) -> do
          logToStderr ("herd agent: the host link to the master was lost (" ++ why ++ "); exiting, and its workers with it")
          exitWith (ExitFailure 3)

-- | Run as an agent started by hand (@herd agent --connect HOST:PORT@):
-- start this host's workers, keep them up, and end once every one has
-- ended for good (its master finished, or could not be reached). Killing
-- the agent ends its workers.
runAgentByHand :: String -> Maybe Int -> String -> Secret -> IO ()
runAgentByHand address count group secret = viaHostLink address group secret $ \local -> do
  (n, sup) <- superviseWorkers local count group secret
  logToStderr ("herd agent: started " ++ show n ++ " worker" ++ (if n == 1 then "" else "s") ++ " for " ++ address)
  let wait = do
        threadDelay 200000
        done <- allDown sup
        if done then logToStderr "herd agent: every worker has ended; exiting" else wait
  wait

-- Start this host's workers (one per physical core, or as many as asked,
-- pinned) under a supervisor; how many, and the supervisor.
superviseWorkers :: String -> Maybe Int -> String -> Secret -> IO (Int, Supervisor)
superviseWorkers address count group secret = do
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
  let launch = LocalLaunch address rts group secret 0 reserve
  workers <- spawnLocalWorkers launch plan
  sup <- startSupervisor SuperviseHooks
    { hookSpawn = spawnLocalWorker launch
    , hookJoined = \_ -> pure True   -- the agent does not see the master: started is joined
    , hookAwaited = pure ()
    , hookLog = logToStderr . agentLine
    , hookStartTimeout = 30
    , hookBackoff = defaultBackoff
    , hookClosing = pure False
    , hookRestarts = agentRestarts
    } workers
  pure (n, sup)
  where
    agentLine l = "herd agent: " ++ maybe l id (stripPrefix "herd: " l)

-- | Whether the agent replaces a worker that ended so: one killed by a
-- signal or that failed, yes; one that ended cleanly (its master told it
-- to stop), failed to reach or prove itself to its master (codes 2 and
-- 3), or lost its lifeline to the agent (code 70), no.
agentRestarts :: ExitCode -> Bool
agentRestarts code = case code of
  ExitSuccess -> False
  ExitFailure c -> c `notElem` [2, 3, 70]
