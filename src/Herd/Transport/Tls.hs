{-# LANGUAGE BangPatterns #-}
{-# LANGUAGE ScopedTypeVariables #-}
-- | TLS on TCP links: TLS 1.3 with AES-128-GCM only.
--
-- Each master makes a fresh Ed25519 key and a self-signed certificate
-- when it starts; workers do not check the certificate against any
-- authority. What makes the link safe is that herd's own mutual proof of
-- the cluster secret ("Herd.Auth") runs inside the TLS session and is
-- bound to that certificate: both proofs cover a hash of the certificate
-- as each side saw it, so a man in the middle who ends the TLS session
-- himself (showing his own certificate) cannot relay the proofs.
--
-- The handshake is the @tls@ package's, over the TCP link's own calls.
-- From its application traffic secrets on, the records are herd's: sealed
-- and opened with OpenSSL's AES-GCM (@cbits/herd_tls.c@) on herd's own
-- buffers, on the thread that sends or reads, a received record opened
-- where it landed and straight into the reader's buffer when it fits.
-- Both master loops and every frame rule work on the link unchanged,
-- with no relay thread and no thread hop per frame (see @herd bench
-- latency --tls@ and @herd bench bandwidth --tls@).
--
-- Promises: a record that does not authenticate ends the link with
-- 'RecordRefused'; sending never blocks the caller while the kernel's
-- buffer is full (it takes nothing, and the link's writer waits).
module Herd.Transport.Tls
  ( TlsIdentity
  , newTlsIdentity
  , tlsAccept
  , tlsConnect
  , TlsRefused (..)
  ) where

import Control.Exception
import Control.Monad (unless, when)
import qualified Crypto.Hash as H
import qualified Crypto.PubKey.Ed25519 as Ed
import qualified Data.ByteArray as BA
import qualified Data.ByteString as B
import Data.ASN1.Types (ASN1StringEncoding (UTF8), asn1CharacterString, getObjectID)
import Data.Default.Class (def)
import Data.Hourglass (Date (..), DateTime (..), Month (..), TimeOfDay (..))
import Data.IORef
import Data.X509
import qualified Data.ByteString.Unsafe as BU
import Data.Word (Word8)
import Foreign.C.Error (Errno (..), errnoToIOError)
import Foreign.C.Types (CInt (..))
import qualified Data.ByteString.Internal as BI
import Foreign.ForeignPtr (ForeignPtr, mallocForeignPtrBytes, newForeignPtr, withForeignPtr)
import Foreign.Marshal.Alloc (alloca)
import Foreign.Marshal.Utils (copyBytes, moveBytes)
import Foreign.Ptr (FunPtr, Ptr, castPtr, nullPtr, plusPtr)
import Foreign.Storable (peek, peekByteOff)
import Herd.Transport
import Herd.Transport.Connection (Connection (..))
import Network.Socket (Socket)
import Network.TLS
import Network.TLS.Extra.Cipher (cipher_TLS13_AES128GCM_SHA256)

foreign import ccall unsafe "herd_writable_now" c_writableNow :: CInt -> IO CInt


-- | Why a link could not be put under TLS.
data TlsRefused
  = MasterShowedNoCertificate  -- ^ the master's side of the handshake carried no certificate
  | NotOverTcp                 -- ^ the connection is not a TCP socket
  | NoTrafficSecret            -- ^ the handshake gave no TLS 1.3 traffic secret to seal records with
  | RecordRefused              -- ^ a record did not authenticate, or was not application data
  deriving (Eq, Show)

instance Exception TlsRefused where
  displayException e = case e of
    MasterShowedNoCertificate -> "the master showed no certificate"
    NotOverTcp -> "TLS needs a TCP connection"
    NoTrafficSecret -> "the TLS handshake gave no traffic secret"
    RecordRefused -> "a TLS record did not authenticate"

-- | A master's key and self-signed certificate, and the hash of the
-- certificate that the secret's proofs cover.
data TlsIdentity = TlsIdentity !Credential !B.ByteString

-- | A fresh Ed25519 key and a certificate for it.
newTlsIdentity :: IO TlsIdentity
newTlsIdentity = do
  secret <- Ed.generateSecretKey
  let public = Ed.toPublic secret
      name = DistinguishedName [(getObjectID DnCommonName, asn1CharacterString UTF8 "herd master")]
      alg = SignatureALG_IntrinsicHash PubKeyALG_Ed25519
      cert = Certificate
        { certVersion = 2, certSerial = 1, certSignatureAlg = alg
        , certIssuerDN = name, certSubjectDN = name
        , certValidity = (at 2020, at 2120)
        , certPubKey = PubKeyEd25519 public, certExtensions = Extensions Nothing }
      at y = DateTime (Date y January 1) (TimeOfDay 0 0 0 0)
      (signed, ()) = objectToSignedExact (\bytes -> (BA.convert (Ed.sign secret public bytes), alg, ())) cert
  pure (TlsIdentity (CertificateChain [signed], PrivKeyEd25519 secret) (certificateHash signed))

certificateHash :: SignedExact Certificate -> B.ByteString
certificateHash = BA.convert . H.hashWith H.SHA256 . encodeSignedObject

-- TLS 1.3 with AES-128-GCM only: the record layer herd runs after the
-- handshake ('sessionConnection') is that one.
strong :: Supported
strong = def { supportedCiphers = [cipher_TLS13_AES128GCM_SHA256], supportedVersions = [TLS13] }

-- The tls package's key log, kept for the record layer.
keyLog :: IORef [String] -> DebugParams
keyLog logged = def { debugKeyLogger = \line -> atomicModifyIORef' logged (\ls -> (line : ls, ())) }

-- | The master's side, on a TCP connection just accepted: the TLS
-- handshake, then the link to use, and the certificate hash to bind the
-- proofs to. The caller bounds the time it takes.
tlsAccept :: TlsIdentity -> Connection -> IO (Connection, B.ByteString)
tlsAccept (TlsIdentity cred binding) conn = do
  _ <- tlsSocket conn
  raw <- newRaw conn
  logged <- newIORef []
  ctx <- contextNew (rawBackend raw) (def { serverShared = def { sharedCredentials = Credentials [cred] }
                                          , serverSupported = strong, serverDebug = keyLog logged } :: ServerParams)
  handshake ctx
  link <- sessionConnection logged False raw conn
  pure (link, binding)

-- | The worker's side, on a TCP connection to the master: the handshake,
-- then the link, and the hash of the certificate the master showed.
tlsConnect :: String -> Connection -> IO (Connection, B.ByteString)
tlsConnect host conn = do
  _ <- tlsSocket conn
  raw <- newRaw conn
  seen <- newIORef B.empty
  let hooks = def { onServerCertificate = \_ _ _ (CertificateChain chain) -> do
                      -- not checked against any authority: the proofs of the
                      -- secret are bound to this certificate instead
                      case chain of
                        c : _ -> writeIORef seen (certificateHash c)
                        [] -> pure ()
                      pure [] }
  logged <- newIORef []
  let params = (defaultParamsClient host B.empty) { clientHooks = hooks, clientSupported = strong
                                                  , clientDebug = keyLog logged }
  ctx <- contextNew (rawBackend raw) params
  handshake ctx
  binding <- readIORef seen
  when (B.null binding) (throwIO MasterShowedNoCertificate)
  link <- sessionConnection logged True raw conn
  pure (link, binding)

-- The TCP socket under a connection.
tlsSocket :: Connection -> IO Socket
tlsSocket conn = maybe (throwIO NotOverTcp) pure (connSocket conn)

-- The TCP link's own calls as the TLS context's backend: sends go out
-- whole (waiting for room when the kernel takes part), receives take the
-- bytes asked for, waiting for them; bytes read past what was asked wait
-- in the link's raw buffer for the next record.
data Raw = Raw
  { rawEp   :: !Endpoint
  , rawIn   :: !(IORef B.ByteString)  -- ^ received, not yet given to the context
  , rawEnd  :: !(IORef Bool)          -- ^ the TCP stream ended
  , rawBuf  :: !(ForeignPtr Word8)    -- ^ where a receive lands
  , rawSentSinceRecv :: !(IORef Int)
    -- ^ records the context sent since it last asked to receive
  }

rawChunk :: Int
rawChunk = 256 * 1024

newRaw :: Connection -> IO Raw
newRaw conn = Raw (connEndpoint conn) <$> newIORef B.empty <*> newIORef False <*> mallocForeignPtrBytes rawChunk
                   <*> newIORef 0

-- Receive what the TCP link has (waiting for it first, or not): the count
-- added to the raw buffer, 0 at the stream's end, -1 for nothing.
rawFill :: Bool -> Raw -> IO Int
rawFill wait raw = do
  k <- withForeignPtr (rawBuf raw) $ \p -> do
    k <- (if wait then epRecvWait else epRecv) (rawEp raw) p rawChunk
    when (k > 0) $ do
      -- one copy: what was left of the last receive, then what came
      buffered <- readIORef (rawIn raw)
      let l = B.length buffered
      joined <- BI.create (l + k) $ \d -> do
        BU.unsafeUseAsCString buffered $ \src -> copyBytes d (castPtr src) l
        copyBytes (d `plusPtr` l) p k
      writeIORef (rawIn raw) joined
    pure k
  when (k == 0) $ writeIORef (rawEnd raw) True
  pure k

-- How many records begin in these bytes (sent whole, as the tls package
-- sends them).
recordsIn :: B.ByteString -> Int
recordsIn = go 0
  where
    go !k b | B.length b < 5 = k
            | otherwise = go (k + 1) (B.drop (5 + fromIntegral (BU.unsafeIndex b 3) * 256 + fromIntegral (BU.unsafeIndex b 4)) b)

rawBackend :: Raw -> Backend
rawBackend raw = Backend
  { backendFlush = pure ()
  , backendClose = epClose (rawEp raw)
  , backendSend = \bytes -> (modifyIORef' (rawSentSinceRecv raw) (+ recordsIn bytes) >>) $ BU.unsafeUseAsCStringLen bytes $ \(p, n) ->
      let go off | off >= n = pure ()
                 | otherwise = do
                     k <- epSend (rawEp raw) (castPtr p `plusPtr` off) (n - off)
                     when (k == 0) $ epWaitOut (rawEp raw)
                     go (off + k)
      in go 0
  , backendRecv = \n -> do
      writeIORef (rawSentSinceRecv raw) 0
      let have = do
            buffered <- readIORef (rawIn raw)
            if B.length buffered >= n then Just <$> take' n buffered else do
              ended <- readIORef (rawEnd raw)
              if ended then Just <$> take' (B.length buffered) buffered else Nothing <$ rawFill True raw
          take' k buffered = do
            let (now, later) = B.splitAt k buffered
            writeIORef (rawIn raw) later
            pure now
          loop = have >>= maybe loop pure
      loop
  }

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

-- The connection over a TLS session inside the link: after the tls
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
  plain <- newIORef B.empty
  sendBuf <- newIORef =<< ((,) <$> mallocForeignPtrBytes (64 * 1024) <*> pure (64 * 1024))
  -- received records are opened where they landed: one buffer, its
  -- unopened bytes between two offsets (what the handshake read past its
  -- end goes first)
  inbox <- mallocForeignPtrBytes inboxBytes
  leftover <- readIORef (rawIn raw)
  withForeignPtr inbox $ \d -> BU.unsafeUseAsCString leftover $ \src -> copyBytes d (castPtr src) (B.length leftover)
  span' <- newIORef (0 :: Int, B.length leftover)
  ended <- newIORef False
  let ep0 = rawEp raw
      -- the length of the whole record at the front, if all of it is there
      wholeRecord = do
        (from, to) <- readIORef span'
        if to - from < 5 then pure Nothing else withForeignPtr inbox $ \d -> do
          hi <- peekByteOff d (from + 3) :: IO Word8
          lo <- peekByteOff d (from + 4) :: IO Word8
          let len = 5 + fromIntegral hi * 256 + fromIntegral lo
          pure (if to - from >= len then Just len else Nothing)
      -- open the record at the front into dst (room for its body): its
      -- content's length and type
      openAt dst len = do
        (from, to) <- readIORef span'
        r <- withForeignPtr inbox $ \d -> withForeignPtr opener $ \a -> alloca $ \ty -> do
          k <- c_aeadOpen a (d `plusPtr` from) (fromIntegral len) dst ty
          t <- peek ty
          pure (fromIntegral k :: Int, fromIntegral t :: Int)
        writeIORef span' (if from + len == to then (0, 0) else (from + len, to))
        when (fst r < 0) $ throwIO RecordRefused
        pure r
      -- receive what the link has after the unopened bytes (moved to the
      -- front first when the room after them is short): the count, 0 at
      -- the end, -1 for nothing
      receive wait = do
        done <- readIORef ended
        if done then pure 0 else do
          (from, to) <- readIORef span'
          (from', to') <- if inboxBytes - to >= maxRecord || from == 0 then pure (from, to) else do
            withForeignPtr inbox $ \d -> moveBytes d (d `plusPtr` from) (to - from)
            pure (0, to - from)
          writeIORef span' (from', to')
          k <- withForeignPtr inbox $ \d -> (if wait then epRecvWait else epRecv) ep0 (d `plusPtr` to') (inboxBytes - to')
          when (k > 0) $ writeIORef span' (from', to' + k)
          when (k == 0) $ writeIORef ended True
          pure k
      -- copy what is there into the caller's buffer, opening records that
      -- have come (waiting for the first only when asked to)
      fill wait p n = go 0
        where
          go off
            | off >= n = pure n
            | otherwise = do
                bytes <- readIORef plain
                if not (B.null bytes) then do
                  let k = min (n - off) (B.length bytes)
                  BU.unsafeUseAsCString bytes $ \src -> copyBytes (p `plusPtr` off) (castPtr src) k
                  writeIORef plain (B.drop k bytes)
                  go (off + k)
                else do
                  whole <- wholeRecord
                  case whole of
                    Just len -> do
                      let body = len - 5
                      -- straight into the caller's buffer when it has room for the body
                      (k, ty) <- if n - off >= body then openAt (p `plusPtr` off) len else do
                        fp <- mallocForeignPtrBytes body
                        (k, ty) <- withForeignPtr fp $ \d -> openAt d len
                        when (ty == 23) $ writeIORef plain (BI.fromForeignPtr fp 0 k)
                        pure (0, ty)
                      case ty of
                        23 -> go (off + k)
                        22 -> go off          -- a post-handshake message (a ticket): nothing for herd
                        21 -> pure off        -- an alert: the session's end
                        _ -> throwIO RecordRefused
                    Nothing -> do
                      got <- receive (wait && off == 0)
                      case got of
                        -1 -> pure (if off > 0 then off else -1)
                        0 -> pure off
                        _ -> go off
      sendAll q total = do
        let loop o | o >= total = pure ()
                   | otherwise = do
                       k <- epSend ep0 (q `plusPtr` o) (total - o)
                       when (k == 0) (epWaitOut ep0)
                       loop (o + k)
        loop 0
      -- seal at most a MiB of data at a time into the send buffer, and send it
      sealAndSend p n
        | n <= 0 = pure ()
        | otherwise = do
            let slice = min n (4 * recordData)
                records = (slice + recordData - 1) `div` recordData
                need = slice + records * recordOverhead
            (buf0, cap) <- readIORef sendBuf
            buf <- if need <= cap then pure buf0 else do
              fresh <- mallocForeignPtrBytes need
              writeIORef sendBuf (fresh, need)
              pure fresh
            withForeignPtr buf $ \out -> withForeignPtr sealer $ \a -> do
              let sealFrom i o
                    | i >= slice = pure o
                    | otherwise = do
                        let k = min recordData (slice - i)
                        w <- c_aeadSeal a (p `plusPtr` i) (fromIntegral k) (out `plusPtr` o)
                        when (w < 0) $ throwIO RecordRefused
                        sealFrom (i + k) (o + fromIntegral w)
              total <- sealFrom 0 0
              sendAll out total
            sealAndSend (p `plusPtr` slice) (n - slice)
      send p n = do
        room <- connFd >>= c_writableNow
        if room < 0 then throwIO (errnoToIOError "poll" (Errno (negate room)) Nothing Nothing)
        else if room == 0 then pure 0 else n <$ sealAndSend p n
      connFd = do
        fds <- epFds ep0
        case fds of
          f : _ -> pure f
          [] -> throwIO NotOverTcp
      ep = ep0
        { epRecv = fill False
        , epRecvWait = fill True
        , epSend = send
        , epWaitOut = epWaitOut ep0
        , epArm = \_ -> do
            a <- readIORef plain
            b <- wholeRecord
            pure (not (B.null a) || b /= Nothing)
        , epClose = epClose ep0
        , epSocket = Nothing
        }
  newConnection ep (connPeer conn ++ " (TLS)")
