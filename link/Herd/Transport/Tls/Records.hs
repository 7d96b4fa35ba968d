{-# LANGUAGE ScopedTypeVariables #-}
-- | TLS 1.3's record layer on herd's own buffers, after the @tls@
-- package's handshake ("Herd.Transport.Tls"): the application traffic
-- secrets from its key log become keys and IVs, and records are sealed
-- and opened with OpenSSL's AES-GCM (@cbits/herd_tls.c@), on the thread
-- that sends or reads, a received record opened where it landed and
-- straight into the reader's buffer when it fits.
--
-- Promises: a record that does not authenticate, or whose header claims
-- more than TLS allows, ends the link with 'RecordRefused'; sending takes
-- nothing while the kernel's buffer is full (the link's writer waits).
module Herd.Transport.Tls.Records
  ( sessionConnection
  ) where

import Control.Exception
import Control.Monad (unless, when)
import qualified Data.ByteString as B
import qualified Data.ByteString.Internal as BI
import qualified Data.ByteString.Unsafe as BU
import Data.IORef
import Data.Word (Word8)
import Foreign.C.Error (Errno (..), errnoToIOError)
import Foreign.C.Types (CInt (..))
import Foreign.ForeignPtr (ForeignPtr, mallocForeignPtrBytes, newForeignPtr, withForeignPtr)
import Foreign.Marshal.Alloc (alloca)
import Foreign.Marshal.Utils (copyBytes, moveBytes)
import Foreign.Ptr (FunPtr, Ptr, castPtr, nullPtr, plusPtr)
import Foreign.Storable (peek, peekByteOff)
import Herd.Transport
import Herd.Transport.Tls.Backend

foreign import ccall unsafe "herd_writable_now" c_writableNow :: CInt -> IO CInt

-- One direction's record state ("cbits/herd_tls.c").
data Aead

foreign import ccall unsafe "herd_aead_new" c_aeadNew :: Ptr Word8 -> CInt -> CInt -> IO (Ptr Aead)
foreign import ccall unsafe "&herd_aead_free" c_aeadFree :: FunPtr (Ptr Aead -> IO ())
foreign import ccall unsafe "herd_aead_seal" c_aeadSeal :: Ptr Aead -> Ptr Word8 -> CInt -> Ptr Word8 -> IO CInt
foreign import ccall unsafe "herd_aead_skip" c_aeadSkip :: Ptr Aead -> CInt -> IO ()
foreign import ccall unsafe "herd_aead_open" c_aeadOpen :: Ptr Aead -> Ptr Word8 -> CInt -> Ptr Word8 -> Ptr CInt -> IO CInt

-- The record state for one direction of the session, from its traffic
-- secret ('True': this side seals with it).
newAead :: B.ByteString -> Bool -> IO (ForeignPtr Aead)
newAead secret sealing = do
  a <- BU.unsafeUseAsCStringLen secret $ \(p, n) -> c_aeadNew (castPtr p) (fromIntegral n) (if sealing then 1 else 0)
  when (a == nullPtr) $ throwIO NoTrafficSecret
  newForeignPtr c_aeadFree a

-- The session's application traffic secrets, as the tls package's key log
-- names them: the client's and the server's.
trafficSecrets :: IORef [String] -> IO (B.ByteString, B.ByteString)
trafficSecrets logged = do
  ls <- readIORef logged
  let find label = case [ hex | l <- ls, [name, _, hex] <- [words l], name == label ] of
        hex : _ | Just bytes <- unhex hex -> pure bytes
        _ -> throwIO NoTrafficSecret
  (,) <$> find "CLIENT_TRAFFIC_SECRET_0" <*> find "SERVER_TRAFFIC_SECRET_0"
  where
    unhex h | odd (length h) = Nothing
            | otherwise = B.pack <$> mapM byte (pairs h)
    pairs (a : b : r) = [a, b] : pairs r
    pairs _ = []
    byte [a, b] = (\x y -> fromIntegral (x * 16 + y)) <$> digit a <*> digit b
    byte _ = Nothing
    digit c | c >= '0' && c <= '9' = Just (fromEnum c - 48)
            | c >= 'a' && c <= 'f' = Just (fromEnum c - 87)
            | c >= 'A' && c <= 'F' = Just (fromEnum c - 55)
            | otherwise = Nothing :: Maybe Int

-- Application data a record carries at most, what sealing adds to it, the
-- largest record a peer may send (RFC 8446: 2^14 + 256 of body), and the
-- receive buffer of a session.
recordData, recordOverhead, maxRecord, inboxBytes :: Int
recordData = 16384
recordOverhead = 5 + 1 + 16
maxRecord = 5 + 16384 + 256
inboxBytes = 64 * 1024

