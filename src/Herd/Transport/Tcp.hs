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
  , sendFrameStrict
  , hasBufferedFrame
  , closeConnection
  , setLiveness
    -- * Reading without the IO manager (the epoll loop)
  , connFd
  , awaitReadable
  , recvAvailable
  , takeBufferedFrame
  ) where

import Control.Concurrent.MVar
import Control.Exception
import Control.Monad (when)
import Data.Bits (shiftL, (.|.))
import qualified Data.ByteString as B
import qualified Data.ByteString.Builder as BB
import qualified Data.ByteString.Lazy as BL
import Data.IORef
import Control.Concurrent (threadWaitReadSTM)
import Control.Concurrent.STM (STM, atomically, orElse)
import qualified Data.ByteString.Internal as BI
import Foreign.C.Types (CInt (..), CUInt (..), CSize (..))
import Foreign.C.Error (eAGAIN, eWOULDBLOCK, eINTR, getErrno, errnoToIOError)
import Foreign.Ptr (Ptr)
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
  }

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
  pure (Connection sock pending lock peer)

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
          chunk <- NSB.recv (connSocket conn) (max 65536 (min (n - have) (4 * 1024 * 1024)))
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
  let size = 256 * 1024
      dontWait = 0x40  -- MSG_DONTWAIT
  (chunk, rc) <- do
    rcRef <- newIORef 0
    bs <- BI.createAndTrim size $ \p -> do
      n <- c_recv fd p (fromIntegral size) dontWait
      writeIORef rcRef n
      pure (max 0 (fromIntegral n))
    (,) bs <$> readIORef rcRef
  if rc < 0
    then do
      errno <- getErrno
      if errno == eAGAIN || errno == eWOULDBLOCK || errno == eINTR
        then pure (-1)
        else throwIO (errnoToIOError "recv" errno Nothing Nothing)
    else do
      when (rc > 0) $ modifyIORef' (connPending conn) (<> chunk)
      pure (fromIntegral rc)

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
