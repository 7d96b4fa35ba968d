{-# LANGUAGE ScopedTypeVariables #-}
-- | Starting workers on other machines over ssh.
--
-- For each host, one ssh session runs the same executable (at the same
-- path, or a copy shipped to @~/.herd/bin@ first) as the host's agent
-- ("Herd.Node.Agent"), which starts that host's workers pinned to its
-- physical cores. The master's address, the worker count and the RTS
-- options go in the remote command's environment; the secret goes through
-- the session's standard input, never on a command line (where @ps@ on
-- either host would show it). Closing the session ends the agent and its
-- workers, so a master that stops or dies leaves nothing running remotely.
module Herd.Master.Launch.Ssh
  ( SshLaunch (..)
  , startSshLaunch
  , remoteAgentCommand
  ) where

import Control.Concurrent
import Control.Exception
import Control.Monad (void, when)
import Data.Char (isAlphaNum)
import Data.IORef
import Data.List (isPrefixOf)
import qualified Data.ByteString as B
import Herd.Transport.Auth (Secret, secretToLine)
import Herd.Sys.BuildId (buildIdentity, shortBuildId)
import Herd.Settings (HostSpec (..))
import Herd.Node.Agent (agentReadyPrefix)
import Herd.Sys.Env
import Herd.Master.Launch.Process
import System.Directory (getCurrentDirectory)
import System.Environment (getArgs, getExecutablePath)
import System.Exit (ExitCode (..))
import System.FilePath (takeFileName)
import System.IO
import System.Process
import Text.Read (readMaybe)

-- | What every ssh launch of a cluster shares.
data SshLaunch = SshLaunch
  { sshCommand    :: [String]      -- ^ the ssh client and its options
  , sshAddress    :: String        -- ^ @HOST:PORT@ the workers connect to
  , sshRtsOptions :: [String]      -- ^ the workers' RTS options
  , sshHeapReserve :: Int          -- ^ MiB of heap each worker touches before it joins
  , sshSecret     :: Secret
  , sshShip       :: Bool          -- ^ copy the executable to the host first
  , sshLog        :: String -> IO ()
  }

-- | Start the agent on one host; returns at once. Shipping, if asked, runs
-- in the background too, so a slow or dead host holds up nothing else.
startSshLaunch :: SshLaunch -> HostSpec -> IO Launch
startSshLaunch cfg host = do
  localExe <- getExecutablePath
  args <- getArgs
  cwd <- getCurrentDirectory
  build <- buildIdentity
  let name = "ssh:" ++ hostTarget host
      shippedName = takeFileName localExe ++ "-" ++ shortBuildId build
  failure <- newIORef Nothing
  expected <- newIORef Nothing
  running <- newIORef Nothing
  stopped <- newIORef False
  void $ forkIO $ do
    shipped <- if sshShip cfg then shipTo cfg host localExe shippedName else pure (Right ())
    case shipped of
      Left why -> writeIORef failure (Just why)
      Right () -> do
        let exe = if sshShip cfg then Right shippedName else Left localExe
            remote = remoteAgentCommand (sshAddress cfg) (hostSlots host) name (sshRtsOptions cfg) (sshHeapReserve cfg) cwd exe args
            ssh : opts = sshCommand cfg
        lp <- startLogged (sshLog cfg) name ("ssh to " ++ hostTarget host)
                (proc ssh (opts ++ [hostTarget host, remote]))
        writeIORef running (Just lp)
        isStopped <- readIORef stopped
        when isStopped (stopLogged lp)
        (hPutStrLn (loggedStdin lp) (secretToLine (sshSecret cfg)) >> hFlush (loggedStdin lp))
          `catch` \(_ :: IOException) -> pure ()
        readAgent lp expected
  pure Launch
    { launchName = name
    , launchExpected = readIORef expected
    , launchFailure = do
        early <- readIORef failure
        case early of
          Just why -> pure (Just why)
          Nothing -> readIORef running >>= maybe (pure Nothing) loggedFailure
    , launchStop = do
        writeIORef stopped True
        readIORef running >>= mapM_ stopLogged
    }
  where
    -- The agent's standard output carries one line: how many workers it started.
    readAgent lp expected = handle (\(_ :: IOException) -> pure ()) $ do
      let loop = do
            line <- hGetLine (loggedStdout lp)
            case stripPrefix' agentReadyPrefix line >>= readMaybe of
              Just n -> writeIORef expected (Just n)
              Nothing -> pure ()
            loop
      loop
    stripPrefix' p s = if p `isPrefixOf` s then Just (drop (length p) s) else Nothing

