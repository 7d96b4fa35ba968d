{-# LANGUAGE ScopedTypeVariables #-}
-- | The host agent's link: ONE connection from a worker host to the
-- master ("Herd.Core.Wire.Host"), carrying the traffic of every worker on
-- the host. The agent answers its own workers' handshakes as a master
-- would (the secret, the hello, the build), over a local socket and then
-- shared memory, asks the master to number each, and relays: a worker's
-- packets become entries of the host link's packets, gathered over one
-- round of the agent's single epoll reader ("Herd.Master.EpollReader"),
-- and each entry from the master goes to its worker as a frame of its own.
--
-- Promises: a worker is welcomed only after it proved the secret and the
-- master numbered it; a worker's end (its process, its link) is told to
-- the master at once ('WorkerGone'), and a worker the master stops loses
-- its link; the host link's loss ends 'withHostLink', so the agent and,
-- through their lifelines, its workers end; sending to a worker never
-- blocks the relay (what the ring does not take goes to that worker's
-- writer thread).
module Herd.Launch.HostAgent
  ( withHostLink
  , HostEnd (..)
  ) where

import Control.Concurrent
import Control.Concurrent.Async (race, withAsync)
import Control.Concurrent.STM
import Control.Exception
import Control.Monad (forM_, forever, void, when)
import qualified Data.ByteString as B
import qualified Data.ByteString.Lazy as BL
import Data.IORef
import qualified Data.Map.Strict as M
import qualified Data.Text as T
import Data.Word (Word32)
import Herd.Auth
import Herd.BuildId (buildIdentity)
import Herd.Core.Bytes (bytesBE)
import Herd.Core.Packet.Policy (PacketPolicy (..), Urgency (..))
import Herd.Core.Wire
import Herd.Core.Wire.Host
import Herd.Encoder (encodeBytes, encodeWithTail)
import Herd.Log (logToStderr)
import Herd.Master.EpollReader (newEpollReader)
import Herd.Master.Reader
import Herd.Packet (flushIdle, newSender, sendMessageHeld, sendMessageTail, splitPacket)
import Herd.Transport
import Herd.Transport.Shm (upgradeMaster)
import Herd.Transport.Tcp (connectTcp)
import Herd.Transport.Tls (tlsConnect)
import Herd.Transport.Unix (acceptUnix, listenUnix)
import Herd.Worker.Address (MasterAddress (..), showMasterAddress)
import Herd.Worker.Join
import Network.Socket (close)
import System.Posix.Process (getProcessID)
import System.Posix.Unistd (getSystemID, nodeName)
import System.Timeout (timeout)

-- One worker as the relay sees it.
data Local = Local
  { localConn  :: !Connection
  , localOut   :: !(TQueue [B.ByteString])  -- ^ frames for its writer thread
  , localQueued :: !(TVar Int)               -- ^ frames waiting there
  }

-- | Why a host link ended before the agent's work did.
data HostEnd
  = MasterClosed        -- ^ the master closed its cluster, after telling its workers to stop
  | LinkLost String     -- ^ the link broke or could not be opened: why
  deriving (Eq, Show)

-- | Open the host link to the master at this address (TCP or TLS), serve
-- this host's workers on a local socket, and run the action with the
-- address they join at (@shm:NAME@). Returns the action's value, or how
-- the host link ended first.
withHostLink :: MasterAddress -> Secret -> String -> (String -> IO a) -> IO (Either HostEnd a)
withHostLink address secret group action = do
  build <- buildIdentity
  pid <- getProcessID
  host <- nodeName <$> getSystemID
  let where_ = showMasterAddress address
      hello = WorkerHello protocolVersion build (fromIntegral pid) (T.pack host) (T.pack group) HostLink noCpu
      open = case address of
        TcpAddress h p -> Just ((\c -> (c, B.empty)) <$> connectTcp h p)
        TlsAddress h p -> Just (connectTcp h p >>= tlsConnect h)
        _ -> Nothing
  opened <- maybe (pure (Left Nothing)) (fmap (either (Left . Just) Right) . try) open
  case opened of
    Left Nothing -> pure (Left (LinkLost ("a host agent links to its master over TCP or TLS, not " ++ where_)))
    Left (Just (e :: SomeException)) -> pure (Left (LinkLost ("cannot open the host link to " ++ where_ ++ ": " ++ displayException e)))
    Right (conn, binding) -> do
      joined <- joinMaster secret binding build where_ hello conn
      case joined of
        Left why -> closeConnection conn >> pure (Left (LinkLost why))
        Right j -> serveHost secret build j conn action `finally` closeConnection conn

serveHost :: Secret -> B.ByteString -> Joined -> Connection -> (String -> IO a) -> IO (Either HostEnd a)
serveHost secret build j conn action = do
  _ <- setLiveness (joinedLiveness j) conn
  let policy = joinedPolicy j
      hostPolicy = policy { policyCapacity = max (policyCapacity policy)
                                                 (min (joinedMaxFrame j `div` 2) (4 * policyCapacity policy)) }
      -- a worker's frames travel inside the host link's: it is told a cap
      -- that leaves room for the entry around them
      workerCap = joinedMaxFrame j - 1024
  hostSender <- newSender hostPolicy (sendRawParts conn)
  locals <- newIORef (M.empty :: M.Map Int Local)
  pending <- newIORef (M.empty :: M.Map Word32 (MVar Word32))
  tokens <- newIORef (0 :: Word32)
  lost <- newEmptyMVar
  (reader, release) <- newEpollReader (joinedMaxFrame j + 1024) (void (try (flushIdle hostSender) :: IO (Either SomeException ())))
  let control c = sendMessageTail hostSender Urgent (encodeBytes (encodeEntryHeader controlSlot)) (encodeHostControl c)
      hostLost why = void (tryPutMVar lost (Just why))
      -- a frame to a worker: now if its ring takes it, else by its writer
      toLocal l body = do
        let parts = [B.pack (bytesBE 4 (fromIntegral (B.length body))), body]
        waiting <- readTVarIO (localQueued l)
        if waiting > 0 then queue l parts else do
          left <- try (sendAvailableParts (localConn l) parts)
          case left of
            Left (_ :: SomeException) -> pure ()   -- its loss is reported by the reader
            Right [] -> pure ()
            Right rest -> queue l rest
      queue l parts = atomically $ modifyTVar' (localQueued l) (+ 1) >> writeTQueue (localOut l) parts
      dropLocal wid = do
        gone <- atomicModifyIORef' locals (\m -> (M.delete wid m, M.lookup wid m))
        forM_ gone $ \l -> do
          readerRemove reader wid (localConn l)
          closeConnection (localConn l)
      onHostEntry entry = case decodeEntry entry of
        Left why -> logToStderr ("herd agent: bad entry from the master: " ++ why)
        Right (slot, body)
          | slot == controlSlot -> case decodeHostControl body of
              Right (WorkerAdded token wid) -> do
                waiter <- atomicModifyIORef' pending (\m -> (M.delete token m, M.lookup token m))
                forM_ waiter $ \mv -> putMVar mv wid
              Right (StopWorker wid) -> dropLocal (fromIntegral wid)
              Right CloseHost -> void (tryPutMVar lost Nothing)
              Right other -> logToStderr ("herd agent: the master sent " ++ show other ++ ", which only a host sends")
              Left why -> logToStderr ("herd agent: bad control message from the master: " ++ why)
          | otherwise -> M.lookup (fromIntegral slot) <$> readIORef locals >>= mapM_ (`toLocal` body)
      onHostPacket packet = case splitPacket (joinedMaxFrame j `div` 5) packet of
        Left why -> pure (Left ("bad packet from the master: " ++ why))
        Right entries -> Right () <$ mapM_ onHostEntry entries
      -- a worker's packet, as it came, becomes an entry of the host link's
      onLocalPacket :: Int -> OnPacket
      onLocalPacket wid packet = do
        r <- try (sendMessageHeld hostSender Bulk
                    (encodeWithTail (encodeBytes (encodeEntryHeader (fromIntegral wid))) packet) B.empty)
        case r of
          Left (e :: SomeException) -> hostLost ("cannot send to the master: " ++ displayException e)
          Right () -> pure ()
        pure (Right ())
      onLocalLost wid why = do
        known <- M.member wid <$> readIORef locals
        when known $ do
          dropLocal wid
          r <- try (control (WorkerGone (fromIntegral wid) (GoneDied (T.pack why))) >> flushIdle hostSender)
          either (\(e :: SomeException) -> hostLost ("cannot send to the master: " ++ displayException e)) pure r
      -- a worker's handshake, as the master's ("Herd.Master.Accept")
      admit local = do
        let refuse why = do
              logToStderr ("herd agent: refused a local worker: " ++ why)
              _ <- try (sendFrame local (BL.fromStrict (encodeMasterReply (Refused (T.pack why))))) :: IO (Either SomeException ())
              closeConnection local
        r <- try $ timeout (10 * 1000000) $ do
          auth <- authenticateWorker secret B.empty local
          case auth of
            Left failure -> pure (Left (show failure))
            Right () -> do
              frame <- recvFrame handshakeFrameLimit local
              pure $ case frame of
                Nothing -> Left "it closed its link before its hello"
                Just bytes -> decodeWorkerHello bytes >>= \h -> h <$ checkHello build h
        case r of
          Left (e :: SomeException) -> refuse ("bad handshake: " ++ displayException e)
          Right Nothing -> refuse "no handshake within 10 s"
          Right (Just (Left why)) -> refuse why
          Right (Just (Right hello)) -> do
            token <- atomicModifyIORef' tokens (\t -> (t + 1, t))
            waiter <- newEmptyMVar
            modifyIORef' pending (M.insert token waiter)
            control (AddWorker token (helloPid hello) (helloCpu hello)) >> flushIdle hostSender
            numbered <- timeout (30 * 1000000) (takeMVar waiter)
            case numbered of
              Nothing -> refuse "the master did not number it within 30 s"
              Just wid -> do
                sendFrame local (BL.fromStrict (encodeMasterReply (Welcome build wid (fromIntegral workerCap)
                  (round (joinedLiveness j * 1000)) (policyChunking policy) (fromIntegral (policyCapacity policy))
                  (round (policyTimeout policy * 1e6)) (fromIntegral (joinedWindow j)))))
                link <- if helloLink hello == ShmLink then upgradeMaster 10 local else pure local
                out <- newTQueueIO
                queued <- newTVarIO 0
                let l = Local link out queued
                    writer = forever $ do
                      parts <- atomically (readTQueue out)
                      sendRawParts link parts
                      atomically (modifyTVar' queued (subtract 1))
                _ <- forkIO (void (try writer :: IO (Either SomeException ())))
                modifyIORef' locals (M.insert (fromIntegral wid) l)
                readerAdd reader (fromIntegral wid) link (onLocalPacket (fromIntegral wid)) (onLocalLost (fromIntegral wid))
  readerAdd reader 0 conn onHostPacket hostLost
  -- the reader's descriptors are released once its thread has stopped
  outcome <- flip finally release $ bracket (listenUnix 0) (close . fst) $ \(lsock, name) ->
    withAsync (readerRun reader `catch` \(e :: SomeException) -> hostLost ("the relay stopped: " ++ displayException e)) $ \_ ->
    withAsync (forever (acceptUnix lsock >>= \c -> forkIO (admit c))) $ \_ ->
      race (takeMVar lost) (action ("shm:" ++ name))
  pure $ case outcome of
    Left (Just why) -> Left (LinkLost why)
    Left Nothing -> Left MasterClosed
    Right a -> Right a