-- | The connection over a TLS session inside the link: after the tls
-- package's handshake, records are sealed and opened here, with
-- OpenSSL's AES-GCM, on herd's own buffers and on the caller's own thread
-- (no relay thread, no second socket). A send that finds the kernel's
-- buffer full takes nothing (the link's writer thread waits for room), so
-- the master's shell is never held by a worker that stopped reading.
sessionConnection :: IORef [String] -> Bool -> Raw -> Connection -> IO Connection
sessionConnection logged isClient raw conn = do
  (clientSecret, serverSecret) <- trafficSecrets logged
  sealer <- newAead (if isClient then clientSecret else serverSecret) True
  -- the server's tls context sealed its tickets with the same key, after
  -- the client's Finished (the last thing it read): our records follow them
  unless isClient $ readIORef (rawSentSinceRecv raw) >>= \k -> withForeignPtr sealer (\a -> c_aeadSkip a (fromIntegral k))
  opener <- newAead (if isClient then serverSecret else clientSecret) False
  -- received records are opened where they landed: one buffer, its
  -- unopened bytes between two offsets (what the handshake read past its
  -- end goes first); room for all the handshake read past its end (a
  -- receive of up to a raw chunk), and a whole record after it
  leftover <- readIORef (rawIn raw)
  let inboxSize = max inboxBytes (B.length leftover + maxRecord)
  inbox <- mallocForeignPtrBytes inboxSize
  withForeignPtr inbox $ \d -> BU.unsafeUseAsCString leftover $ \src -> copyBytes d (castPtr src) (B.length leftover)
  ss <- Session (rawEp raw) sealer opener inbox inboxSize
          <$> newIORef B.empty
          <*> (newIORef =<< ((,) <$> mallocForeignPtrBytes (64 * 1024) <*> pure (64 * 1024)))
          <*> newIORef (0, B.length leftover) <*> newIORef False
  let ep0 = rawEp raw
      ep = ep0
        { epRecv = fillPlain ss False
        , epRecvWait = fillPlain ss True
        , epSend = sendSealed ss
        , epWaitOut = epWaitOut ep0
        , epArm = \_ -> do
            a <- readIORef (sPlain ss)
            b <- wholeRecord ss
            pure (not (B.null a) || b /= Nothing)
        , epClose = epClose ep0
        , epSocket = Nothing
        }
  newConnection ep (connPeer conn ++ " (TLS)")

-- One TLS session's record layer after the handshake.
data Session = Session
  { sEp        :: !Endpoint                          -- ^ the raw link under the records
  , sSealer    :: !(ForeignPtr Aead)
  , sOpener    :: !(ForeignPtr Aead)
  , sInbox     :: !(ForeignPtr Word8)                -- ^ received bytes, records opened in place
  , sInboxSize :: !Int
  , sPlain     :: !(IORef B.ByteString)              -- ^ opened data the caller has not taken yet
  , sSendBuf   :: !(IORef (ForeignPtr Word8, Int))   -- ^ where records are sealed before they are sent
  , sSpan      :: !(IORef (Int, Int))                -- ^ the inbox's unopened bytes
  , sEnded     :: !(IORef Bool)                      -- ^ the link ended
  }

-- The length of the whole record at the front, if all of it is there.
wholeRecord :: Session -> IO (Maybe Int)
wholeRecord ss = do
  (from, to) <- readIORef (sSpan ss)
  if to - from < 5 then pure Nothing else withForeignPtr (sInbox ss) $ \d -> do
    hi <- peekByteOff d (from + 3) :: IO Word8
    lo <- peekByteOff d (from + 4) :: IO Word8
    let len = 5 + fromIntegral hi * 256 + fromIntegral lo
    -- a header claiming more than TLS allows would never fit: refused
    when (len > maxRecord) $ throwIO RecordRefused
    pure (if to - from >= len then Just len else Nothing)

-- Open the record at the front into dst (room for its body): its
-- content's length and type.
openAt :: Session -> Ptr Word8 -> Int -> IO (Int, Int)
openAt ss dst len = do
  (from, to) <- readIORef (sSpan ss)
  r <- withForeignPtr (sInbox ss) $ \d -> withForeignPtr (sOpener ss) $ \a -> alloca $ \ty -> do
    k <- c_aeadOpen a (d `plusPtr` from) (fromIntegral len) dst ty
    t <- peek ty
    pure (fromIntegral k :: Int, fromIntegral t :: Int)
  writeIORef (sSpan ss) (if from + len == to then (0, 0) else (from + len, to))
  when (fst r < 0) $ throwIO RecordRefused
  pure r

-- Receive what the link has after the unopened bytes (moved to the front
-- first when the room after them is short): the count, 0 at the end, -1
-- for nothing.
receiveMore :: Session -> Bool -> IO Int
receiveMore ss wait = do
  done <- readIORef (sEnded ss)
  if done then pure 0 else do
    (from, to) <- readIORef (sSpan ss)
    (from', to') <- if sInboxSize ss - to >= maxRecord || from == 0 then pure (from, to) else do
      withForeignPtr (sInbox ss) $ \d -> moveBytes d (d `plusPtr` from) (to - from)
      pure (0, to - from)
    writeIORef (sSpan ss) (from', to')
    k <- withForeignPtr (sInbox ss) $ \d ->
      (if wait then epRecvWait else epRecv) (sEp ss) (d `plusPtr` to') (sInboxSize ss - to')
    when (k > 0) $ writeIORef (sSpan ss) (from', to' + k)
    when (k == 0) $ writeIORef (sEnded ss) True
    pure k

-- Copy what is there into the caller's buffer, opening records that have
-- come (waiting for the first only when asked to).
fillPlain :: Session -> Bool -> Ptr Word8 -> Int -> IO Int
fillPlain ss wait p n = go 0
  where
    go off
      | off >= n = pure n
      | otherwise = do
          bytes <- readIORef (sPlain ss)
          if not (B.null bytes) then do
            let k = min (n - off) (B.length bytes)
            BU.unsafeUseAsCString bytes $ \src -> copyBytes (p `plusPtr` off) (castPtr src) k
            writeIORef (sPlain ss) (B.drop k bytes)
            go (off + k)
          else wholeRecord ss >>= maybe (more off) (openNext off)
    openNext off len = do
      let body = len - 5
      -- straight into the caller's buffer when it has room for the body
      (k, ty) <- if n - off >= body then openAt ss (p `plusPtr` off) len else do
        fp <- mallocForeignPtrBytes body
        (k, ty) <- withForeignPtr fp $ \d -> openAt ss d len
        when (ty == 23) $ writeIORef (sPlain ss) (BI.fromForeignPtr fp 0 k)
        pure (0, ty)
      case ty of
        23 -> go (off + k)
        22 -> go off          -- a post-handshake message (a ticket): nothing for herd
        21 -> pure off        -- an alert: the session's end
        _ -> throwIO RecordRefused
    more off = do
      got <- receiveMore ss (wait && off == 0)
      case got of
        -1 -> pure (if off > 0 then off else -1)
        0 -> pure off
        _ -> go off

-- Send these bytes, seal and all, if the socket has room now (else 0).
sendSealed :: Session -> Ptr Word8 -> Int -> IO Int
sendSealed ss p n = do
  fds <- epFds (sEp ss)
  fd <- case fds of
    f : _ -> pure f
    [] -> throwIO NotOverTcp
  room <- c_writableNow fd
  if room < 0 then throwIO (errnoToIOError "poll" (Errno (negate room)) Nothing Nothing)
  else if room == 0 then pure 0 else n <$ sealAndSend ss p n

-- Seal at most a MiB of data at a time into the send buffer, and send it.
sealAndSend :: Session -> Ptr Word8 -> Int -> IO ()
sealAndSend ss p n
  | n <= 0 = pure ()
  | otherwise = do
      let slice = min n (4 * recordData)
          records = (slice + recordData - 1) `div` recordData
          need = slice + records * recordOverhead
      (buf0, cap) <- readIORef (sSendBuf ss)
      buf <- if need <= cap then pure buf0 else do
        fresh <- mallocForeignPtrBytes need
        writeIORef (sSendBuf ss) (fresh, need)
        pure fresh
      withForeignPtr buf $ \out -> withForeignPtr (sSealer ss) $ \a -> do
        let sealFrom i o
              | i >= slice = pure o
              | otherwise = do
                  let k = min recordData (slice - i)
                  w <- c_aeadSeal a (p `plusPtr` i) (fromIntegral k) (out `plusPtr` o)
                  when (w < 0) $ throwIO RecordRefused
                  sealFrom (i + k) (o + fromIntegral w)
        total <- sealFrom 0 0
        sendAllBytes (sEp ss) out total
      sealAndSend ss (p `plusPtr` slice) (n - slice)

-- Send all these bytes on the raw link, waiting for room as needed.
sendAllBytes :: Endpoint -> Ptr Word8 -> Int -> IO ()
sendAllBytes ep q total = loop 0
  where
    loop o | o >= total = pure ()
           | otherwise = do
               k <- epSend ep (q `plusPtr` o) (total - o)
               when (k == 0) (epWaitOut ep)
               loop (o + k)
