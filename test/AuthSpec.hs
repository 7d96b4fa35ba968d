-- | The secret and the challenge-response proofs: pure properties, and the
-- rules for secret files.
module AuthSpec (spec) where

import qualified Data.ByteString as B
import qualified Data.ByteString.Char8 as BC
import Data.Either (isLeft)
import Data.Word (Word8)
import Herd.Transport.Auth
import Herd.Transport (TransportKind (..), recvFrame, sendFrame)
import Herd.Core.Wire.Handshake (MasterReply (..), decodeAuthResponse, encodeMasterReply, handshakeFrameLimit)
import ConformanceSpec (withPair)
import Control.Concurrent.Async (concurrently)
import qualified Data.ByteString.Lazy as BL
import Control.Exception (bracket_)
import System.Directory (getTemporaryDirectory, removeDirectoryRecursive, createDirectoryIfMissing)
import System.Environment (setEnv, unsetEnv, lookupEnv)
import System.FilePath ((</>))
import System.Posix.Files (fileMode, getFileStatus, setFileMode)
import System.Posix.Process (getProcessID)
import Data.Bits ((.&.))
import Test.Hspec
import Test.QuickCheck hiding ((.&.))

secretOf :: [Word8] -> Secret
secretOf ws = either error id (mkSecret (B.pack (map (\w -> 0x41 + w `mod` 26) (ws ++ replicate 16 0))))

nonce :: [Word8] -> B.ByteString
nonce ws = B.pack (take 32 (ws ++ replicate 32 0))

