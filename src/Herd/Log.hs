-- | Log lines written whole. GHC writes a String to an unbuffered handle
-- (standard error is one) character by character, so lines from threads
-- of one process, or from a master and the workers that share its
-- standard error, interleave mid-word. Here each line, with its newline,
-- is encoded first and handed to the handle as one buffer under the
-- handle's lock, which the kernel writes in one go (a pipe keeps writes
-- up to 4096 bytes whole).
module Herd.Log
  ( writeLine
  , logToStderr
  ) where

import qualified Data.ByteString as B
import qualified Data.Text as T
import qualified Data.Text.Encoding as T
import System.IO (Handle, stderr)

-- | Write one line (a newline is added) to the handle in one piece.
writeLine :: Handle -> String -> IO ()
writeLine h line = B.hPut h (T.encodeUtf8 (T.pack (line ++ "\n")))

-- | Write one line to standard error in one piece: herd's default log.
logToStderr :: String -> IO ()
logToStderr = writeLine stderr
