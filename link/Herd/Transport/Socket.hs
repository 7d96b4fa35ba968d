{-# LANGUAGE InterruptibleFFI #-}
-- | Stream sockets (TCP and Unix-domain) as transport endpoints. A read
-- that waits first spins for a short while, receiving without waiting
-- (the adaptive spin shared with the shared-memory rings,
-- @cbits/herd_spin.h@, for at most 'spinNanos'), then makes one blocking
-- @recv@ on the caller's OS thread (the socket is switched to blocking
-- reads with a one-second timeout); every other read and write passes
-- @MSG_DONTWAIT@. Blocking waits are interruptible.
module Herd.Transport.Socket
  ( socketEndpoint
  , socketConnection
  , socketConnectionSpinning
  , acceptConnection
  , unixSendBuffer
  ) where

import Control.Exception (throwIO)
import Control.Monad (when)
import Data.Bits ((.|.))
import Data.Word (Word8)
import Foreign.C.Error (Errno (..), eAGAIN, eWOULDBLOCK, eINTR, getErrno, errnoToIOError)
import Foreign.C.Types (CInt (..), CLong (..), CSize (..))
import Foreign.ForeignPtr (mallocForeignPtrBytes, withForeignPtr)
-- 'unsafeWithForeignPtr': what runs inside always returns; see
-- "Herd.Transport.Send" for why not 'withForeignPtr'
import GHC.ForeignPtr (unsafeWithForeignPtr)
import Foreign.Ptr (Ptr)
import Herd.Transport
import Network.Socket
import System.Posix.Types (CSsize (..))

foreign import ccall unsafe "recv"
  c_recv :: CInt -> Ptr Word8 -> CSize -> CInt -> IO CSsize
foreign import ccall unsafe "send"
  c_send :: CInt -> Ptr Word8 -> CSize -> CInt -> IO CSsize
-- unsafe: it spins for at most 'spinNanos'; giving up the runtime and
-- taking it back would cost more than the spin saves
foreign import ccall unsafe "herd_recv_spin"
  c_recvSpin :: CInt -> Ptr Word8 -> CSize -> Ptr Spin -> IO CLong
foreign import ccall interruptible "herd_recv_wait"
  c_recvWait :: CInt -> Ptr Word8 -> CSize -> Ptr Spin -> IO CLong
foreign import ccall unsafe "herd_spin_bytes"
  c_spinBytes :: CSize
foreign import ccall unsafe "herd_spin_setup"
  c_spinSetup :: Ptr Spin -> CLong -> IO ()
foreign import ccall unsafe "herd_socket_blocking"
  c_socketBlocking :: CInt -> IO CInt
foreign import ccall interruptible "herd_wait_writable"
  c_waitWritable :: CInt -> IO CInt

-- A reader's spin state (@struct herd_spin@).
data Spin

-- | The endpoint of a connected stream socket. The liveness action is the
-- transport's own (TCP sets keepalive probes; a Unix socket needs none).
-- A reader waiting on it spins for up to the given nanoseconds first (0:
-- it blocks at once).
socketEndpoint :: Int -> TransportKind -> (Double -> Socket -> IO Int) -> Socket -> IO Endpoint
socketEndpoint spinFor kind liveness sock = do
  spin <- mallocForeignPtrBytes (fromIntegral c_spinBytes)
  withForeignPtr spin $ \sp -> c_spinSetup sp (fromIntegral spinFor)
  pure Endpoint
    { epKind = kind
    , epRecv = \p n -> withFdSocket sock $ \fd -> do
        rc <- c_recv fd p (fromIntegral n) dontWait
        if rc >= 0 then pure (fromIntegral rc) else retryable "recv" (pure (-1))
    , epSend = \p n -> withFdSocket sock $ \fd -> do
        rc <- c_send fd p (fromIntegral n) (dontWait .|. noSignal)
        if rc >= 0 then pure (fromIntegral rc) else retryable "send" (pure 0)
    , epRecvWait = \p n -> withFdSocket sock $ \fd -> unsafeWithForeignPtr spin $ \sp -> do
        spun <- c_recvSpin fd p (fromIntegral n) sp
        rc <- if spun /= -1 then pure spun else c_recvWait fd p (fromIntegral n) sp
        if rc >= -1 then pure (fromIntegral rc)
          else throwIO (errnoToIOError "recv" (Errno (fromIntegral (negate rc))) Nothing Nothing)
    , epWaitOut = withFdSocket sock $ \fd -> () <$ (waitResult "poll" =<< c_waitWritable fd)
    , epArm = \_ -> pure False
    , epFds = withFdSocket sock (\fd -> pure [fd])
    , epEdge = False
    , epClose = close sock
    , epLiveness = \secs -> liveness secs sock
    , epSocket = Just sock
    }
  where
    dontWait = 0x40     -- MSG_DONTWAIT
    noSignal = 0x4000   -- MSG_NOSIGNAL
    retryable what nothing = do
      errno <- getErrno
      if errno == eAGAIN || errno == eWOULDBLOCK || errno == eINTR then nothing
        else throwIO (errnoToIOError what errno Nothing Nothing)

-- A wait's answer: 1 or 2 as they are, 0 for an interrupted or timed-out
-- one (look again).
waitResult :: String -> CInt -> IO Int
waitResult what rc
  | rc >= 0 = pure (fromIntegral rc)
  | Errno (negate rc) == eINTR = pure 0
  | otherwise = throwIO (errnoToIOError what (Errno (negate rc)) Nothing Nothing)

-- | A connection over a connected socket; its waiting reads spin for up
-- to 'spinNanos' before they block.
socketConnection :: TransportKind -> (Double -> Socket -> IO Int) -> Socket -> String -> IO Connection
socketConnection = socketConnectionSpinning spinNanos

-- | 'socketConnection' whose waiting reads spin for up to the given
-- nanoseconds before they block (0: they block at once). A socket fed by
-- a thread of the same process wants 0: the spin is an unsafe call, which
-- holds the runtime that thread needs to send.
socketConnectionSpinning :: Int -> TransportKind -> (Double -> Socket -> IO Int) -> Socket -> String -> IO Connection
socketConnectionSpinning spinFor kind liveness sock peer = do
  withFdSocket sock setCloseOnExecIfNeeded
  -- reads that wait block in the kernel (one system call per message);
  -- every other operation passes MSG_DONTWAIT
  case kind of
    UnixTransport -> setSocketOption sock SendBuffer unixSendBuffer
    _ -> pure ()
  rc <- withFdSocket sock c_socketBlocking
  when (rc /= 0) $ throwIO (errnoToIOError "setting up the socket" (Errno rc) Nothing Nothing)
  ep <- socketEndpoint spinFor kind liveness sock
  newConnection ep peer

-- | The send buffer asked for on a Unix-domain socket; the kernel caps the
-- request at its @wmem_max@. A stream of large messages ran markedly faster
-- with 4 MiB than with 256 KiB (@herd bench bandwidth@).
unixSendBuffer :: Int
unixSendBuffer = 4 * 1024 * 1024

-- | Accept one connection on a listening socket of this transport.
acceptConnection :: TransportKind -> (Double -> Socket -> IO Int) -> Socket -> IO Connection
acceptConnection kind liveness lsock = do
  (sock, peer) <- accept lsock
  case kind of
    TcpTransport -> setSocketOption sock NoDelay 1
    _ -> pure ()
  socketConnection kind liveness sock (case kind of
    TcpTransport -> show peer
    _ -> "local socket")
