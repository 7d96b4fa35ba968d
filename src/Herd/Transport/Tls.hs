{-# LANGUAGE ScopedTypeVariables #-}
-- | TLS on TCP links (the @tls@ package, TLS 1.3 or 1.2 with strong
-- ciphers only).
--
-- Each master makes a fresh Ed25519 key and a self-signed certificate
-- when it starts; workers do not check the certificate against any
-- authority. What makes the link safe is that herd's own mutual proof of
-- the cluster secret ("Herd.Auth") runs inside the TLS session and is
-- bound to that certificate: both proofs cover a hash of the certificate
-- as each side saw it, so a man in the middle who ends the TLS session
-- himself (showing his own certificate) cannot relay the proofs.
--
-- The TLS session lives inside the link: the connection's endpoint seals
-- what herd sends into records and opens the records that come, on the
-- caller's thread, over the TCP link's own send and receive calls. Both
-- master loops and every frame rule work on it unchanged, with no relay
-- thread and no thread hop per frame (see @herd bench latency --tls@).
module Herd.Transport.Tls
  ( TlsIdentity
  , newTlsIdentity
  , tlsAccept
  , tlsConnect
  , TlsRefused (..)
  ) where

import Control.Exception
import Control.Monad (void, when)
import qualified Crypto.Hash as H
import qualified Crypto.PubKey.Ed25519 as Ed
import qualified Data.ByteArray as BA
import qualified Data.ByteString as B
import qualified Data.ByteString.Lazy as BL
import Data.ASN1.Types (ASN1StringEncoding (UTF8), asn1CharacterString, getObjectID)
import Data.Default.Class (def)
import Data.Hourglass (Date (..), DateTime (..), Month (..), TimeOfDay (..))
import Data.IORef
import Data.X509
import qualified Data.ByteString.Unsafe as BU
import Data.Word (Word8)
import Foreign.C.Error (Errno (..), errnoToIOError)
import Foreign.C.Types (CInt (..))
import Foreign.ForeignPtr (ForeignPtr, mallocForeignPtrBytes, withForeignPtr)
import Foreign.Marshal.Utils (copyBytes)
import Foreign.Ptr (castPtr, plusPtr)
import Herd.Transport
import Herd.Transport.Connection (Connection (..))
import Network.Socket (Socket)
import Network.TLS
import Network.TLS.Extra.Cipher (ciphersuite_strong)

foreign import ccall unsafe "herd_writable_now" c_writableNow :: CInt -> IO CInt


-- | Why a link could not be put under TLS.
data TlsRefused
  = MasterShowedNoCertificate  -- ^ the master's side of the handshake carried no certificate
  | NotOverTcp                 -- ^ the connection is not a TCP socket
  deriving (Eq, Show)

instance Exception TlsRefused where
  displayException e = case e of
    MasterShowedNoCertificate -> "the master showed no certificate"
    NotOverTcp -> "TLS needs a TCP connection"

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

strong :: Supported
strong = def { supportedCiphers = ciphersuite_strong, supportedVersions = [TLS13, TLS12] }

-- | The master's side, on a TCP connection just accepted: the TLS
-- handshake, then the link to use, and the certificate hash to bind the
-- proofs to. The caller bounds the time it takes.
tlsAccept :: TlsIdentity -> Connection -> IO (Connection, B.ByteString)
tlsAccept (TlsIdentity cred binding) conn = do
  _ <- tlsSocket conn
  raw <- newRaw conn
  ctx <- contextNew (rawBackend raw) (def { serverShared = def { sharedCredentials = Credentials [cred] }
                                          , serverSupported = strong } :: ServerParams)
  handshake ctx
  link <- sessionConnection ctx raw conn
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
      params = (defaultParamsClient host B.empty) { clientHooks = hooks, clientSupported = strong }
  ctx <- contextNew (rawBackend raw) params
  handshake ctx
  binding <- readIORef seen
  when (B.null binding) (throwIO MasterShowedNoCertificate)
  link <- sessionConnection ctx raw conn
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
  }

