{-# LANGUAGE ScopedTypeVariables #-}
{-# LANGUAGE InterruptibleFFI #-}
-- | Framed connections over any of herd's transports (TCP, Unix-domain
-- sockets, shared-memory rings), and the waits that keep GHC's IO manager
-- off the hot path.
--
-- A frame is a 4-byte big-endian length and that many bytes, the same on
-- every transport. The receiver checks the length against its cap before
-- allocating anything for the body (INV-CAP), and a frame cut short by the
-- peer is an error, not a short message (INV-WHOLE). Sends on one
-- connection are serialised by a lock, so frames from concurrent senders
-- never interleave (INV-SEND).
--
-- A transport is an 'Endpoint': a non-blocking byte pipe with a way to
-- wait. 'recvFrame' waits in a blocking foreign call on the caller's own
-- OS thread (a @recv@ on sockets; a spin, then @poll@, on shared rings): a
-- wake-up then costs a return from the kernel, not an IO manager round
-- (re-arming the descriptor, waking its thread, handing over to this one),
-- which measured most of the cost of a small message. The calls are
-- interruptible, so 'System.Timeout.timeout' and
-- 'Control.Concurrent.killThread' still work on a waiting thread. Loops
-- over many connections read without waiting ('recvAvailable') after an
-- epoll wait on 'connWaitFds'; 'awaitReadable' keeps the IO manager's way,
-- for a loop with a thread per connection.
module Herd.Transport
  ( -- * Connections
    Connection
  , connPeer
  , connKind
  , connSocket
  , newConnection
  , closeConnection
  , setLiveness
  , TransportKind (..)
  , transportName
  , parseTransportKind
  , Endpoint (..)
  , TransportError (..)
    -- * Frames
  , sendFrame
  , sendFrameStrict
  , recvFrame
  , hasBufferedFrame
    -- * Waiting
  , awaitReadable
  , connWaitFds
  , connEdgeTriggered
  , armConnection
    -- * Reading and sending without waiting (the epoll loop)
  , recvAvailable
  , takeBufferedFrame
  , framed
  , frameParts
  , sendAvailableParts
  , sendRaw
  ) where

import Control.Concurrent (threadWaitReadSTM)
import Control.Concurrent.MVar
import Control.Concurrent.STM (STM, atomically, orElse)
import Control.Exception
import Control.Monad (when, forM)
import qualified Data.ByteString as B
import qualified Data.ByteString.Internal as BI
import qualified Data.ByteString.Lazy as BL
import qualified Data.ByteString.Unsafe as BU
import Data.IORef
import Data.Word (Word8)
import Foreign.C.Types (CInt (..))
import Foreign.ForeignPtr (ForeignPtr, mallocForeignPtrBytes, withForeignPtr)
import Foreign.Ptr (Ptr, castPtr, plusPtr)
import System.Posix.Types (Fd (..))
import Network.Socket (Socket)
import Herd.Base (TransportKind (..), transportName, parseTransportKind)
import Herd.Bytes (pokeBE, word32At)

-- | One transport's byte pipe. Every operation but the waits returns at
-- once.
data Endpoint = Endpoint
  { epKind     :: !TransportKind
  , epRecv     :: Ptr Word8 -> Int -> IO Int
    -- ^ copy up to n bytes in: the count, 0 at end of stream, -1 when
    -- nothing is there now; throws on an error
  , epSend     :: Ptr Word8 -> Int -> IO Int
    -- ^ take up to n bytes: the count taken now (maybe 0); throws on error
  , epRecvWait :: Ptr Word8 -> Int -> IO Int
    -- ^ like 'epRecv', but wait for bytes first (for about a second at
    -- most: -1 then means nothing came yet); the cheapest way for one
    -- thread to wait on one connection
  , epWaitOut  :: IO ()
    -- ^ block until a send may make progress
  , epArm      :: Bool -> IO Bool
    -- ^ get ready for a wait on 'epFds' elsewhere (epoll, the IO manager);
    -- the flag says whether to clear stale wake-ups first (needed for a
    -- level-triggered wait). True: bytes are already there, do not wait
  , epFds      :: IO [CInt]
    -- ^ descriptors that become readable when a receive may progress
  , epEdge     :: !Bool
    -- ^ whether an epoll wait on 'epFds' must be edge-triggered
  , epClose    :: IO ()
  , epLiveness :: Double -> IO Int
    -- ^ see 'setLiveness'
  , epSocket   :: !(Maybe Socket)
    -- ^ the socket underneath, if any (the shared-memory upgrade passes
    -- descriptors over it)
  }

-- | One framed, bidirectional connection.
data Connection = Connection
  { connEndpoint :: !Endpoint
  , connPending  :: !(IORef B.ByteString)  -- ^ bytes read past the last frame
  , connSendLock :: !(MVar ())
  , connPeer     :: !String                -- ^ the peer's address, for log lines
  , connBuffer   :: !(ForeignPtr Word8)    -- ^ where bytes land before they are copied out
  , connLarge    :: !(IORef (Maybe Large))
    -- ^ a large frame being read straight into a buffer of its size
  , connComplete :: !(IORef (Maybe B.ByteString))
    -- ^ a large frame read whole, to be taken before the pending bytes
  }

-- A large frame in progress: its body's buffer, length, and bytes so far.
data Large = Large !(ForeignPtr Word8) !Int !Int

-- | The transport a connection runs over.
connKind :: Connection -> TransportKind
connKind = epKind . connEndpoint

-- Bytes one read asks for. Reads land in the connection's own buffer and
-- only the bytes that came are copied out, so a small message costs a small
-- allocation, not a fresh buffer of this size.
readChunk :: Int
readChunk = 256 * 1024

-- | A connection over an endpoint, with the peer's name for log lines.
newConnection :: Endpoint -> String -> IO Connection
newConnection ep peer =
  Connection ep <$> newIORef B.empty <*> newMVar () <*> pure peer <*> mallocForeignPtrBytes readChunk
                <*> newIORef Nothing <*> newIORef Nothing

-- | Why a frame could not be received or sent.
data TransportError
  = FrameTooLarge { frameClaimed :: !Int, frameLimit :: !Int }
    -- ^ the length prefix exceeds the receiver's cap
  | TruncatedFrame { frameExpected :: !Int, frameGot :: !Int }
    -- ^ the peer closed the connection in the middle of a frame
  | PeerBroken String
    -- ^ the peer broke the transport itself (e.g. a shared ring whose
    -- indices are inconsistent), or went away while a send waited
  deriving (Eq, Show)

instance Exception TransportError where
  displayException (FrameTooLarge n cap) =
    "frame of " ++ show n ++ " bytes exceeds the limit of " ++ show cap
  displayException (TruncatedFrame want got) =
    "connection closed mid-frame (" ++ show got ++ " of " ++ show want ++ " bytes)"
  displayException (PeerBroken why) = why

-- | Declare the connection dead after this many seconds (at least 1) in
-- which the peer answered nothing. On TCP this sets the kernel's keepalive
-- probes and a send timeout; on one host a dead peer shows at once as the
-- end of its socket, so this does nothing there. Returns the errno of a
-- failed socket option, or 0.
setLiveness :: Double -> Connection -> IO Int
setLiveness secs conn = epLiveness (connEndpoint conn) secs

-- | The socket underneath the connection, if it has one.
connSocket :: Connection -> Maybe Socket
connSocket = epSocket . connEndpoint

-- | Close the connection; safe to call more than once.
closeConnection :: Connection -> IO ()
closeConnection conn = epClose (connEndpoint conn) `catch` \(_ :: SomeException) -> pure ()

-- | Send one frame.
sendFrame :: Connection -> BL.ByteString -> IO ()
sendFrame conn body = sendFrameStrict conn (BL.toStrict body)

-- | Send one frame whose body is a strict string.
sendFrameStrict :: Connection -> B.ByteString -> IO ()
sendFrameStrict conn body = sendRawParts conn (frameParts body)

-- | The bytes of one frame as parts to send in order: a small frame as one
-- copy with its length in front ('framed'), a large one as the length and
-- the body itself, so the body is not copied.
frameParts :: B.ByteString -> [B.ByteString]
frameParts body
  | B.length body <= 64 * 1024 = [framed body]
  | otherwise = [lengthBytes, body]
  where
    lengthBytes = BI.unsafeCreate 4 $ \p ->
      pokeBE 4 p 0 (fromIntegral (B.length body))

-- | The bytes of one frame: its length, then the body.
framed :: B.ByteString -> B.ByteString
framed body = BI.unsafeCreate (4 + n) $ \p -> do
  pokeBE 4 p 0 (fromIntegral n)
  BU.unsafeUseAsCString body $ \src -> BI.memcpy (p `plusPtr` 4) (castPtr src) n
  where n = B.length body

-- Send what the endpoint takes now; the rest.
sendSome :: Endpoint -> B.ByteString -> IO B.ByteString
sendSome ep = go
  where
    go bs | B.null bs = pure bs
          | otherwise = do
              k <- BU.unsafeUseAsCStringLen bs $ \(p, n) -> epSend ep (castPtr p) n
              if k <= 0 then pure bs else go (B.drop k bs)

-- | Send bytes already framed (from 'framed'), waiting as needed.
sendRaw :: Connection -> B.ByteString -> IO ()
sendRaw conn bytes = sendRawParts conn [bytes]

-- | Send these parts in order ('frameParts'), waiting as needed, under one
-- hold of the send lock.
sendRawParts :: Connection -> [B.ByteString] -> IO ()
sendRawParts conn parts = withMVar (connSendLock conn) $ \_ -> mapM_ go parts
  where
    ep = connEndpoint conn
    go bs = do
      rest <- sendSome ep bs
      when (not (B.null rest)) $ epWaitOut ep >> go rest

-- | Send as much of these parts as the transport takes now, without
-- waiting, and return the parts (or the rest of one) left; throws on an
-- error.
sendAvailableParts :: Connection -> [B.ByteString] -> IO [B.ByteString]
sendAvailableParts conn parts = withMVar (connSendLock conn) $ \_ -> go parts
  where
    go [] = pure []
    go (p : ps) = do
      rest <- sendSome (connEndpoint conn) p
      if B.null rest then go ps else pure (rest : ps)

-- | Whether a whole frame has already been read, so the next 'recvFrame'
-- will not wait.
hasBufferedFrame :: Connection -> IO Bool
hasBufferedFrame conn = do
  complete <- readIORef (connComplete conn)
  pending <- readIORef (connPending conn)
  pure $ complete /= Nothing || (B.length pending >= 4 && B.length pending - 4 >= lengthPrefix pending)

lengthPrefix :: B.ByteString -> Int
lengthPrefix bs = word32At bs 0   -- callers check that four bytes are there

-- | Receive one frame of at most the given size, waiting on this thread's
-- own OS thread. 'Nothing' means the peer closed the connection cleanly
-- between frames; a frame over the cap, cut short, or a broken transport
-- throws 'TransportError'.
recvFrame :: Int -> Connection -> IO (Maybe B.ByteString)
recvFrame cap conn = do
  ready <- takeBufferedFrame cap conn
  case ready of
    Just frame -> pure (Just frame)
    Nothing -> do
      got <- recvWaiting conn
      case got of
        0 -> do
          pending <- readIORef (connPending conn)
          large <- readIORef (connLarge conn)
          case large of
            Just (Large _ len have) -> throwIO (TruncatedFrame (4 + len) (4 + have))
            Nothing | B.null pending -> pure Nothing
                    | otherwise -> throwIO (TruncatedFrame (expectedLength pending) (B.length pending))
        _ -> recvFrame cap conn
  where
    expectedLength pending
      | B.length pending >= 4 = 4 + lengthPrefix pending
      | otherwise = 4

-- | Wait through GHC's IO manager until a frame is buffered or bytes may
-- be read ('False'), or the transaction succeeds first ('True'). Reads
-- nothing. For loops that keep a thread per connection.
awaitReadable :: Connection -> STM () -> IO Bool
awaitReadable conn stop = do
  buffered <- hasBufferedFrame conn
  ready <- if buffered then pure True else epArm (connEndpoint conn) True
  if ready
    then atomically ((stop >> pure True) `orElse` pure False)
    else do
      fds <- epFds (connEndpoint conn)
      waits <- forM fds $ \fd -> threadWaitReadSTM (Fd fd)
      r <- atomically (foldr (\(w, _) rest -> (w >> pure False) `orElse` rest) (stop >> pure True) waits)
      mapM_ snd waits
      pure r

-- | The descriptors an epoll loop waits on for this connection.
connWaitFds :: Connection -> IO [CInt]
connWaitFds = epFds . connEndpoint

-- | Whether those descriptors must be registered edge-triggered.
connEdgeTriggered :: Connection -> Bool
connEdgeTriggered = epEdge . connEndpoint

-- | Get ready to wait on 'connWaitFds' with edge-triggered epoll; 'True'
-- means bytes are already there.
armConnection :: Connection -> IO Bool
armConnection conn = epArm (connEndpoint conn) False

-- | Read what the transport has for this connection, without waiting:
-- the number of bytes read, 0 at end of stream, -1 when nothing was ready.
-- Throws on an error.
recvAvailable :: Connection -> IO Int
recvAvailable conn = recvInto conn (epRecv (connEndpoint conn))

-- Wait for bytes (up to about a second) and read them into the pending
-- buffer: 'recvAvailable', waiting.
recvWaiting :: Connection -> IO Int
recvWaiting conn = recvInto conn (epRecvWait (connEndpoint conn))

-- Receive with the given read: into the large frame in progress if there
-- is one, else into the connection's buffer, appending what came to the
-- pending bytes.
recvInto :: Connection -> (Ptr Word8 -> Int -> IO Int) -> IO Int
recvInto conn receive = do
  large <- readIORef (connLarge conn)
  case large of
    Just (Large buf len have) -> do
      got <- withForeignPtr buf $ \dst -> receive (dst `plusPtr` have) (len - have)
      when (got > 0) $
        if have + got < len
          then writeIORef (connLarge conn) (Just (Large buf len (have + got)))
          else do
            writeIORef (connLarge conn) Nothing
            writeIORef (connComplete conn) (Just (BI.fromForeignPtr buf 0 len))
      pure got
    Nothing -> withForeignPtr (connBuffer conn) $ \p -> do
      got <- receive p readChunk
      when (got > 0) $ do
        chunk <- B.packCStringLen (castPtr p, got)
        modifyIORef' (connPending conn) (\pending -> if B.null pending then chunk else pending <> chunk)
      pure got

-- | Take one whole frame of at most the given size from what has been read
-- already, if there is one (a frame over the cap throws 'FrameTooLarge').
-- A large frame that has begun is moved into a buffer of its own size, so
-- that its body is then read straight there: gathering it chunk by chunk
-- copied it over and over.
takeBufferedFrame :: Int -> Connection -> IO (Maybe B.ByteString)
takeBufferedFrame cap conn = do
  complete <- readIORef (connComplete conn)
  case complete of
    Just frame -> writeIORef (connComplete conn) Nothing >> pure (Just frame)
    Nothing -> do
      pending <- readIORef (connPending conn)
      if B.length pending < 4 then pure Nothing else do
        let len = lengthPrefix pending
        when (len > cap) $ throwIO (FrameTooLarge len cap)
        if B.length pending - 4 >= len
          then do
            let (body, rest) = B.splitAt len (B.drop 4 pending)
            writeIORef (connPending conn) rest
            pure (Just body)
          else do
            when (len > readChunk) $ do
              -- pending holds only this frame's beginning: move it
              let have = B.drop 4 pending
              buf <- BI.mallocByteString len
              withForeignPtr buf $ \dst -> BU.unsafeUseAsCStringLen have $ \(src, n) ->
                BI.memcpy dst (castPtr src) n
              writeIORef (connPending conn) B.empty
              writeIORef (connLarge conn) (Just (Large buf len (B.length have)))
            pure Nothing
