{-# LANGUAGE ScopedTypeVariables #-}
-- | Authentication: a shared secret, and the mutual HMAC-SHA256
-- challenge-response every connection must pass before anything else it
-- sends is looked at.
--
-- The exchange, on a fresh connection (each frame at most
-- 'handshakeFrameLimit' bytes, decoded by hand):
--
-- 1. master → worker: a fresh 32-byte nonce @Nm@ ('Challenge');
-- 2. worker → master: its own fresh nonce @Nw@ and
--    @HMAC(secret, "herd-worker" <> Nm <> Nw)@ ('encodeAuthResponse');
-- 3. master → worker: @HMAC(secret, "herd-master" <> Nw <> Nm)@
--    ('AuthAccepted'), or a refusal.
--
-- Each side proves the secret over a nonce the other chose, so a recorded
-- exchange cannot be replayed, and the two proofs carry different labels,
-- so one side's proof can never be reflected back as the other's. Proofs
-- are compared in constant time. The secret itself never crosses the
-- connection.
--
-- Where the secret comes from ('SecretSource'): by default the environment
-- variable @HERD_SECRET@ if it is set, otherwise the file @~/.herd/cookie@,
-- which is created with 32 random bytes and mode 0600 on first use. A
-- secret file that others can read, or that another user owns, is refused.
module Herd.Transport.Auth
  ( -- * Secrets
    Secret
  , mkSecret
  , SecretSource (..)
  , loadSecret
  , secretEnvVar
  , defaultCookiePath
  , secretToLine
  , secretBytes
  , secretFromLine
    -- * Proofs (pure)
  , Nonce
  , nonceLength
  , NonceSource
  , newNonceSource
  , newNonce
  , workerProof
  , masterProof
  , proofMatches
    -- * The exchange over a connection
  , AuthFailure (..)
  , authenticateWorker
  , authenticateToMaster
  ) where

import Control.Exception
import Control.Monad (unless, when)
import Crypto.Hash.Algorithms (SHA256)
import Crypto.MAC.HMAC (HMAC, hmac)
import Control.Concurrent.MVar (MVar, modifyMVar, newMVar)
import Crypto.Random (ChaChaDRG, drgNew, getRandomBytes, randomBytesGenerate)

import Data.Bits ((.&.))
import qualified Data.ByteArray as BA
import qualified Data.ByteString as B
import qualified Data.ByteString.Char8 as BC
import qualified Data.ByteString.Lazy as BL
import Data.Char (isSpace)
import qualified Data.Text as T
import Herd.Sys.Secret (Secret (..), SecretSource (..))
import Herd.Transport
import Herd.Core.Wire
import Herd.Sys.BuildId (hexEncode)
import Numeric (showOct)
import System.Directory (createDirectoryIfMissing, doesFileExist, getHomeDirectory, removeFile)
import System.Environment (lookupEnv)
import System.FilePath (takeDirectory, (</>))
import System.Posix.Files
import System.Posix.User (getEffectiveUserID)

-- | The environment variable 'SecretAuto' reads first.
secretEnvVar :: String
secretEnvVar = "HERD_SECRET"

minimumSecretBytes :: Int
minimumSecretBytes = 16

-- | Make a secret from bytes, surrounding white space removed; at least 16
-- bytes must remain.
mkSecret :: B.ByteString -> Either String Secret
mkSecret raw
  | B.length s < minimumSecretBytes =
      Left ("a secret must be at least " ++ show minimumSecretBytes ++ " bytes, got "
            ++ show (B.length s))
  | otherwise = Right (Secret s)
  where s = BC.dropWhileEnd isSpace (BC.dropWhile isSpace raw)

-- | @~/.herd/cookie@.
defaultCookiePath :: IO FilePath
defaultCookiePath = (</> ".herd" </> "cookie") <$> getHomeDirectory

-- | Load a secret, creating the default cookie file if it is missing. The
-- 'Left' names the source and what is wrong with it.
loadSecret :: SecretSource -> IO (Either String Secret)
loadSecret source = case source of
  SecretValue v -> pure (either (Left . ("the configured secret: " ++)) Right (mkSecret v))
  SecretFile path -> readSecretFile path
  SecretGiven s -> pure (Right s)
  SecretAuto -> do
    fromEnv <- lookupEnv secretEnvVar
    case fromEnv of
      Just v | not (null v) ->
        pure (either (Left . ((secretEnvVar ++ ": ") ++)) Right (mkSecret (BC.pack v)))
      _ -> do
        path <- defaultCookiePath
        exists <- doesFileExist path
        unless exists (createCookie path)
        readSecretFile path

-- Refuse a file others could read or that someone else owns: whoever can
-- read the secret can join the run and receive its tasks.
readSecretFile :: FilePath -> IO (Either String Secret)
readSecretFile path = do
  r <- try $ do
    st <- getFileStatus path
    me <- getEffectiveUserID
    let mode = fileMode st .&. 0o777
    if fileOwner st /= me
      then pure (Left ("is owned by user " ++ show (fileOwner st) ++ ", not by this user"))
      else if mode .&. 0o077 /= 0
        then pure (Left ("is readable or writable by others (mode " ++ showOctal mode
                         ++ "); run: chmod 600 " ++ path))
        else either (Left . ("holds no usable secret: " ++)) Right . mkSecret <$> B.readFile path
  pure $ case r of
    Left (e :: IOException) -> Left ("secret file " ++ path ++ ": " ++ displayException e)
    Right (Left why) -> Left ("secret file " ++ path ++ " " ++ why)
    Right (Right s) -> Right s
  where
    showOctal m = '0' : showOct m ""

-- Write 32 random bytes, hex-encoded, to a new file of mode 0600. The file
-- is written under a temporary name and linked into place, so a process
-- racing to create the same cookie reads either nothing (and creates its
-- own, then loses the link and reads the winner's) or the whole secret.
createCookie :: FilePath -> IO ()
createCookie path = do
  createDirectoryIfMissing True (takeDirectory path)
  setFileMode (takeDirectory path) 0o700 `catch` \(_ :: IOException) -> pure ()
  bytes <- getRandomBytes 32 :: IO B.ByteString
  let tmp = path ++ ".tmp" ++ hexEncode (B.take 4 bytes)
  B.writeFile tmp B.empty
  setFileMode tmp 0o600
  B.writeFile tmp (BC.pack (hexEncode bytes ++ "\n"))
  r <- try (createLink tmp path)
  removeFile tmp
  case r of
    Left (_ :: IOException) -> pure ()  -- another process created it first
    Right () -> pure ()

-- | The secret's bytes, as a secret file holds them (for a file of mode
-- 600 that a batch job's agent reads: "Herd.Master.Launch.Adapt").
secretBytes :: Secret -> B.ByteString
secretBytes (Secret s) = s

-- | The secret as one line of hex, for handing to a worker through a pipe.
secretToLine :: Secret -> String
secretToLine (Secret s) = hexEncode s

-- | Read a secret written by 'secretToLine'.
secretFromLine :: String -> Either String Secret
secretFromLine line = do
  let hex = filter (not . isSpace) line
  when (odd (length hex)) $ Left "the secret line has an odd number of hex digits"
  bytes <- mapM pair (chunks hex)
  mkSecret (B.pack bytes)
  where
    chunks (a : b : rest) = [a, b] : chunks rest
    chunks _ = []
    pair [a, b] = (\x y -> fromIntegral (x * 16 + y)) <$> digit a <*> digit b
    pair _ = Left "the secret line is not hex"
    digit c = case lookup c (zip "0123456789abcdef" [0 :: Int ..] ++ zip "ABCDEF" [10 ..]) of
      Just d -> Right d
      Nothing -> Left ("the secret line has a character that is not hex: " ++ show c)

-- | A random value used once per connection.
type Nonce = B.ByteString

-- | Bytes in a nonce.
nonceLength :: Int
nonceLength = 32

-- | Where an accepting side's nonces come from: a ChaCha generator
-- seeded once from the system's entropy, not the system per connection.
-- cryptonite reads entropy by opening and closing @/dev/random@ each time:
-- a file per handshake (a flood of connections means a flood of opens),
-- and a close that failed once under the kill tests (an error from GHC's
-- IO manager on that close refused a worker's handshake). A master keeps
-- one per cluster, an agent one for its host.
newtype NonceSource = NonceSource (MVar ChaChaDRG)

-- | A fresh source, seeded from the system's entropy.
newNonceSource :: IO NonceSource
newNonceSource = NonceSource <$> (drgNew >>= newMVar)

-- | A fresh nonce.
newNonce :: NonceSource -> IO Nonce
newNonce (NonceSource source) = modifyMVar source $ \g -> let (bytes, g') = randomBytesGenerate nonceLength g in pure (g', bytes)

mac :: Secret -> B.ByteString -> B.ByteString
mac (Secret key) msg = BA.convert (hmac key msg :: HMAC SHA256)

-- | The worker's proof: over the channel's binding (empty without TLS),
-- the master's nonce, then its own.
workerProof :: Secret -> B.ByteString -> Nonce -> Nonce -> B.ByteString
workerProof s binding masterNonce workerNonce = mac s (BC.pack "herd-worker" <> binding <> masterNonce <> workerNonce)

-- | The master's proof: over the binding, the worker's nonce, then its own.
masterProof :: Secret -> B.ByteString -> Nonce -> Nonce -> B.ByteString
masterProof s binding masterNonce workerNonce = mac s (BC.pack "herd-master" <> binding <> workerNonce <> masterNonce)

-- | Compare a received proof with the expected one in constant time.
proofMatches :: B.ByteString -> B.ByteString -> Bool
proofMatches expected got = B.length expected == B.length got && BA.constEq expected got

-- | Why an exchange failed.
data AuthFailure
  = WrongSecret String     -- ^ the peer could not prove the secret
  | AuthProtocol String    -- ^ the peer broke the exchange (bad frame, closed, refused)
  deriving (Eq, Show)

-- | The master's side of the exchange on a new connection, bound to the
-- channel (the hash of the master's TLS certificate; empty on a plain
-- link). On 'WrongSecret' the peer has been sent a refusal; the caller
-- closes the connection either way. The caller bounds the time it takes.
authenticateWorker :: NonceSource -> Secret -> B.ByteString -> Connection -> IO (Either AuthFailure ())
authenticateWorker nonces secret binding conn = do
  nm <- newNonce nonces
  sendFrame conn (BL.fromStrict (encodeMasterReply (Challenge nm)))
  reply <- recvFrame handshakeFrameLimit conn
  case fmap decodeAuthResponse reply of
    Nothing -> pure (Left (AuthProtocol "closed the connection before answering the challenge"))
    Just (Left why) -> pure (Left (AuthProtocol why))
    Just (Right (nw, proof))
      | proofMatches (workerProof secret binding nm nw) proof -> do
          sendFrame conn (BL.fromStrict (encodeMasterReply (AuthAccepted (masterProof secret binding nm nw))))
          pure (Right ())
      | otherwise -> do
          _ <- try (sendFrame conn (BL.fromStrict (encodeMasterReply
                 (Refused (T.pack "this worker's secret differs from the master's")))))
                 :: IO (Either SomeException ())
          pure (Left (WrongSecret "its proof does not match the master's secret (wrong or missing secret)"))

-- | The worker's side of the exchange, right after connecting, bound to
-- the channel as the worker saw it (the hash of the certificate the master
-- showed; empty on a plain link).
authenticateToMaster :: Secret -> B.ByteString -> Connection -> IO (Either AuthFailure ())
authenticateToMaster secret binding conn = do
  challenge <- recvFrame handshakeFrameLimit conn
  case fmap decodeMasterReply challenge of
    Nothing -> pure (Left (AuthProtocol "the master closed the connection before its challenge"))
    Just (Left why) -> pure (Left (AuthProtocol why))
    Just (Right (Refused why)) -> pure (Left (AuthProtocol ("refused: " ++ T.unpack why)))
    Just (Right (Challenge nm)) -> do
      nw <- newNonceSource >>= newNonce   -- once per join: one read of entropy
      sendFrame conn (BL.fromStrict (encodeAuthResponse nw (workerProof secret binding nm nw)))
      answer <- recvFrame handshakeFrameLimit conn
      pure $ case fmap decodeMasterReply answer of
        Nothing -> Left (AuthProtocol "the master closed the connection during authentication")
        Just (Left why) -> Left (AuthProtocol why)
        Just (Right (Refused why)) -> Left (WrongSecret (T.unpack why))
        Just (Right (AuthAccepted proof))
          | proofMatches (masterProof secret binding nm nw) proof -> Right ()
          | otherwise -> Left (WrongSecret "the master could not prove the secret (wrong secret, or not our master)")
        Just (Right other) -> Left (AuthProtocol ("unexpected " ++ replyName other ++ " during authentication"))
    Just (Right other) -> pure (Left (AuthProtocol ("expected a challenge, got " ++ replyName other)))
  where
    replyName r = case r of
      Welcome {} -> "a welcome"
      Refused {} -> "a refusal"
      Challenge {} -> "a challenge"
      AuthAccepted {} -> "an acceptance"
