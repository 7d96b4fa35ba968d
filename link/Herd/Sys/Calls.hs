-- | Process-level system calls herd's launchers and workers need, done in C
-- (cbits/herd_sys.c) so they work even while the Haskell scheduler is held
-- by a non-allocating computation.
module Herd.Sys.Calls
  ( pinProcessThreads
  , exitWhenStdinCloses
  , niceProcessThreads
  ) where

import Foreign.C.Types (CInt (..))

foreign import ccall unsafe "herd_pin_process_threads"
  c_pinProcessThreads :: CInt -> IO CInt

foreign import ccall unsafe "herd_start_parent_watchdog"
  c_startParentWatchdog :: CInt -> IO CInt

-- | Pin every thread of this process, and those it starts later, to one
-- CPU. Returns 0 or the errno of the first failure.
pinProcessThreads :: Int -> IO Int
pinProcessThreads cpu = fromIntegral <$> c_pinProcessThreads (fromIntegral cpu)

-- | Start an OS thread that ends the process (exit code 70) as soon as
-- standard input reaches end of file, i.e. when the process holding the
-- other end of the pipe is gone. Returns 0 or a pthread error code.
exitWhenStdinCloses :: IO Int
exitWhenStdinCloses = fromIntegral <$> c_startParentWatchdog 0

foreign import ccall unsafe "herd_nice_process_threads"
  c_niceProcessThreads :: CInt -> IO CInt

-- | Give every thread of this process, and those it starts later, this
-- nice value (0 to 19: higher runs later). Returns 0 or the errno of the
-- first failure.
niceProcessThreads :: Int -> IO Int
niceProcessThreads n = fromIntegral <$> c_niceProcessThreads (fromIntegral n)
