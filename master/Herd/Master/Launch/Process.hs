{-# LANGUAGE ScopedTypeVariables #-}
-- | What the master knows of one launch (the local workers, one ssh host,
-- one @srun@), and the child-process plumbing that remote launches share.
--
-- A launch reports how many workers it will bring (once it knows), and
-- whether it has failed; the master waits for each launch to be complete
-- or failed, and stops every launch when the cluster ends. A launcher
-- process's standard error is forwarded line by line to the master's log,
-- prefixed with the launch's name, and its last lines are kept to explain
-- a failure.
module Herd.Master.Launch.Process
  ( Launch (..)
  , LoggedProcess
  , loggedHandle
  , loggedStdin
  , loggedStdout
  , startLogged
  , loggedFailure
  , stopLogged
  , shellQuote
  ) where

import Control.Concurrent (forkIO, threadDelay)
import Control.Exception
import Control.Monad (forever, void)
import Data.IORef
import Data.List (intercalate)
import System.Exit (ExitCode (..))
import System.IO
import System.Process

-- | One launch, as the master waits for it and stops it.
data Launch = Launch
  { launchName     :: String
    -- ^ the group its workers report (@local@, @ssh:HOST@, @slurm@)
  , launchExpected :: IO (Maybe Int)
    -- ^ the workers it will bring, once known
  , launchFailure  :: IO (Maybe String)
    -- ^ why it failed, once it has
  , launchStop     :: IO ()
    -- ^ stop it and everything it started; safe to call more than once
  }

-- | A launcher process with its pipes.
data LoggedProcess = LoggedProcess
  { loggedHandle :: ProcessHandle  -- ^ the process
  , loggedStdin  :: Handle         -- ^ its standard input (closing it ends a remote agent)
  , loggedStdout :: Handle         -- ^ its standard output
  , loggedTail   :: IORef [String]
  , loggedWhat   :: String
  }

-- | Start a process with all three standard streams piped; its standard
-- error goes to the log, each line prefixed with @[name]@.
startLogged :: (String -> IO ()) -> String -> String -> CreateProcess -> IO LoggedProcess
startLogged logLine name what cp = do
  (Just i, Just o, Just e, ph) <- createProcess cp
    { std_in = CreatePipe, std_out = CreatePipe, std_err = CreatePipe, close_fds = True }
  hSetBuffering i LineBuffering
  tailRef <- newIORef []
  void $ forkIO $ handle (\(_ :: IOException) -> pure ()) $ forever $ do
    line <- hGetLine e
    modifyIORef' tailRef (\ls -> take 5 (line : ls))
    logLine ("herd: [" ++ name ++ "] " ++ line)
  pure (LoggedProcess ph i o tailRef what)

-- | If the process has exited, why that is a failure: its exit code and
-- its last lines of standard error.
loggedFailure :: LoggedProcess -> IO (Maybe String)
loggedFailure lp = do
  code <- getProcessExitCode (loggedHandle lp)
  case code of
    Nothing -> pure Nothing
    Just c -> do
      threadDelay 20000  -- let the stderr reader take the last lines
      lastLines <- reverse <$> readIORef (loggedTail lp)
      let how = case c of
            ExitSuccess -> "exited"
            ExitFailure n | n < 0 -> "was killed by signal " ++ show (negate n)
                          | otherwise -> "exited with code " ++ show n
      pure (Just (loggedWhat lp ++ " " ++ how
                  ++ (if null lastLines then "" else ": " ++ intercalate " / " lastLines)))

-- | Close the process's standard input (a remote agent then ends its
-- workers and exits), wait up to two seconds, then terminate it.
stopLogged :: LoggedProcess -> IO ()
stopLogged lp = do
  hClose (loggedStdin lp) `catch` \(_ :: IOException) -> pure ()
  let waitFor :: Int -> IO Bool
      waitFor 0 = pure False
      waitFor n = do
        code <- getProcessExitCode (loggedHandle lp)
        case code of
          Just _ -> pure True
          Nothing -> threadDelay 20000 >> waitFor (n - 1)
  done <- waitFor 100
  if done then pure () else do
    terminateProcess (loggedHandle lp)
    void (waitForProcess (loggedHandle lp))

-- | Quote a word for a POSIX shell.
shellQuote :: String -> String
shellQuote s = "'" ++ concatMap (\c -> if c == '\'' then "'\\''" else [c]) s ++ "'"
