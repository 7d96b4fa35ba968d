-- | A thin binding to Linux's epoll (in @cbits/herd_sys.c@), for the
-- master's loops that wait on many links from one thread. Waiting is an
-- interruptible foreign call, so the rest of the runtime runs meanwhile
-- and a thread waiting there can be killed at once; looking without
-- waiting is an unsafe one, which does not give the runtime up.
{-# LANGUAGE InterruptibleFFI #-}
module Herd.Sys.Epoll
  ( Epoll
  , epollCreate
  , epollClose
  , epollAdd
  , epollDel
  , epollWait
  , epollPoll
  , epollAvailable
  , systemCallFailed
  ) where

import Control.Monad (when)
import Foreign.C.Error (Errno (..), errnoToIOError, throwErrno)
import Foreign.C.Types (CInt (..))
import Foreign.Ptr (Ptr)
import System.Info (os)
import System.Posix.IO (closeFd)
import System.Posix.Types (Fd (..))

foreign import ccall unsafe "herd_epoll_create" c_epollCreate :: IO CInt
foreign import ccall unsafe "herd_epoll_add" c_epollAdd :: CInt -> CInt -> CInt -> CInt -> IO CInt
foreign import ccall unsafe "herd_epoll_del" c_epollDel :: CInt -> CInt -> IO CInt
foreign import ccall interruptible "herd_epoll_wait" c_epollWait :: CInt -> Ptr CInt -> CInt -> CInt -> IO CInt
-- the same with a zero timeout: no need to give up the runtime for it
foreign import ccall unsafe "herd_epoll_wait" c_epollPoll :: CInt -> Ptr CInt -> CInt -> CInt -> IO CInt

-- | An epoll set.
newtype Epoll = Epoll CInt

-- | Throw the system's error for a call that failed with this errno (an
-- 'IOError' that names the call and carries the errno).
systemCallFailed :: String -> Int -> IO a
systemCallFailed call errno = ioError (errnoToIOError call (Errno (fromIntegral errno)) Nothing Nothing)

-- | Whether this system has epoll.
epollAvailable :: Bool
epollAvailable = os == "linux"

-- | A new, empty set.
epollCreate :: IO Epoll
epollCreate = do
  ep <- c_epollCreate
  when (ep < 0) $ throwErrno "epoll_create1"
  pure (Epoll ep)

-- | Close the set.
epollClose :: Epoll -> IO ()
epollClose (Epoll ep) = closeFd (Fd ep)

-- | Watch a descriptor for input under a tag (edge-triggered if asked).
-- Returns 0 or an errno.
epollAdd :: Epoll -> CInt -> Int -> Bool -> IO Int
epollAdd (Epoll ep) fd tag edge = fromIntegral <$> c_epollAdd ep fd (fromIntegral tag) (if edge then 1 else 0)

-- | Stop watching a descriptor (errors, e.g. one never added, are ignored).
epollDel :: Epoll -> CInt -> IO ()
epollDel (Epoll ep) fd = () <$ c_epollDel ep fd

-- | Wait up to the given milliseconds for ready tags, written to the
-- array (of the given size): their count, or minus an errno.
epollWait :: Epoll -> Ptr CInt -> Int -> Int -> IO Int
epollWait (Epoll ep) tags n ms = fromIntegral <$> c_epollWait ep tags (fromIntegral n) (fromIntegral ms)

-- | The same without waiting.
epollPoll :: Epoll -> Ptr CInt -> Int -> IO Int
epollPoll (Epoll ep) tags n = fromIntegral <$> c_epollPoll ep tags (fromIntegral n) 0
