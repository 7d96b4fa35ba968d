-- | Measuring each setting in a fresh process. A bench that compares
-- settings one after the other in one process measures the later ones in
-- a heap the earlier ones shaped: in one process, the second master loop
-- of @herd bench pfilter@ took 1,500-8,300 page faults that the first did
-- not, whichever loop came first, and lost up to a tenth of its
-- efficiency to them. So such a bench starts itself once per setting
-- ('runApart'), naming a file in its arguments (a hidden option of the
-- bench), and the process started answers through it ('answerApart').
--
-- Promises: a run that fails, or answers nothing readable, ends the bench
-- with an error naming the run; the answer file is removed afterwards.
module Bench.Apart
  ( runApart
  , answerApart
  ) where

import Control.Exception (IOException, bracket, try)
import Data.Char (isSpace)
import System.Directory (getTemporaryDirectory, removeFile)
import System.Environment (getExecutablePath)
import System.Exit (ExitCode (..), die)
import System.IO (hClose, openTempFile)
import System.Process (proc, waitForProcess, withCreateProcess)

-- | Run this program again with the arguments made for a fresh answer
-- file (its output and errors go where this process's go), and read what
-- it answered there. RTS options reach it only through @GHCRTS@.
runApart :: Read r => (FilePath -> [String]) -> IO r
runApart argsFor = do
  exe <- getExecutablePath
  dir <- getTemporaryDirectory
  bracket (openTempFile dir "herd-bench-answer.txt") (\(path, _) -> try (removeFile path) >>= ignore) $ \(path, h) -> do
    hClose h
    let args = argsFor path
    code <- withCreateProcess (proc exe args) (\_ _ _ ph -> waitForProcess ph)
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

-- | Answer the process that started this one.
answerApart :: Show r => FilePath -> r -> IO ()
answerApart path r = writeFile path (show r)