spec :: Spec
spec = describe "authentication" $ do
  it "makes proofs that depend on secret and nonces alone (two secrets of the same bytes agree)" $ property $ \s nm nw ->
    let again = either error id (mkSecret (B.pack (map (\w -> 0x41 + w `mod` 26) (s ++ replicate 16 0))))
    in proofMatches (workerProof (secretOf s) B.empty (nonce nm) (nonce nw)) (workerProof again B.empty (nonce nm) (nonce nw))
       && B.length (workerProof (secretOf s) B.empty (nonce nm) (nonce nw)) == 32
  it "rejects a proof made with another secret" $ property $ \s t nm nw ->
    secretOf s /= secretOf t ==>
      not (proofMatches (workerProof (secretOf s) B.empty (nonce nm) (nonce nw)) (workerProof (secretOf t) B.empty (nonce nm) (nonce nw)))
  it "rejects a proof over another nonce (no replay)" $ property $ \s nm nm' nw ->
    nonce nm /= nonce nm' ==>
      not (proofMatches (workerProof (secretOf s) B.empty (nonce nm) (nonce nw)) (workerProof (secretOf s) B.empty (nonce nm') (nonce nw)))
  it "never lets one side's proof stand for the other's (no reflection)" $ property $ \s nm nw ->
    not (proofMatches (masterProof (secretOf s) B.empty (nonce nm) (nonce nw)) (workerProof (secretOf s) B.empty (nonce nm) (nonce nw)))
    && not (proofMatches (masterProof (secretOf s) B.empty (nonce nw) (nonce nm)) (workerProof (secretOf s) B.empty (nonce nm) (nonce nw)))
  it "rejects a proof bound to another channel (a man in the middle with his own TLS certificate)" $
    property $ \s nm nw a b -> nonce a /= nonce b ==>
      not (proofMatches (workerProof (secretOf s) (nonce a) (nonce nm) (nonce nw)) (workerProof (secretOf s) (nonce b) (nonce nm) (nonce nw)))
      && not (proofMatches (masterProof (secretOf s) (nonce a) (nonce nm) (nonce nw)) (masterProof (secretOf s) (nonce b) (nonce nm) (nonce nw)))
  it "rejects a truncated proof" $ property $ \s nm nw ->
    let p = workerProof (secretOf s) B.empty (nonce nm) (nonce nw) in not (proofMatches p (B.take 31 p))
  it "passes a secret through a hex line unchanged" $ property $ \s ->
    secretFromLine (secretToLine (secretOf s)) == Right (secretOf s)
  it "refuses short secrets and bad hex lines, saying why" $ do
    mkSecret (BC.pack "short") `shouldSatisfy` isLeft
    secretFromLine "abc" `shouldSatisfy` isLeft
    secretFromLine (replicate 40 'z') `shouldSatisfy` isLeft
  it "creates ~/.herd/cookie with mode 0600 on first use and reads the same secret again" $
    withTempHome $ \home -> do
      Right first <- loadSecret SecretAuto
      st <- getFileStatus (home </> ".herd" </> "cookie")
      (fileMode st .&. 0o777) `shouldBe` 0o600
      loadSecret SecretAuto `shouldReturn` Right first
  it "prefers HERD_SECRET to the cookie file" $
    withTempHome $ \_ -> do
      Right cookie <- loadSecret SecretAuto   -- the cookie exists from here on
      setEnv secretEnvVar "an environment secret of some length"
      r <- loadSecret SecretAuto
      unsetEnv secretEnvVar
      r `shouldBe` (mkSecret (BC.pack "an environment secret of some length"))
      Right cookie `shouldNotBe` r
      loadSecret SecretAuto `shouldReturn` Right cookie
  it "refuses a secret file others can read, naming it and the fix" $
    withTempHome $ \home -> do
      let path = home </> "shared-secret"
      writeFile path "0123456789abcdef0123456789abcdef\n"
      setFileMode path 0o644
      r <- loadSecret (SecretFile path)
      case r of
        Left why -> do
          why `shouldContain` path
          why `shouldContain` "chmod 600"
        Right _ -> expectationFailure "a world-readable secret file was accepted"
      setFileMode path 0o600
      loadSecret (SecretFile path) >>= (`shouldSatisfy` either (const False) (const True))
  describe "the exchange over a real connection" $ do
    let one = secretOf [1 .. 20]
        other = secretOf [2 .. 21]
        wrongSecret = either (\e -> case e of WrongSecret _ -> True; _ -> False) (const False)
    it "succeeds on both sides with one secret" $ withPair TcpTransport $ \(m, w) -> do
      r <- concurrently (newNonceSource >>= \ns -> authenticateWorker ns one B.empty m) (authenticateToMaster one B.empty w)
      r `shouldBe` (Right (), Right ())
    it "refuses a worker with another secret, and tells the worker why" $ withPair TcpTransport $ \(m, w) -> do
      (a, b) <- concurrently (newNonceSource >>= \ns -> authenticateWorker ns one B.empty m) (authenticateToMaster other B.empty w)
      a `shouldSatisfy` wrongSecret
      b `shouldSatisfy` wrongSecret
    it "makes a worker refuse a master that accepts it but cannot prove the secret" $ withPair TcpTransport $ \(m, w) -> do
      -- an impostor: challenges, takes any answer, proves with another secret
      let impostor = do
            nm <- newNonceSource >>= newNonce
            sendFrame m (BL.fromStrict (encodeMasterReply (Challenge nm)))
            Just reply <- recvFrame handshakeFrameLimit m
            case decodeAuthResponse reply of
              Left why -> expectationFailure why
              Right (nw, _) -> sendFrame m (BL.fromStrict (encodeMasterReply (AuthAccepted (masterProof other B.empty nm nw))))
      (_, b) <- concurrently impostor (authenticateToMaster one B.empty w)
      b `shouldSatisfy` wrongSecret
  it "names a missing secret file" $ do
    r <- loadSecret (SecretFile "/nonexistent/herd-secret")
    either id (const "") r `shouldContain` "/nonexistent/herd-secret"

-- Run with HOME pointing at a fresh directory (and HERD_SECRET unset).
withTempHome :: (FilePath -> IO a) -> IO a
withTempHome body = do
  tmp <- getTemporaryDirectory
  pid <- getProcessID
  let home = tmp </> ("herd-auth-test-" ++ show pid)
  createDirectoryIfMissing True home
  oldHome <- lookupEnv "HOME"
  oldSecret <- lookupEnv secretEnvVar
  let enter = setEnv "HOME" home >> unsetEnv secretEnvVar
      leave = do
        maybe (unsetEnv "HOME") (setEnv "HOME") oldHome
        maybe (pure ()) (setEnv secretEnvVar) oldSecret
        removeDirectoryRecursive home
  bracket_ enter leave (body home)
