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
-- wait. 'recvFrame' spins for up to 'spinNanos' (adaptively), then waits
-- in a blocking foreign call on the caller's own OS thread (a @recv@ on
-- sockets, @poll@ on shared rings): bytes that come during the spin cost
-- no wake-up at all, and a wake-up costs a return from the kernel, not an
-- IO manager round (re-arming the descriptor, waking its thread, handing
-- over to this one), which measured most of the cost of a small message.
-- The blocking calls are
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
  , recycleFrame
  , hasBufferedFrame
  , partialFrameBytes
    -- * Waiting
  , spinNanos
  , awaitReadable
  , connWaitFds
  , connEdgeTriggered
  , armConnection
    -- * Reading and sending without waiting (the epoll loop)
  , recvAvailable
  , recvAvailableShort
  , takeBufferedFrame
  , framed
  , frameParts
  , sendAvailableParts
  , sendRaw
  , sendRawParts
    -- * Failures
  , trySync
  ) where

import Control.Concurrent (threadWaitReadSTM)
import Control.Concurrent.STM (STM, atomically, orElse)
import Control.Exception
import Control.Monad (when, forM)
import qualified Data.ByteString as B
import qualified Data.ByteString.Internal as BI
import qualified Data.ByteString.Unsafe as BU
import Data.IORef
import Data.Word (Word8)
import Foreign.C.Types (CInt (..))
import Foreign.ForeignPtr (mallocForeignPtrBytes)
-- 'unsafeWithForeignPtr': what runs inside always returns; see
-- "Herd.Transport.Send" for why not 'withForeignPtr'
import GHC.ForeignPtr (unsafeWithForeignPtr)
import Foreign.ForeignPtr.Unsafe (unsafeForeignPtrToPtr)
import Foreign.Ptr (Ptr, castPtr, plusPtr)
import System.Posix.Types (Fd (..))
import Herd.Core.Base (TransportKind (..), transportName, parseTransportKind)
import Herd.Core.Bytes (peekPtrBE, word32At)
import Herd.Transport.Connection
import Herd.Transport.Send

-- | Whether a whole frame has already been read, so the next 'recvFrame'
-- will not wait.
hasBufferedFrame :: Connection -> IO Bool
hasBufferedFrame conn = do
  complete <- readIORef (connComplete conn)
  pending <- readIORef (connPending conn)
  pure $ complete /= Nothing || (B.length pending >= 4 && B.length pending - 4 >= lengthPrefix pending)

-- | Bytes of a frame begun and not yet whole (0: none begun): a reader
-- that sees the count stay put for long knows its peer stopped mid-frame.
partialFrameBytes :: Connection -> IO Int
partialFrameBytes conn = do
  large <- readIORef (connLarge conn)
  case large of
    Just (Large _ _ _ have) -> pure (4 + have)
    Nothing -> B.length <$> readIORef (connPending conn)

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
      got <- recvWaiting cap conn
      case got of
        0 -> do
          pending <- readIORef (connPending conn)
          large <- readIORef (connLarge conn)
          case large of
            Just (Large _ _ len have) -> throwIO (TruncatedFrame (4 + len) (4 + have))
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
recvAvailable conn = fst <$> recvInto Nothing conn (epRecv (connEndpoint conn))

-- | 'recvAvailable', also saying whether the read took less than it asked
-- for: on a level-triggered descriptor that means the kernel had nothing
-- more, so a reader driven by epoll can stop there instead of paying one
-- more system call to hear "nothing ready" (epoll reports the descriptor
-- again when more comes).
recvAvailableShort :: Connection -> IO (Int, Bool)
recvAvailableShort conn = do
  (got, asked) <- recvInto Nothing conn (epRecv (connEndpoint conn))
  pure (got, got > 0 && got < asked)

-- Wait for bytes (up to about a second) and read them into the pending
-- buffer: 'recvAvailable', waiting, for frames of at most this size.
recvWaiting :: Int -> Connection -> IO Int
recvWaiting cap conn = fst <$> recvInto (Just cap) conn (epRecvWait (connEndpoint conn))

