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
-- A TLS session is seen by the rest of herd as an ordinary connection
-- over one end of a local socket pair; two threads carry bytes between
-- the other end and the TLS context. Both master loops and every frame
-- rule therefore work on it unchanged, at the cost of one more copy and
-- a thread hop each way (see @herd bench latency --tls@).
module Herd.Transport.Tls
  ( TlsIdentity
  , newTlsIdentity
  , tlsAccept
  , tlsConnect
  , TlsRefused (..)
  ) where

import Control.Concurrent (forkIO)
import Control.Exception
import Control.Monad (unless, void, when)
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
import Herd.Transport
import Herd.Transport.Socket (socketConnectionSpinning)
import Herd.Transport.Tcp (tcpLiveness)
import Network.Socket
import qualified Network.Socket.ByteString as NSB
import Network.TLS
import Network.TLS.Extra.Cipher (ciphersuite_strong)


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
  sock <- tlsSocket conn
  ctx <- contextNew sock (def { serverShared = def { sharedCredentials = Credentials [cred] }
                              , serverSupported = strong } :: ServerParams)
  handshake ctx
  link <- proxied ctx sock (connPeer conn ++ " (TLS)")
  pure (link, binding)

-- | The worker's side, on a TCP connection to the master: the handshake,
-- then the link, and the hash of the certificate the master showed.
tlsConnect :: String -> Connection -> IO (Connection, B.ByteString)
tlsConnect host conn = do
  sock <- tlsSocket conn
  seen <- newIORef B.empty
  let hooks = def { onServerCertificate = \_ _ _ (CertificateChain chain) -> do
                      -- not checked against any authority: the proofs of the
                      -- secret are bound to this certificate instead
                      case chain of
                        c : _ -> writeIORef seen (certificateHash c)
                        [] -> pure ()
                      pure [] }
      params = (defaultParamsClient host B.empty) { clientHooks = hooks, clientSupported = strong }
  ctx <- contextNew sock params
  handshake ctx
  binding <- readIORef seen
  when (B.null binding) (throwIO MasterShowedNoCertificate)
  link <- proxied ctx sock (connPeer conn ++ " (TLS)")
  pure (link, binding)

-- The TCP socket under a connection, made non-blocking again: herd's own
-- connections read in blocking calls, but the tls package reads through
-- the network library, whose reads wait in GHC's IO manager, and a read
-- that blocked in the kernel would stop every thread of the runtime.
tlsSocket :: Connection -> IO Socket
tlsSocket conn = do
  sock <- maybe (throwIO NotOverTcp) pure (connSocket conn)
  withFdSocket sock setNonBlockIfNeeded
  pure sock

-- A connection over one end of a socket pair, the other end carried to
-- and from the TLS context by two threads. Closing the connection ends
-- the session; the session's end (or the TCP link's) ends the connection.
proxied :: Context -> Socket -> String -> IO Connection
proxied ctx tcp name = do
  (mine, theirs) <- socketPair AF_UNIX Stream defaultProtocol
  let quietly act = void (try act :: IO (Either SomeException ()))
  -- from the network to herd
  void $ forkIO $ do
    let loop = do
          bytes <- recvData ctx
          unless (B.null bytes) (NSB.sendAll theirs bytes >> loop)
    quietly loop
    quietly (shutdown theirs ShutdownSend)
  -- from herd to the network
  void $ forkIO $ do
    let loop = do
          bytes <- NSB.recv theirs (256 * 1024)
          unless (B.null bytes) (sendData ctx (BL.fromStrict bytes) >> loop)
    quietly loop
    quietly (bye ctx)
    quietly (close tcp)
    quietly (close theirs)
  -- the bytes come from a thread of this runtime: a reader that spun
  -- would hold the runtime that thread needs (see 'socketConnectionSpinning')
  socketConnectionSpinning 0 TcpTransport (\secs _ -> tcpLiveness secs tcp) mine name