rawChunk :: Int
rawChunk = 256 * 1024

newRaw :: Connection -> IO Raw
newRaw conn = Raw (connEndpoint conn) <$> newIORef B.empty <*> newIORef False <*> mallocForeignPtrBytes rawChunk

-- Receive what the TCP link has (waiting for it first, or not): the count
-- added to the raw buffer, 0 at the stream's end, -1 for nothing.
rawFill :: Bool -> Raw -> IO Int
rawFill wait raw = do
  k <- withForeignPtr (rawBuf raw) $ \p -> do
    k <- (if wait then epRecvWait else epRecv) (rawEp raw) p rawChunk
    when (k > 0) $ do
      got <- B.packCStringLen (castPtr p, k)
      modifyIORef' (rawIn raw) (<> got)
    pure k
  when (k == 0) $ writeIORef (rawEnd raw) True
  pure k

rawBackend :: Raw -> Backend
rawBackend raw = Backend
  { backendFlush = pure ()
  , backendClose = epClose (rawEp raw)
  , backendSend = \bytes -> BU.unsafeUseAsCStringLen bytes $ \(p, n) ->
      let go off | off >= n = pure ()
                 | otherwise = do
                     k <- epSend (rawEp raw) (castPtr p `plusPtr` off) (n - off)
                     when (k == 0) $ epWaitOut (rawEp raw)
                     go (off + k)
      in go 0
  , backendRecv = \n -> do
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

-- The connection over a TLS session inside the link: records are sealed
-- and opened on the caller's own thread, over the TCP link's own calls;
-- no relay thread, no second socket. A send that finds the kernel's
-- buffer full takes nothing (the link's writer thread waits for room), so
-- the master's shell is never held by a worker that stopped reading.
sessionConnection :: Context -> Raw -> Connection -> IO Connection
sessionConnection ctx raw conn = do
  plain <- newIORef B.empty
  let ep0 = rawEp raw
      fd = connFd conn
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
                  buffered <- not . B.null <$> readIORef (rawIn raw)
                  ready <- if buffered then pure 1 else rawFill (wait && off == 0) raw
                  case ready of
                    -1 -> pure (if off > 0 then off else -1)
                    0 -> pure off
                    _ -> do
                      opened <- openRecord
                      case opened of
                        Nothing -> pure off
                        Just d -> writeIORef plain d >> go off
      -- the next record's data ('Nothing' at the session's end)
      openRecord = do
        r <- try (recvData ctx)
        case r of
          Right d | B.null d -> pure Nothing
                  | otherwise -> pure (Just d)
          Left (e :: SomeException)
            | Just (_ :: SomeAsyncException) <- fromException e -> throwIO e
            | otherwise -> do
                ended <- readIORef (rawEnd raw)
                if ended then pure Nothing else throwIO e
      send p n = do
        room <- fd >>= c_writableNow
        if room < 0 then throwIO (errnoToIOError "poll" (Errno (negate room)) Nothing Nothing)
        else if room == 0 then pure 0 else do
          bytes <- B.packCStringLen (castPtr p, n)
          sendData ctx (BL.fromStrict bytes)
          pure n
      ep = ep0
        { epRecv = fill False
        , epRecvWait = fill True
        , epSend = send
        , epArm = \_ -> (\a b -> not (B.null a) || not (B.null b)) <$> readIORef plain <*> readIORef (rawIn raw)
        , epClose = void (try (bye ctx) :: IO (Either SomeException ())) >> epClose ep0
        , epSocket = Nothing
        }
  newConnection ep (connPeer conn ++ " (TLS)")
  where
    connFd c = do
      fds <- epFds (connEndpoint c)
      case fds of
        f : _ -> pure f
        [] -> throwIO NotOverTcp
