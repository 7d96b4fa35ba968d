{-# LANGUAGE ScopedTypeVariables #-}
-- | This host's memory and its processes' resident sets, read from Linux's
-- @/proc@ (@MemTotal@ of @/proc/meminfo@, @VmRSS@ of @/proc/PID/status@),
-- and the limit a worker is held to. The master's watch over its own
-- workers ("Herd.Master.MemoryWatch") and each host agent's over its own
-- read the same numbers the same way.
--
-- Promises: a process that is gone, or a file that says nothing, reads as
-- 'Nothing', never as an error; nothing here kills or signals a process.
module Herd.Node.Memory
  ( resolveMemoryLimit
  , residentBytes
  , hostMemoryBytes
  , memoryWatchPeriod
  ) where

import Control.Exception (IOException, try)
import Data.Char (isDigit, isSpace)
import Data.List (isPrefixOf)
import Herd.Settings (MemoryLimit (..))

-- | How often each watched worker's memory is read: 0.2 s.
memoryWatchPeriod :: Double
memoryWatchPeriod = 0.2

-- | The limit in bytes for this many local workers ('Nothing': none).
-- 'MemoryLimitAuto' shares out 90% of this host's memory.
resolveMemoryLimit :: MemoryLimit -> Int -> IO (Maybe Int)
resolveMemoryLimit limit workers = case limit of
  NoMemoryLimit -> pure Nothing
  MemoryLimitMiB mib -> pure (Just (mib * 1024 * 1024))
  MemoryLimitAuto
    | workers <= 0 -> pure Nothing
    | otherwise -> fmap (\total -> total `div` 10 * 9 `div` workers) <$> hostMemoryBytes

-- | This host's memory ('Nothing' where @/proc/meminfo@ says nothing).
hostMemoryBytes :: IO (Maybe Int)
hostMemoryBytes = fmap (* 1024) . kibField "MemTotal:" <$> readOr "/proc/meminfo"

-- | A process's resident memory in bytes ('Nothing': no such process).
residentBytes :: Int -> IO (Maybe Int)
residentBytes pid = fmap (* 1024) . kibField "VmRSS:" <$> readOr ("/proc/" ++ show pid ++ "/status")

-- A "Name: N kB" field of a /proc file.
kibField :: String -> String -> Maybe Int
kibField name text = case [ dropWhile isSpace (drop (length name) l) | l <- lines text, name `isPrefixOf` l ] of
  v : _ | ds@(_ : _) <- takeWhile isDigit v, length ds < 16 -> Just (read ds)
  _ -> Nothing

readOr :: FilePath -> IO String
readOr path = do
  r <- try (readFile path >>= \s -> length s `seq` pure s)
  pure (either (\(_ :: IOException) -> "") id r)
