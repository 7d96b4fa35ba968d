{-# LANGUAGE ScopedTypeVariables #-}
-- | TLS on TCP links, with real worker processes: a cluster works over
-- it; a recording relay between a worker and its master sees no plaintext
-- (and does see it with TLS off, so the check can fail); a worker that
-- does not speak TLS is refused.
module TlsSpec (spec) where

import Control.Concurrent
import Control.Concurrent.Async (concurrently_, withAsync)
import Control.Exception
import Control.Monad
import qualified Data.ByteString as B
import qualified Data.ByteString.Char8 as BC
import Data.Bits (xor)
import Data.IORef
import Herd
import Herd.Config
import Herd.Transport (closeConnection, recvFrame, sendFrameStrict)
import Herd.Transport.Tcp (acceptTcp, connectTcp, listenPort, listenTcp)
import Herd.Transport.Tls (newTlsIdentity, tlsAccept, tlsConnect)
import Network.Socket
import qualified Network.Socket.ByteString as NSB
import System.Environment (getExecutablePath)
import System.Process
import Test.Hspec
import ClusterSpec (withTestClusterConfig, eventually, workerEnv, logsContain)
import TestTasks

-- A relay on loopback to the master's port that keeps every byte a worker
-- sends; returns its port.
withRelay :: Int -> (Int -> IORef [B.ByteString] -> IO a) -> IO a
withRelay target body = do
  seen <- newIORef []
  withRelayVia target (\bytes -> bytes <$ atomicModifyIORef' seen (\bs -> (bytes : bs, ()))) (\port -> body port seen)

-- A relay on loopback to this port whose client-to-server bytes pass
-- through the action (which may keep or change them); returns its port.
withRelayVia :: Int -> (B.ByteString -> IO B.ByteString) -> (Int -> IO a) -> IO a
withRelayVia target upward body =
  bracket (listenTcp "127.0.0.1" 0) close $ \lsock -> do
    port <- listenPort lsock
    let pump from to through = do
          let loop = do
                bytes <- NSB.recv from 65536
                unless (B.null bytes) $ through bytes >>= NSB.sendAll to >> loop
          void (try loop :: IO (Either SomeException ()))
          void (try (shutdown to ShutdownSend) :: IO (Either SomeException ()))
        serveOne = do
          (client, _) <- accept lsock
          addr : _ <- getAddrInfo Nothing (Just "127.0.0.1") (Just (show target))
          upstream <- socket (addrFamily addr) Stream defaultProtocol
          connect upstream (addrAddress addr)
          void $ forkIO $ concurrently_ (pump client upstream upward) (pump upstream client pure)
    tid <- forkIO (forever serveOne)
    body port `finally` killThread tid

-- Run a farm of large one-letter results through a worker that reaches the
-- master through the relay; the bytes it sent.
throughRelay :: Bool -> IO B.ByteString
throughRelay tls =
  withTestClusterConfig 0 (\c -> c { configTls = tls, configTransport = Just TcpTransport }) $ \_ cluster -> do
    let (_, port) = clusterAddress cluster
    withRelay port $ \relayPort seen -> do
      exe <- getExecutablePath
      env <- workerEnv relayPort
      let env' = [ (k, if k == "HERD_WORKER" && tls then "tls:" ++ v else v) | (k, v) <- env ]
      bracket (createProcess (proc exe []) { env = Just env' }) (\(_, _, _, ph) -> terminateProcess ph >> void (waitForProcess ph)) $ \_ -> do
        waitForWorkers cluster 1 20 `shouldReturn` True
        ys <- farm cluster bigResultTask [1]
        map B.length ys `shouldBe` [3000000]
        B.concat . reverse <$> readIORef seen

spec :: Spec
spec = describe "TLS on TCP links" $ do
  it "farms over TLS links between a master and its local workers" $
    withTestClusterConfig 2 (\c -> c { configTls = True, configTransport = Just TcpTransport }) $ \_ cluster -> do
      farm cluster squareTask [1 .. 200] `shouldReturn` map (^ (2 :: Int)) [1 .. 200]
      infos <- clusterWorkerInfo cluster
      map infoTransport infos `shouldBe` [TcpTransport, TcpTransport]

  it "sends no plaintext: a relay sees the 3 MB result only without TLS" $ do
    let run = BC.replicate 64 'b'   -- the result is three million of them
    plain <- throughRelay False
    run `B.isInfixOf` plain `shouldBe` True
    secret <- throughRelay True
    B.length secret `shouldSatisfy` (> 3000000)
    run `B.isInfixOf` secret `shouldBe` False

  it "refuses a worker behind a man in the middle who ends TLS with his own certificate" $
    withTestClusterConfig 0 (\c -> c { configTls = True, configTransport = Just TcpTransport }) $ \logs cluster -> do
      let (_, port) = clusterAddress cluster
      identity <- newTlsIdentity
      bracket (listenTcp "127.0.0.1" 0) close $ \lsock -> do
        mitmPort <- listenPort lsock
        let relay from to = do
              let loop = recvFrame (64 * 1024 * 1024) from >>= maybe (pure ()) (\f -> sendFrameStrict to f >> loop)
              void (try loop :: IO (Either SomeException ()))
              closeConnection to
            middle = do
              (toWorker, _) <- acceptTcp lsock >>= tlsAccept identity
              (toMaster, _) <- connectTcp "127.0.0.1" port >>= tlsConnect "127.0.0.1"
              concurrently_ (relay toWorker toMaster) (relay toMaster toWorker)
        withAsync middle $ \_ -> do
          exe <- getExecutablePath
          env <- workerEnv mitmPort
          let env' = [ (k, if k == "HERD_WORKER" then "tls:" ++ v else v) | (k, v) <- env ]
          bracket (createProcess (proc exe []) { env = Just env' }) (\(_, _, _, ph) -> terminateProcess ph >> void (waitForProcess ph)) $ \_ -> do
            eventually (logsContain logs "authentication failed") `shouldReturn` True
            clusterWorkerCount cluster `shouldReturn` 0

  it "refuses a worker that does not speak TLS, naming why" $
    withTestClusterConfig 0 (\c -> c { configTls = True, configTransport = Just TcpTransport, configHandshakeTimeout = 1 }) $ \logs cluster -> do
      exe <- getExecutablePath
      env <- workerEnv (snd (clusterAddress cluster))
      bracket (createProcess (proc exe []) { env = Just env }) (\(_, _, _, ph) -> terminateProcess ph >> void (waitForProcess ph)) $ \_ -> do
        -- a plain worker waits for a challenge the master never sends in
        -- clear: the master gives up after its handshake timeout
        eventually (logsContain logs "TLS handshake") `shouldReturn` True
        clusterWorkerCount cluster `shouldReturn` 0

  it "carries frames both ways in sealed records, and refuses a record changed on the way" $
    bracket (listenTcp "127.0.0.1" 0) close $ \lsock -> do
      port <- listenPort lsock
      identity <- newTlsIdentity
      tamper <- newIORef False
      -- a relay that flips one byte of what the client sends once told to
      let flipOnce bytes = do
            now <- atomicModifyIORef' tamper (\t -> (False, t))
            pure (if now then B.take 10 bytes <> B.map (`xor` 1) (B.take 1 (B.drop 10 bytes)) <> B.drop 11 bytes else bytes)
      withRelayVia port flipOnce $ \relayPort -> do
          result <- newEmptyMVar
          withAsync (acceptTcp lsock >>= tlsAccept identity >>= putMVar result . fst) $ \_ -> do
            (client, _) <- connectTcp "127.0.0.1" relayPort >>= tlsConnect "127.0.0.1"
            server <- takeMVar result
            let big = B.replicate 200000 7
            sendFrameStrict client (BC.pack "hello")
            recvFrame 1000000 server `shouldReturn` Just (BC.pack "hello")
            sendFrameStrict server big
            recvFrame 1000000 client `shouldReturn` Just big
            writeIORef tamper True
            sendFrameStrict client (BC.replicate 100 'x')
            refused <- try (recvFrame 1000000 server)
            case refused of
              Left (e :: SomeException) -> displayException e `shouldContain` "did not authenticate"
              Right got -> expectationFailure ("a changed record was taken: " ++ show got)
            closeConnection client
            closeConnection server
