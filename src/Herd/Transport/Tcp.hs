{-# LANGUAGE ScopedTypeVariables #-}
-- | The TCP transport: framed messages between two processes, across hosts.
--
-- A frame is a 4-byte big-endian length and that many bytes. The receiver
-- checks the length against its cap before allocating anything for the
-- body (INV-CAP), and a frame cut short by the peer is an error, not a
-- short message (INV-WHOLE). Sockets have TCP_NODELAY set, since herd's
-- messages are already batched and latency matters more than packet count.
-- Sends on one connection are serialised by a lock, so frames from
-- concurrent senders never interleave (INV-SEND).
module Herd.Transport.Tcp
  ( Connection
  , connPeer
  , TransportError (..)
  , listenTcp
  , listenPort
  , acceptConnection
  , connectTcp
  , sendFrame
  , recvFrame
  , recvFrameDirect
  , sendFrameStrict
  , hasBufferedFrame
  , closeConnection
  , setLiveness
    -- * Reading without the IO manager (the epoll loop)
  , connFd
  , awaitReadable
  , recvAvailable
  , takeBufferedFrame
    -- * Sending without waiting
  , framed
  , sendAvailable
  , sendRaw
  ) where

import Control.Concurrent.MVar
import Control.Exception
import Control.Monad (when)
import Data.Bits (shiftL, shiftR, (.|.))
import qualified Data.ByteString as B
import qualified Data.ByteString.Builder as BB
import qualified Data.ByteString.Lazy as BL
import Data.IORef
import Control.Concurrent (threadWaitReadSTM)
import Control.Concurrent.STM (STM, atomically, orElse)
import Foreign.C.Types (CInt (..), CUInt (..), CSize (..))
import Foreign.C.Error (eAGAIN, eWOULDBLOCK, eINTR, getErrno, errnoToIOError)
import Foreign.Ptr (Ptr, castPtr, plusPtr)
import Foreign.Storable (pokeByteOff)
import qualified Data.ByteString.Internal as BI
import Foreign.ForeignPtr (ForeignPtr, mallocForeignPtrBytes, withForeignPtr)
import qualified Data.ByteString.Unsafe as BU
import Data.Word (Word8)
import System.Posix.Types (Fd (..), CSsize (..))
import Network.Socket
import qualified Network.Socket.ByteString as NSB
import qualified Network.Socket.ByteString.Lazy as NSL

-- | One framed, bidirectional connection.
data Connection = Connection
  { connSocket   :: !Socket
  , connPending  :: !(IORef B.ByteString)  -- ^ bytes read past the last frame
  , connSendLock :: !(MVar ())
  , connPeer     :: !String                -- ^ the peer's address, for log lines
  , connBuffer   :: !(ForeignPtr Word8)    -- ^ where the kernel's bytes land before they are copied out
  }

-- Bytes one read asks the kernel for. Reads land in the connection's own
-- buffer and only the bytes that came are copied out, so a small message
-- costs a small allocation, not a fresh buffer of this size.
readChunk :: Int
readChunk = 256 * 1024

-- | Why a frame could not be received.
data TransportError
  = FrameTooLarge { frameClaimed :: !Int, frameLimit :: !Int }
    -- ^ the length prefix exceeds the receiver's cap
  | TruncatedFrame { frameExpected :: !Int, frameGot :: !Int }
    -- ^ the peer closed the connection in the middle of a frame
  deriving (Eq, Show)

instance Exception TransportError where
  displayException (FrameTooLarge n cap) =
    "frame of " ++ show n ++ " bytes exceeds the limit of " ++ show cap
  displayException (TruncatedFrame want got) =
    "connection closed mid-frame (" ++ show got ++ " of " ++ show want ++ " bytes)"

foreign import ccall unsafe "herd_set_liveness"
  c_setLiveness :: CInt -> CInt -> CInt -> CInt -> CUInt -> IO CInt

-- | Declare the connection dead after this many seconds (at least 1) in
-- which the peer's kernel answered nothing: no data, no acknowledgement,
-- no answer to a keepalive probe. Probes go out every third of that time.
-- Receives and sends then fail with a timeout error. Returns the errno of a
-- failed socket option, or 0.
setLiveness :: Double -> Connection -> IO Int
setLiveness secs conn = withFdSocket (connSocket conn) $ \fd -> do
  let whole = max 1 (floor (secs / 3)) :: Int
  rc <- c_setLiveness fd (fromIntegral whole) (fromIntegral whole) 3 (round (secs * 1000))
  pure (fromIntegral rc)

-- | Listen on a host and port (0 for any free port).
listenTcp :: String -> Int -> IO Socket
listenTcp host port = do
  let hints = defaultHints { addrFlags = [AI_PASSIVE, AI_NUMERICSERV], addrSocketType = Stream }
  addr : _ <- getAddrInfo (Just hints) (Just host) (Just (show port))
  bracketOnError (socket (addrFamily addr) Stream defaultProtocol) close $ \sock -> do
    setSocketOption sock ReuseAddr 1
    withFdSocket sock setCloseOnExecIfNeeded
    bind sock (addrAddress addr)
    listen sock 1024
    pure sock

-- | The port a listening socket is bound to.
listenPort :: Socket -> IO Int
listenPort sock = fromIntegral <$> socketPort sock

-- | Accept one connection.
acceptConnection :: Socket -> IO Connection
acceptConnection lsock = do
  (sock, peer) <- accept lsock
  withFdSocket sock setCloseOnExecIfNeeded
  wrap sock (show peer)

-- | Connect to a master.
connectTcp :: String -> Int -> IO Connection
connectTcp host port = do
  let hints = defaultHints { addrFlags = [AI_NUMERICSERV], addrSocketType = Stream }
  addr : _ <- getAddrInfo (Just hints) (Just host) (Just (show port))
  bracketOnError (socket (addrFamily addr) Stream defaultProtocol) close $ \sock -> do
    withFdSocket sock setCloseOnExecIfNeeded
    connect sock (addrAddress addr)
    wrap sock (host ++ ":" ++ show port)

wrap :: Socket -> String -> IO Connection
wrap sock peer = do
  setSocketOption sock NoDelay 1
  pending <- newIORef B.empty
  lock <- newMVar ()
  buffer <- mallocForeignPtrBytes readChunk
  pure (Connection sock pending lock peer buffer)

-- | Send one frame.
sendFrame :: Connection -> BL.ByteString -> IO ()
sendFrame conn body = withMVar (connSendLock conn) $ \_ ->
  NSL.sendAll (connSocket conn) $
    BB.toLazyByteString (BB.word32BE (fromIntegral (BL.length body))) <> body

-- | Send one frame whose body is a strict string (one gathered write).
sendFrameStrict :: Connection -> B.ByteString -> IO ()
sendFrameStrict conn body = withMVar (connSendLock conn) $ \_ ->
  NSB.sendMany (connSocket conn)
    [BL.toStrict (BB.toLazyByteString (BB.word32BE (fromIntegral (B.length body)))), body]

-- | Whether a whole frame has already been read from the socket, so the
-- next 'recvFrame' will not wait.
hasBufferedFrame :: Connection -> IO Bool
hasBufferedFrame conn = do
  pending <- readIORef (connPending conn)
  pure $ B.length pending >= 4 &&
    B.length pending - 4 >= B.foldl' (\acc w -> (acc `shiftL` 8) .|. fromIntegral w) 0 (B.take 4 pending)

-- | Receive one frame of at most the given size. 'Nothing' means the peer
-- closed the connection cleanly between frames; a frame over the cap or cut
-- short throws 'TransportError'.
recvFrame :: Int -> Connection -> IO (Maybe B.ByteString)
recvFrame cap conn = do
  header <- recvExactly conn 4
  case header of
    Left 0 -> pure Nothing
    Left got -> throwIO (TruncatedFrame 4 got)
    Right h -> do
      let len = B.foldl' (\acc w -> (acc `shiftL` 8) .|. fromIntegral w) 0 h
      when (len > cap) $ throwIO (FrameTooLarge len cap)
      body <- recvExactly conn len
      case body of
        Left got -> throwIO (TruncatedFrame len got)
        Right b -> pure (Just b)

-- | 'recvFrame', waiting for bytes in a blocking call on this thread's
-- own OS thread instead of through GHC's IO manager. A wake-up then costs a
-- return from @poll@, not an IO manager round (re-arming the descriptor,
-- waking its thread, handing over to this one), which is most of the cost
-- of a small message. For a process with few connections, such as a
-- worker; a master with hundreds would tie up an OS thread for each.
recvFrameDirect :: Int -> Connection -> IO (Maybe B.ByteString)
recvFrameDirect cap conn = do
  let fill = do
        ready <- takeBufferedFrame cap conn
        case ready of
          Just frame -> pure (Just frame)
          Nothing -> do
            -- wait first: a frame not yet buffered is rarely already here
            fd <- connFd conn
            rc <- c_pollIn fd
            when (rc < 0) $ do
              errno <- getErrno
              when (errno /= eINTR) $ throwIO (errnoToIOError "poll" errno Nothing Nothing)
            got <- recvAvailable conn
            case got of
              0 -> do
                pending <- readIORef (connPending conn)
                if B.null pending then pure Nothing
                  else throwIO (TruncatedFrame (max 4 (expectedLength pending)) (B.length pending))
              _ -> fill
  fill
  where
    expectedLength pending
      | B.length pending >= 4 = B.foldl' (\acc w -> (acc `shiftL` 8) .|. fromIntegral w) 0 (B.take 4 pending)
      | otherwise = 4

foreign import ccall safe "herd_poll_in"
  c_pollIn :: CInt -> IO CInt

-- Read exactly n bytes, or 'Left' with the count read before end of file.
recvExactly :: Connection -> Int -> IO (Either Int B.ByteString)
recvExactly conn n = do
  pending <- readIORef (connPending conn)
  if B.length pending >= n
    then do
      let (now, later) = B.splitAt n pending
      writeIORef (connPending conn) later
      pure (Right now)
    else go [pending] (B.length pending)
  where
    go acc have
      | have >= n = do
          let whole = B.concat (reverse acc)
              (now, later) = B.splitAt n whole
          writeIORef (connPending conn) later
          pure (Right now)
      | otherwise = do
          chunk <- withForeignPtr (connBuffer conn) $ \p -> do
            got <- recvBuf (connSocket conn) p readChunk
            B.packCStringLen (castPtr p, got)
          if B.null chunk
            then writeIORef (connPending conn) B.empty >> pure (Left have)
            else go (chunk : acc) (have + B.length chunk)

-- | Close the connection; safe to call more than once.
closeConnection :: Connection -> IO ()
closeConnection conn = close (connSocket conn) `catch` \(_ :: SomeException) -> pure ()

-- | The connection's file descriptor.
connFd :: Connection -> IO CInt
connFd conn = withFdSocket (connSocket conn) pure

-- | Wait until a frame is buffered or bytes can be read ('False'), or the
-- transaction succeeds first ('True'). Reads nothing, so a thread waiting
-- here can stop between frames without losing a byte.
awaitReadable :: Connection -> STM () -> IO Bool
awaitReadable conn stop = do
  buffered <- hasBufferedFrame conn
  if buffered
    then atomically ((stop >> pure True) `orElse` pure False)
    else do
      fd <- connFd conn
      (ready, unregister) <- threadWaitReadSTM (Fd fd)
      r <- atomically ((stop >> pure True) `orElse` (ready >> pure False))
      unregister
      pure r

foreign import ccall unsafe "recv"
  c_recv :: CInt -> Ptr Word8 -> CSize -> CInt -> IO CSsize

-- | Read what the kernel has for this connection, without waiting, into
-- its buffer: the number of bytes read, 0 at end of file, -1 when nothing
-- was ready. Throws on a socket error.
recvAvailable :: Connection -> IO Int
recvAvailable conn = do
  fd <- connFd conn
  let dontWait = 0x40  -- MSG_DONTWAIT
  withForeignPtr (connBuffer conn) $ \p -> do
    rc <- c_recv fd p (fromIntegral readChunk) dontWait
    if rc < 0
      then do
        errno <- getErrno
        if errno == eAGAIN || errno == eWOULDBLOCK || errno == eINTR
          then pure (-1)
          else throwIO (errnoToIOError "recv" errno Nothing Nothing)
      else do
        when (rc > 0) $ do
          chunk <- B.packCStringLen (castPtr p, fromIntegral rc)
          modifyIORef' (connPending conn) (\pending -> if B.null pending then chunk else pending <> chunk)
        pure (fromIntegral rc)

foreign import ccall unsafe "send"
  c_send :: CInt -> Ptr Word8 -> CSize -> CInt -> IO CSsize

-- | The bytes of one frame: its length, then the body.
framed :: B.ByteString -> B.ByteString
framed body = BI.unsafeCreate (4 + n) $ \p -> do
  let byte i = fromIntegral (n `shiftR` (8 * (3 - i))) :: Word8
  mapM_ (\i -> pokeByteOff p i (byte i)) [0 .. 3]
  BU.unsafeUseAsCString body $ \src -> BI.memcpy (p `plusPtr` 4) (castPtr src) n
  where n = B.length body

-- | Send as much of these bytes as the kernel takes now, without waiting,
-- and return what is left (empty when all went). Throws on a socket error.
-- For a caller that holds the connection's only sending path.
sendAvailable :: Connection -> B.ByteString -> IO B.ByteString
sendAvailable conn bytes = do
  fd <- connFd conn
  let dontWaitNoSignal = 0x40 .|. 0x4000  -- MSG_DONTWAIT | MSG_NOSIGNAL
      go bs | B.null bs = pure bs
            | otherwise = do
                rc <- BU.unsafeUseAsCStringLen bs $ \(p, n) -> c_send fd (castPtr p) (fromIntegral n) dontWaitNoSignal
                if rc < 0
                  then do
                    errno <- getErrno
                    if errno == eAGAIN || errno == eWOULDBLOCK then pure bs
                      else if errno == eINTR then go bs
                      else throwIO (errnoToIOError "send" errno Nothing Nothing)
                  else go (B.drop (fromIntegral rc) bs)
  withMVar (connSendLock conn) $ \_ -> go bytes

-- | Send bytes already framed (from 'framed'), waiting as needed.
sendRaw :: Connection -> B.ByteString -> IO ()
sendRaw conn bytes = withMVar (connSendLock conn) $ \_ -> NSB.sendAll (connSocket conn) bytes

-- | Take one whole frame of at most the given size from what has been read
-- already, if there is one (a frame over the cap throws 'FrameTooLarge').
takeBufferedFrame :: Int -> Connection -> IO (Maybe B.ByteString)
takeBufferedFrame cap conn = do
  pending <- readIORef (connPending conn)
  if B.length pending < 4 then pure Nothing else do
    let len = B.foldl' (\acc w -> (acc `shiftL` 8) .|. fromIntegral w) 0 (B.take 4 pending)
    when (len > cap) $ throwIO (FrameTooLarge len cap)
    if B.length pending - 4 < len then pure Nothing else do
      let (body, rest) = B.splitAt len (B.drop 4 pending)
      writeIORef (connPending conn) rest
      pure (Just body)
