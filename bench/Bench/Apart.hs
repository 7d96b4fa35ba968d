-- | Measuring each setting in a fresh process. A bench that compares
-- settings one after the other in one process measures the later ones in
-- a heap the earlier ones shaped: in one process, the second master loop
-- of @herd bench pfilter@ took 1,500-8,300 page faults that the first did
-- not, whichever loop came first, and lost up to a tenth of its
-- efficiency to them. So such a bench starts itself once per setting
-- ('runApart'), and the process started answers through a file
-- ('apartAnswerPath', 'answerApart').
--
-- Promises: a run that fails, or answers nothing readable, ends the bench
-- with an error naming the run; the answer file is removed afterwards.
module Bench.Apart
  ( runApart
  , apartAnswerPath
  , answerApart
  ) where

import Control.Exception (IOException, bracket, try)
import Data.Char (isSpace)
import System.Directory (getTemporaryDirectory, removeFile)
import System.Environment (getEnvironment, getExecutablePath, lookupEnv)
import System.Exit (ExitCode (..), die)
import System.IO (hClose, openTempFile)
import System.Process (CreateProcess (..), proc, waitForProcess, withCreateProcess)

-- The environment variable that tells a process started by 'runApart'
-- where to answer.
apartVar :: String
apartVar = "HERD_BENCH_ANSWER"

-- | Run this program again with these arguments (its output and errors
-- go where this process's go), and read what it answered. RTS options
-- reach it only through @GHCRTS@.
runApart :: Read r => [String] -> IO r
runApart args = do
  exe <- getExecutablePath
  dir <- getTemporaryDirectory
  bracket (openTempFile dir "herd-bench-answer.txt") (\(path, _) -> try (removeFile path) >>= ignore) $ \(path, h) -> do
    hClose h
    env <- getEnvironment
    let child = (proc exe args) { env = Just ((apartVar, path) : filter ((/= apartVar) . fst) env) }
    code <- withCreateProcess child (\_ _ _ ph -> waitForProcess ph)
    case code of
      ExitSuccess -> pure ()
      ExitFailure n -> die ("the run of `" ++ unwords args ++ "` failed (exit code " ++ show n ++ ")")
    text <- readFile path
    case reads text of
      [(r, rest)] | all isSpace rest -> pure r
      _ -> die ("the run of `" ++ unwords args ++ "` answered nothing readable (" ++ show (take 80 text) ++ ")")
  where
    ignore :: Either IOException () -> IO ()
    ignore _ = pure ()

-- | Where to answer, when this process was started by 'runApart'.
apartAnswerPath :: IO (Maybe FilePath)
apartAnswerPath = lookupEnv apartVar

-- | Answer the process that started this one.
answerApart :: Show r => FilePath -> r -> IO ()
answerApart path r = writeFile path (show r)
