{-# LANGUAGE ScopedTypeVariables #-}
-- | Admitting workers: accepting connections, proving the shared secret
-- ("Herd.Transport.Auth"), and the handshake (protocol version, build identity,
-- transport), each in its own thread.
--
-- Promises: at most 'configMaxPendingHandshakes' handshakes run at once,
-- further connections are closed at once; a handshake that does not finish
-- within 'configHandshakeTimeout' is refused; nothing a connection sends
-- reaches the master's core until it has passed both the secret and the
-- handshake, so an unauthenticated peer, a stalled one, or a flood of them
-- cannot disturb running workers.
module Herd.Master.Accept
  ( Acceptor (..)
  , acceptLoop
  ) where

import Control.Concurrent (forkIO, threadDelay)
import Control.Exception
import Control.Monad (forever, void, when)
import qualified Data.ByteString as B
import qualified Data.ByteString.Lazy as BL
import Data.IORef
import qualified Data.Text as T
import Herd.Transport.Auth
import Herd.Settings
import Herd.Master.Types
import Herd.Core.Farm (WorkerId)
import Herd.Transport
import Herd.Transport.Shm (upgradeMaster)
import Herd.Core.Wire
import System.Timeout (timeout)

-- | What admitting a worker needs.
data Acceptor = Acceptor
  { accConfig   :: !Config
  , accSecret   :: !Secret
  , accNonces   :: !NonceSource               -- ^ the cluster's nonces for its challenges
  , accBuild    :: !B.ByteString              -- ^ this binary's build identity
  , accNextId   :: !(IORef Int)               -- ^ one numbering for workers from every listener
  , accCounters :: IO ConnectionCounters
  , accBump     :: (ConnectionCounters -> ConnectionCounters) -> IO ()
  , accJoined   :: WorkerId -> Connection -> WorkerInfo -> IO ()
    -- ^ a worker passed the handshake
  , accHostJoined :: WorkerId -> Connection -> WorkerInfo -> IO ()
    -- ^ a host agent passed the handshake (numbered like a worker; the
    -- information is its hello's, for its workers)
  }

-- | Accept connections forever; each handshake runs in its own thread, and at
-- most 'configMaxPendingHandshakes' run at once. Each accepted connection
-- is first upgraded (TLS, "Herd.Transport.Tls"), giving the link to use and
-- the channel binding the proofs of the secret cover.
acceptLoop :: Acceptor -> (Connection -> IO (Connection, B.ByteString)) -> IO Connection -> IO ()
acceptLoop acc upgrade acceptOne = do
  pending <- newIORef (0 :: Int)
  let cfg = accConfig acc
      cap = configMaxPendingHandshakes cfg
      joining d = accBump acc (\c -> c { countJoining = countJoining c + d })
  forever $ do
    accepted <- try acceptOne
    case accepted of
      Left (e :: IOException) -> do
        -- e.g. out of file descriptors under a flood: wait, do not die
        configLog cfg ("herd: accepting a connection failed: " ++ displayException e)
        threadDelay 50000
      Right conn -> do
        accBump acc (\c -> c { countAccepted = countAccepted c + 1 })
        admitted <- atomicModifyIORef' pending (\k -> if k >= cap then (k, False) else (k + 1, True))
        if admitted
          then do
            joining 1
            void $ forkIO $ upgraded acc upgrade conn
                              `finally` (atomicModifyIORef' pending (\k -> (k - 1, ())) >> joining (-1))
          else do
            n <- countBusyRefused <$> accCounters acc
            accBump acc (\c -> c { countBusyRefused = countBusyRefused c + 1 })
            when (n == 0 || n `mod` 1000 == 0) $
              configLog cfg ("herd: closing connection from " ++ connPeer conn ++ ": "
                             ++ show cap ++ " handshakes already in progress")
            closeConnection conn

-- The connection's upgrade, within the handshake timeout; then the handshake.
upgraded :: Acceptor -> (Connection -> IO (Connection, B.ByteString)) -> Connection -> IO ()
upgraded acc upgrade conn0 = do
  let cfg = accConfig acc
      failed why = do
        accBump acc (\c -> c { countHandshakeFailures = countHandshakeFailures c + 1 })
        configLog cfg ("herd: refused connection from " ++ connPeer conn0 ++ ": " ++ why)
        closeConnection conn0
  rc <- setLiveness (configLivenessTimeout cfg) conn0
  when (rc /= 0) $ configLog cfg ("herd: cannot set keepalive on " ++ connPeer conn0 ++ " (errno " ++ show rc ++ ")")
  up <- try (timeout (round (configHandshakeTimeout cfg * 1e6)) (upgrade conn0))
  case up of
    Left (e :: SomeException) -> failed ("TLS handshake failed: " ++ displayException e)
    Right Nothing -> failed ("no TLS handshake within " ++ show (configHandshakeTimeout cfg) ++ " s")
    Right (Just (conn, binding)) -> handshake acc binding conn

handshake :: Acceptor -> B.ByteString -> Connection -> IO ()
handshake acc binding conn = do
  let cfg = accConfig acc
      secret = accSecret acc
      build = accBuild acc
      logLine = configLog cfg
      failed why = do
        accBump acc (\c -> c { countHandshakeFailures = countHandshakeFailures c + 1 })
        logLine ("herd: refused connection from " ++ connPeer conn ++ ": " ++ why)
      refuse why = do
        failed why
        _ <- try (sendFrame conn (BL.fromStrict (encodeMasterReply (Refused (T.pack why)))))
               :: IO (Either SomeException ())
        closeConnection conn
  r <- try $ timeout (round (configHandshakeTimeout cfg * 1e6)) $ do
    auth <- authenticateWorker (accNonces acc) secret binding conn
    case auth of
      Left failure -> pure (Left failure)
      Right () -> Right <$> recvFrame handshakeFrameLimit conn
  case r of
    Left (e :: SomeException) -> refuse ("bad handshake frame: " ++ displayException e)
    Right Nothing -> refuse ("no handshake within " ++ show (configHandshakeTimeout cfg) ++ " s")
    Right (Just (Left (WrongSecret why))) -> do
      accBump acc (\c -> c { countAuthFailures = countAuthFailures c + 1 })
      logLine ("herd: refused connection from " ++ connPeer conn ++ ": authentication failed: " ++ why)
      closeConnection conn
    Right (Just (Left (AuthProtocol why))) -> failed why >> closeConnection conn
    Right (Just (Right Nothing)) -> failed "closed the connection before its hello" >> closeConnection conn
    Right (Just (Right (Just bytes))) -> case decodeWorkerHello bytes >>= \h -> fmap (const h) (checkHello build h) of
      Left why -> refuse why
      Right hello | helloLink hello == ShmLink && connKind conn /= UnixTransport ->
        refuse "shared memory is set up over the master's local socket (shm:NAME), not over TCP"
      Right hello -> do
        wid <- atomicModifyIORef' (accNextId acc) (\n -> (n + 1, n))
        sent <- try (sendFrame conn (BL.fromStrict (encodeMasterReply
                       (Welcome build (fromIntegral wid) (fromIntegral (configMaxFrameBytes cfg))
                                (round (configLivenessTimeout cfg * 1000)) (configChunking cfg)
                                (fromIntegral (configPacketBytes cfg))
                                (round (configPacketTimeout cfg * 1e6))
                                (fromIntegral (configStreamWindow cfg))))))
        case sent of
          Left (e :: SomeException) -> failed ("lost during handshake: " ++ displayException e)
                                       >> closeConnection conn
          Right () -> do
            linked <- if helloLink hello /= ShmLink then pure (Right conn)
                        else try (upgradeMaster (configHandshakeTimeout cfg) conn)
            case linked of
              Left (e :: SomeException) -> do
                failed ("cannot set up shared memory: " ++ displayException e)
                closeConnection conn
              Right link' -> do
                let info = WorkerInfo wid (fromIntegral (helloPid hello)) (T.unpack (helloHost hello))
                                                  (connPeer link') (T.unpack (helloGroup hello))
                                                  (connKind link')
                                                  (if helloCpu hello == noCpu then Nothing
                                                   else Just (fromIntegral (helloCpu hello)))
                if helloLink hello == HostLink then accHostJoined acc wid link' info else do
                  accBump acc (\c -> c { countJoined = countJoined c + 1 })
                  accJoined acc wid link' info
