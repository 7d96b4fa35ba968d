-- | Log lines written whole, each after the local time. GHC writes a
-- String to an unbuffered handle (standard error is one) character by
-- character, so lines from threads of one process, or from a master and
-- the workers that share its standard error, interleave mid-word. Here
-- each line, with its newline, is encoded first and handed to the handle
-- as one buffer under the handle's lock, which the kernel writes in one go
-- (a pipe keeps writes up to 4096 bytes whole).
--
-- Promise: every line 'logToStderr' writes starts with the local time in
-- ISO 8601, to the millisecond and with the zone's offset
-- (@2026-11-28T09:15:02.417+01:00@), so the lines of several machines
-- can be put in order.
module Herd.Sys.Log
  ( writeLine
  , logToStderr
  , stampedLine
  ) where

import qualified Data.ByteString as B
import qualified Data.Text as T
import qualified Data.Text.Encoding as T
import Data.Time (ZonedTime, defaultTimeLocale, formatTime, getZonedTime)
import System.IO (Handle, stderr)

-- | Write one line (a newline is added) to the handle in one piece.
writeLine :: Handle -> String -> IO ()
writeLine h line = B.hPut h (T.encodeUtf8 (T.pack (line ++ "\n")))

-- | Write one line to standard error in one piece, after the local time:
-- herd's default log.
logToStderr :: String -> IO ()
logToStderr line = do
  now <- getZonedTime
  writeLine stderr (stampedLine now line)

-- | A log line as 'logToStderr' writes it at this time.
stampedLine :: ZonedTime -> String -> String
stampedLine t line = formatTime defaultTimeLocale "%Y-%m-%dT%H:%M:%S%03Q%Ez" t ++ " " ++ line
