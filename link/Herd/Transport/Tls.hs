{-# LANGUAGE ScopedTypeVariables #-}
-- | TLS on TCP links: TLS 1.3 with AES-128-GCM only.
--
-- Each master makes a fresh Ed25519 key and a self-signed certificate
-- when it starts; workers do not check the certificate against any
-- authority. What makes the link safe is that herd's own mutual proof of
-- the cluster secret ("Herd.Transport.Auth") runs inside the TLS session and is
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
import Control.Monad (when)
import qualified Crypto.Hash as H
import qualified Crypto.PubKey.Ed25519 as Ed
import qualified Data.ByteArray as BA
import qualified Data.ByteString as B
import Data.ASN1.Types (ASN1StringEncoding (UTF8), asn1CharacterString, getObjectID)
import Data.Default.Class (def)
import Data.Hourglass (Date (..), DateTime (..), Month (..), TimeOfDay (..))
import Data.IORef
import Data.X509
import Herd.Transport
import Network.Socket (Socket)
import Network.TLS
import Network.TLS.Extra.Cipher (cipher_TLS13_AES128GCM_SHA256)
import Herd.Transport.Tls.Backend
import Herd.Transport.Tls.Records

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