-- | The command the remote shell runs: change to the master's working
-- directory if it exists there, then exec the agent with its settings in
-- the environment (the workers' RTS options and heap reserve in MiB
-- among them). @Left path@ runs the executable at the master's path;
-- @Right name@ runs the shipped copy @~/.herd/bin/name@.
remoteAgentCommand :: String -> Maybe Int -> String -> [String] -> Int -> FilePath
                   -> Either FilePath String -> [String] -> String
remoteAgentCommand address slots group rts reserve cwd exe args = unwords $
  [ "cd", shellQuote cwd, "2>/dev/null;", "exec", "env"
  , envConnect ++ "=" ++ shellQuote address
  , envAgent ++ "=" ++ maybe "auto" show slots
  , envSecretStdin ++ "=1"
  , envGroup ++ "=" ++ shellQuote group
  , "GHCRTS=" ++ shellQuote (unwords rts)
  , envHeapReserve ++ "=" ++ show reserve
  , either shellQuote (\n -> "\"$HOME\"/.herd/bin/" ++ safeName n) exe
  ] ++ map shellQuote args

safeName :: String -> String
safeName = map (\c -> if isAlphaNum c || c `elem` "-_." then c else '_')

-- Copy the executable to ~/.herd/bin/NAME on the host, unless a copy of
-- this build is already there (the name holds the build identity).
shipTo :: SshLaunch -> HostSpec -> FilePath -> String -> IO (Either String ())
shipTo cfg host localExe shippedName = do
  let ssh : opts = sshCommand cfg
      target = "\"$HOME\"/.herd/bin/" ++ safeName shippedName
      script = "mkdir -p \"$HOME\"/.herd/bin && chmod 700 \"$HOME\"/.herd && "
            ++ "if [ -x " ++ target ++ " ]; then echo present; else echo absent && "
            ++ "cat > " ++ target ++ ".tmp.$$ && chmod 700 " ++ target ++ ".tmp.$$ && mv "
            ++ target ++ ".tmp.$$ " ++ target ++ " && echo shipped; fi"
  r <- try $ withCreateProcess (proc ssh (opts ++ [hostTarget host, script]))
         { std_in = CreatePipe, std_out = CreatePipe, std_err = CreatePipe } $
         \(Just i) (Just o) (Just e) ph -> do
           errVar <- newEmptyMVar
           void $ forkIO $ (B.hGetContents e >>= putMVar errVar) `catch`
                             \(_ :: IOException) -> putMVar errVar B.empty
           answer <- newEmptyMVar
           void $ forkIO $ (hGetLine o >>= putMVar answer) `catch`
                             \(_ :: IOException) -> putMVar answer ""
           first <- readMVar answer
           -- "present": the copy exists and the remote side reads nothing.
           when (first /= "present") $
             (B.readFile localExe >>= B.hPut i) `catch` \(_ :: IOException) -> pure ()
           hClose i `catch` \(_ :: IOException) -> pure ()
           code <- waitForProcess ph
           err <- readMVar errVar
           pure (code, err)
  pure $ case r of
    Left (e :: IOException) -> Left ("cannot run " ++ ssh' ++ ": " ++ displayException e)
    Right (ExitSuccess, _) -> Right ()
    Right (ExitFailure n, err) ->
      Left ("shipping the executable to " ++ hostTarget host ++ " failed (ssh exited with code "
            ++ show n ++ "): " ++ unwords (lines (show' err)))
  where
    ssh' = head (sshCommand cfg)
    show' = map (toEnum . fromIntegral) . B.unpack
