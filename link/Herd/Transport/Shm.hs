{-# LANGUAGE InterruptibleFFI #-}
{-# LANGUAGE ScopedTypeVariables #-}
-- | The shared-memory transport (HaLVM's IVC on one Linux host): a pair of
-- single-producer single-consumer byte rings in one anonymous shared
-- mapping per master-worker link, the bytes carrying the same frames as
-- every other transport. The ring code is C (@cbits/herd_shm.c@, C11
-- atomics); this module wraps it as an 'Endpoint'.
--
-- A link starts as a Unix-domain socket: the worker connects, proves the
-- secret and passes the handshake over it as over any socket. Then the
-- worker sends one byte (ready), and the master answers with the segment's
-- memfd and two eventfds passed over the socket (@SCM_RIGHTS@). From then
-- on the socket carries nothing; it stays open only so that each side sees
-- the other's death as its end of file, waited on together with the
-- eventfd.
--
-- Promises: nothing is created in any file system (a memfd has no name,
-- and the kernel frees it with its last mapping and descriptor, so even
-- SIGKILL leaves nothing behind); a ring whose indices do not add up is
-- reported as 'PeerBroken' and never read again; the mapping stays valid
-- while any thread may still be using it (it is unmapped by a finalizer,
-- not by 'closeConnection').
module Herd.Transport.Shm
  ( upgradeMaster
  , upgradeWorker
  , ringBytes
  , spinNanos
    -- * Both ends in one process (tests, measurements)
  , shmLoopback
  ) where

import Control.Exception
import Control.Monad (when, unless)
import Data.IORef
import Data.Word (Word8, Word64)
import Foreign.C.Error (Errno (..), eINTR, errnoToIOError)
import Foreign.C.Types (CInt (..), CLong (..), CSize (..))
import Foreign.ForeignPtr
-- 'unsafeWithForeignPtr': what runs inside always returns; see
-- "Herd.Transport.Send" for why not 'withForeignPtr'
import GHC.ForeignPtr (unsafeWithForeignPtr)
import Foreign.Marshal.Alloc (alloca)
import Foreign.Marshal.Array (allocaArray, peekArray, withArray)
import Foreign.Ptr (FunPtr, Ptr, nullPtr)
import Foreign.Storable (peek)
import Herd.Transport
import Network.Socket (Family (..), Socket, SocketType (..), close, defaultProtocol, socketPair, withFdSocket)
import System.Posix.IO (closeFd, dup)
import System.Posix.Types (Fd (..))

data Ring

foreign import ccall unsafe "herd_shm_create"
  c_create :: Word64 -> Ptr CInt -> IO CInt
foreign import ccall unsafe "herd_shm_open"
  c_open :: CInt -> Word64 -> CInt -> CInt -> CInt -> CInt -> CLong -> Ptr CInt -> IO (Ptr Ring)
foreign import ccall unsafe "&herd_shm_close"
  c_closePtr :: FunPtr (Ptr Ring -> IO ())
foreign import ccall unsafe "herd_shm_recv"
  c_recv :: Ptr Ring -> Ptr Word8 -> CSize -> IO CLong
foreign import ccall unsafe "herd_shm_send"
  c_send :: Ptr Ring -> Ptr Word8 -> CSize -> IO CLong
foreign import ccall unsafe "herd_shm_arm"
  c_arm :: Ptr Ring -> CInt -> IO CInt
-- unsafe: it spins for at most 'spinNanos' and must not give up the
-- runtime (taking it back costs more than the spin saves)
foreign import ccall unsafe "herd_shm_spin"
  c_spin :: Ptr Ring -> IO CInt
foreign import ccall interruptible "herd_shm_wait_in"
  c_waitIn :: Ptr Ring -> IO CInt
foreign import ccall interruptible "herd_shm_wait_out"
  c_waitOut :: Ptr Ring -> IO CInt
foreign import ccall unsafe "herd_shm_fd"
  c_fd :: Ptr Ring -> IO CInt
foreign import ccall unsafe "herd_shm_damage_for_test"
  c_damage :: Ptr Ring -> Word64 -> IO ()
foreign import ccall safe "herd_send_fds"
  c_sendFds :: CInt -> Ptr CInt -> CInt -> IO CInt
foreign import ccall safe "herd_recv_fds"
  c_recvFds :: CInt -> Ptr CInt -> CInt -> CInt -> IO CInt
foreign import ccall safe "herd_recv_byte"
  c_recvByte :: CInt -> CInt -> IO CInt
foreign import ccall safe "herd_send_byte"
  c_sendByte :: CInt -> CInt -> IO CInt

-- | Bytes in each direction's ring. A frame larger than this streams
-- through it in pieces.
ringBytes :: Int
ringBytes = 1024 * 1024

readyByte :: CInt
readyByte = 0x52  -- 'R'

-- | The master's side of the upgrade, on a Unix connection whose handshake
-- has passed: wait (up to the given seconds) for the worker's ready byte,
-- make the segment, pass it, and return the shared-memory connection.
upgradeMaster :: Double -> Connection -> IO Connection
upgradeMaster secs conn = do
  sock <- socketOf conn
  leftover <- hasBufferedFrame conn
  when leftover $ throwIO (PeerBroken "bytes after the hello, before the switch to shared memory")
  byte <- withFdSocket sock $ \fd -> c_recvByte fd (round (secs * 1000))
  when (byte < 0) $ throwIO (errnoToIOError "waiting for the worker's ready byte" (Errno (negate byte)) Nothing Nothing)
  unless (byte == readyByte) $ throwIO (PeerBroken ("expected the ready byte, got " ++ show byte))
  (memfd, efdMaster, efdWorker) <- createSegment
  let closeAll = mapM_ (closeFd . Fd) [memfd, efdMaster, efdWorker]
  flip onException closeAll $ do
    sent <- withFdSocket sock $ \fd -> withArray [memfd, efdWorker, efdMaster] $ \p -> c_sendFds fd p 3
    when (sent /= 0) $ throwIO (errnoToIOError "passing the shared segment" (Errno sent) Nothing Nothing)
    ring <- openRing memfd 0 efdMaster efdWorker sock
    closeFd (Fd memfd)
    shmConnection ring sock (connPeer conn ++ " (shared memory)")

-- | The worker's side: send the ready byte, take the segment (within the
-- given seconds), and return the shared-memory connection.
upgradeWorker :: Double -> Connection -> IO Connection
upgradeWorker secs conn = do
  sock <- socketOf conn
  sent <- withFdSocket sock $ \fd -> c_sendByte fd readyByte
  when (sent /= 0) $ throwIO (errnoToIOError "sending the ready byte" (Errno sent) Nothing Nothing)
  fds <- allocaArray 3 $ \out -> do
    rc <- withFdSocket sock $ \fd -> c_recvFds fd out 3 (round (secs * 1000))
    when (rc /= 0) $ throwIO (errnoToIOError "receiving the shared segment" (Errno rc) Nothing Nothing)
    peekArray 3 out
  case fds of
    [memfd, mine, theirs] -> do
      ring <- openRing memfd 1 mine theirs sock `onException` mapM_ (closeFd . Fd) fds
      closeFd (Fd memfd)
      shmConnection ring sock (connPeer conn ++ " (shared memory)")
    _ -> throwIO (PeerBroken "wrong number of descriptors")

-- | Both ends of one shared-memory link in this process (the master's side
-- first), over a fresh Unix socket pair, and an action that corrupts the
-- index the master's side publishes, as a broken peer would (for tests of
-- the receiver's checks).
shmLoopback :: IO (Connection, Connection, IO ())
shmLoopback = do
  (a, b) <- socketPair AF_UNIX Stream defaultProtocol
  (memfd, efdMaster, efdWorker) <- createSegment
  workerMine <- dupFd efdWorker
  workerTheirs <- dupFd efdMaster
  master <- openRing memfd 0 efdMaster efdWorker a
  worker <- openRing memfd 1 workerMine workerTheirs b
  closeFd (Fd memfd)
  m <- shmConnection master a "loopback master"
  w <- shmConnection worker b "loopback worker"
  pure (m, w, withForeignPtr master $ \r -> c_damage r (2 * fromIntegral ringBytes + 1))
  where
    dupFd fd = (\(Fd d) -> d) <$> dup (Fd fd)

-- A fresh segment of two rings of 'ringBytes', sealed, and the master's
-- and the worker's eventfds.
createSegment :: IO (CInt, CInt, CInt)
createSegment = allocaArray 3 $ \out -> do
  rc <- c_create (fromIntegral ringBytes) out
  when (rc /= 0) $ throwIO (errnoToIOError "creating the shared segment" (Errno rc) Nothing Nothing)
  [memfd, efdMaster, efdWorker] <- peekArray 3 out
  pure (memfd, efdMaster, efdWorker)

socketOf :: Connection -> IO Socket
socketOf conn = case connSocket conn of
  Just sock | connKind conn == UnixTransport -> pure sock
  _ -> throwIO (PeerBroken "shared memory is set up over a local (Unix) socket only")

openRing :: CInt -> CInt -> CInt -> CInt -> Socket -> IO (ForeignPtr Ring)
openRing memfd side mine theirs sock = withFdSocket sock $ \ctl -> alloca $ \errp -> do
  p <- c_open memfd (if side == 0 then fromIntegral ringBytes else 0) side mine theirs ctl
                (fromIntegral spinNanos) errp
  if p == nullPtr
    then do
      e <- peek errp
      throwIO (errnoToIOError "mapping the shared segment" (Errno e) Nothing Nothing)
    else newForeignPtr c_closePtr p

shmConnection :: ForeignPtr Ring -> Socket -> String -> IO Connection
shmConnection ring sock peer = do
  closed <- newIORef False
  let use act = do
        isClosed <- readIORef closed
        when isClosed $ throwIO (PeerBroken "connection closed")
        unsafeWithForeignPtr ring act
      broken :: IO a
      broken = throwIO (PeerBroken "the peer's shared ring has inconsistent indices")
      recvNow r buf n = do
        got <- c_recv r buf (fromIntegral n)
        if got == -2 then broken else pure (fromIntegral got)
      ep = Endpoint
        { epKind = ShmTransport
        , epRecv = \buf n -> use $ \r -> recvNow r buf n
        , epSend = \buf n -> use $ \r -> do
            got <- c_send r buf (fromIntegral n)
            if got == -2 then broken else pure (fromIntegral got)
        , epRecvWait = \buf n -> use $ \r -> do
            first <- recvNow r buf n
            if first /= -1 then pure first else do
              spun <- c_spin r
              if spun /= 0 then recvNow r buf n else do
                rc <- waitResult =<< c_waitIn r
                if rc == (0 :: Int) then pure (-1) else recvNow r buf n
        , epWaitOut = use $ \r -> do
            rc <- c_waitOut r
            when (rc == 0) $ throwIO (PeerBroken "the peer went away while a send waited for room")
            when (rc < 0 && Errno (negate rc) /= eINTR) $
              throwIO (errnoToIOError "waiting for room" (Errno (negate rc)) Nothing Nothing)
        , epArm = \drain -> use $ \r -> (/= 0) <$> c_arm r (if drain then 1 else 0)
        , epFds = use $ \r -> do
            efd <- c_fd r
            ctl <- withFdSocket sock pure
            pure [efd, ctl]
        , epEdge = True
        , epClose = do
            writeIORef closed True
            close sock
        , epLiveness = \_ -> pure 0
        , epSocket = Just sock
        }
  newConnection ep peer
  where
    waitResult rc
      | rc >= 0 = pure (fromIntegral rc)
      | Errno (negate rc) == eINTR = pure 0
      | otherwise = throwIO (errnoToIOError "poll" (Errno (negate rc)) Nothing Nothing)
