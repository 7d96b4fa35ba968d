-- | Where herd puts files that live only until another process on the
-- same host takes them (a shuffle's parts handed between two local
-- workers): in memory when the host has a memory file system for it, so
-- handing a part over costs a copy in and a copy out, never the disk.
--
-- Promise: the directory named exists and this process could write into
-- it when asked; the temporary directory otherwise.
module Herd.Sys.Scratch
  ( handOverBase
  , handOverBases
  ) where

import Control.Exception (IOException, try)
import System.Directory (doesDirectoryExist, getPermissions, getTemporaryDirectory, writable)

-- The memory file system Linux mounts for everyone's shared memory.
memoryDir :: FilePath
memoryDir = "/dev/shm"

-- | The directory for files handed between processes on this host:
-- @/dev/shm@ when it is a directory this process may write, else the
-- temporary directory (@$TMPDIR@).
handOverBase :: IO FilePath
handOverBase = do
  inMemory <- usable memoryDir
  if inMemory then pure memoryDir else getTemporaryDirectory

-- | Every directory 'handOverBase' may give on this host (to sweep what
-- a process killed before it could clean up left behind).
handOverBases :: IO [FilePath]
handOverBases = do
  tmp <- getTemporaryDirectory
  inMemory <- usable memoryDir
  pure (if inMemory && tmp /= memoryDir then [memoryDir, tmp] else [tmp])

usable :: FilePath -> IO Bool
usable dir = do
  exists <- doesDirectoryExist dir
  if not exists then pure False else do
    perms <- try (getPermissions dir)
    pure (either (\e -> const False (e :: IOException)) writable perms)