-- Receive with the given read: into the large frame in progress if there
-- is one, else into the connection's buffer, appending what came to the
-- pending bytes. Gives the bytes read and how many it asked for. Given
-- the frame cap, a read that begins a large frame within it moves its
-- bytes straight into the frame's own buffer ('startLarge'), not through
-- the pending bytes: that copied them twice.
recvInto :: Maybe Int -> Connection -> (Ptr Word8 -> Int -> IO Int) -> IO (Int, Int)
recvInto cap conn receive = do
  large <- readIORef (connLarge conn)
  case large of
    Just (Large buf capacity len have) -> do
      got <- unsafeWithForeignPtr buf $ \dst -> receive (dst `plusPtr` have) (len - have)
      when (got > 0) $
        if have + got < len
          then writeIORef (connLarge conn) (Just (Large buf capacity len (have + got)))
          else do
            writeIORef (connLarge conn) Nothing
            modifyIORef' (connSpare conn) (\sp -> sp { spareIssued = Just (unsafeForeignPtrToPtr buf, capacity) })
            writeIORef (connComplete conn) (Just (BI.fromForeignPtr buf 0 len))
      pure (got, len - have)
    Nothing -> do
      (buffer, size) <- readIORef (connBuffer conn)
      got <- unsafeWithForeignPtr buffer $ \p -> do
        got <- receive p size
        when (got > 0) $ do
          pending <- readIORef (connPending conn)
          len <- if B.null pending && got >= 4 then fromIntegral <$> peekPtrBE 4 p 0 else pure 0
          if len > size && got - 4 < len && maybe False (len <=) cap
            then startLarge conn len (p `plusPtr` 4) (got - 4)
            else do
              chunk <- B.packCStringLen (castPtr p, got)
              writeIORef (connPending conn) (if B.null pending then chunk else pending <> chunk)
        pure got
      -- the transport had a whole buffer's worth: a busy link reads in
      -- larger chunks from now on
      when (got == size && size < readChunk) $
        mallocForeignPtrBytes readChunk >>= \big -> writeIORef (connBuffer conn) (big, readChunk)
      pure (got, size)

-- A large frame begins: a buffer for its body (the one given back by
-- 'recycleFrame' if it is large enough, else a fresh one of the body's
-- size), holding the bytes of it already read; the rest is read straight
-- there.
startLarge :: Connection -> Int -> Ptr Word8 -> Int -> IO ()
startLarge conn len src have = do
  sp <- readIORef (connSpare conn)
  (buf, capacity) <- case spareFree sp of
    Just (fp, c) | c >= len -> (fp, c) <$ writeIORef (connSpare conn) sp { spareFree = Nothing }
    _ -> (\fp -> (fp, len)) <$> BI.mallocByteString len
  unsafeWithForeignPtr buf $ \dst -> BI.memcpy dst src have
  writeIORef (connPending conn) B.empty
  writeIORef (connLarge conn) (Just (Large buf capacity len have))

-- | Give back a frame this connection's 'recvFrame' returned, promising
-- that nothing refers to its bytes any longer (no slice of it is kept, and
-- nothing decoded from it still points into it): the next large frame may
-- be read into the same memory. That memory is then still in the cache,
-- where a fresh buffer per frame is cold: on a Unix socket the receiver's
-- copy out of the kernel was the bottleneck of a stream of large
-- messages. Only the last large frame handed out is taken back, and only
-- if its buffer is at most 'spareLimit'; giving back anything else does
-- nothing. A large frame is the whole of its buffer, from offset 0; a
-- frame cut from the pending bytes starts after its length prefix, so it
-- is never taken for one. (The master's farm keeps slices of result
-- packets until their tasks are accepted, "Herd.Wire.InPlace": the master
-- must not give those back.)
recycleFrame :: Connection -> B.ByteString -> IO ()
recycleFrame conn frame = do
  sp <- readIORef (connSpare conn)
  let (fp, off, _) = BI.toForeignPtr frame
  case spareIssued sp of
    Just (issued, capacity)
      | off == 0 && issued == unsafeForeignPtrToPtr fp && capacity <= spareLimit ->
          writeIORef (connSpare conn) (Spare Nothing (Just (fp, capacity)))
    _ -> pure ()

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
            when (len > readChunk) $
              -- pending holds only this frame's beginning: move it
              BU.unsafeUseAsCStringLen (B.drop 4 pending) $ \(src, n) -> startLarge conn len (castPtr src) n
            pure Nothing

-- | Run an action, catching what it throws except asynchronous exceptions
-- (a send fails with an 'IOException' on a socket, a 'TransportError' on a
-- shared ring).
trySync :: IO a -> IO (Either SomeException a)
trySync act = do
  r <- try act
  case r of
    Left e | Just (_ :: SomeAsyncException) <- fromException e -> throwIO e
    _ -> pure r
