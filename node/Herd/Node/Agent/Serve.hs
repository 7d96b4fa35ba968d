{-# LANGUAGE BangPatterns, ScopedTypeVariables #-}
-- | The host agent's link: ONE connection from a worker host to the
-- master ("Herd.Core.Wire.Host"), carrying the traffic of every worker on
-- the host. The agent answers its own workers' handshakes as a master
-- would (the secret, the hello, the build), over a local socket and then
-- shared memory, asks the master to number each, and relays: a worker's
-- packets become entries of the host link's packets, gathered over one
-- round of the agent's single epoll reader ("Herd.Reader.Epoll"),
-- and each entry from the master goes to its worker as a frame of its own.
--
-- The agent also governs its workers' memory against the cluster's limit
-- (the master sends it, 'HostMemoryLimit'), as the master does for its
-- own ("Herd.Node.Memory"): readings go to the master for the
-- dashboard, a worker above the soft share is held, and one above the
-- limit is reported gone for memory, then killed (its supervisor starts
-- it again).
--
-- Promises: a worker is welcomed only after it proved the secret and the
-- master numbered it; a worker's end (its process, its link) is told to
-- the master at once ('WorkerGone'), and a worker the master stops loses
-- its link; the host link's loss ends 'withHostLink', so the agent and,
-- through their lifelines, its workers end; sending to a worker never
-- blocks the relay (what the ring does not take goes to that worker's
-- writer thread).
module Herd.Node.Agent.Serve
  ( withHostLink
  , HostEnd (..)
  ) where

import Control.Concurrent
import Control.Concurrent.Async (race, withAsync)
import Control.Concurrent.STM
import Control.Exception
import Control.Monad (forM_, forever, void, when)
import qualified Data.Set as S
import Herd.Core.Launch.MemoryPolicy (heldBudget)
import Herd.Node.Memory (memoryWatchPeriod)
import System.Posix.Signals (sigKILL, signalProcess)
import qualified Data.ByteString as B
import qualified Data.ByteString.Lazy as BL
import Data.IORef
import qualified Data.Map.Strict as M
import qualified Data.Text as T
import Data.Word (Word32)
import Herd.Transport.Auth
import Herd.Sys.BuildId (buildIdentity)
import Herd.Core.Bytes (bytesBE)
import Herd.Core.Packet.Policy (PacketPolicy (..), Urgency (..))
import Herd.Core.Wire
import Herd.Core.Wire.Host
import Herd.Wire.HostEntry (controlEncoder, entryEncoder, workerPacketOf)
import Herd.Node.Agent.Shares
import Herd.Node.Agent.Exchange (splitLocalParts)
import Herd.Node.Agent.Memory (AgentWorkers (..), hostLimitBytes, watchAgentMemory)
import Herd.Sys.Log (logToStderr)
import Herd.Reader.Epoll (newEpollReader)
import Herd.Reader
import Herd.Packet (flushIdle, newSender, sendMessageHeld, sendMessageTail, splitPacket)
import Herd.Transport
import Herd.Transport.Shm (upgradeMaster)
import Herd.Transport.Tcp (connectTcp)
import Herd.Transport.Tls (tlsConnect)
import Herd.Transport.Unix (acceptUnix, listenUnix)
import Herd.Node.Address (MasterAddress (..), showMasterAddress)
import Herd.Node.Join
import Network.Socket (close)
import System.Posix.Process (getProcessID)
import System.Posix.Unistd (getSystemID, nodeName)
import System.Timeout (timeout)

-- One worker as the relay sees it.
data Local = Local
  { localLink  :: !(IORef (Maybe Connection))
    -- ^ its link, once its handshake is done: until then (the master may
    -- send to it as soon as it numbered it) frames wait for its writer
  , localReady :: !(TMVar Connection)        -- ^ the same, for its writer thread
  , localPid   :: !Int                       -- ^ its process, as its hello said
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
      -- a worker's frames travel inside the host link's: it is told a cap
      -- that leaves room for the entry around them
      workerCap = joinedMaxFrame j - 1024
  hostSender <- newSender (hostLinkPolicy (joinedMaxFrame j) policy) (sendRawParts conn)
  locals <- newIORef (M.empty :: M.Map Int Local)
  pending <- newIORef (M.empty :: M.Map Word32 (Int, MVar (Int, Local)))
  tokens <- newIORef (0 :: Word32)
  lost <- newEmptyMVar
  limitRef <- newIORef NoHostLimit
  shares <- newAgentShares   -- shared values, for its workers ("Herd.Core.Shared")
  heldRef <- newIORef S.empty
  (reader, release) <- newEpollReader (joinedMaxFrame j + 1024) (void (try (flushIdle hostSender) :: IO (Either SomeException ())))
  let control c = sendMessageTail hostSender Urgent (controlEncoder c) B.empty
      hostLost why = void (tryPutMVar lost (Just why))
      -- a frame to a worker: now if its ring takes it, else by its writer
      toLocal l body = toLocalParts l [body]
      -- a frame of a packet in parts (a shared value's piece stays uncopied)
      toLocalParts l packet = do
        let parts = B.pack (bytesBE 4 (fromIntegral (sum (map B.length packet)))) : packet
        waiting <- readTVarIO (localQueued l)
        linked <- readIORef (localLink l)
        case linked of
          Just c | waiting == 0 -> do
            left <- try (sendAvailableParts c parts)
            case left of
              Left (_ :: SomeException) -> pure ()   -- its loss is reported by the reader
              Right [] -> pure ()
              Right rest -> queue l rest
          _ -> queue l parts
      queue l parts = atomically $ modifyTVar' (localQueued l) (+ 1) >> writeTQueue (localOut l) parts
      dropLocal wid = do
        gone <- atomicModifyIORef' locals (\m -> (M.delete wid m, M.lookup wid m))
        forM_ gone $ \l -> readIORef (localLink l) >>= mapM_ (\c -> do
          readerRemove reader wid c
          closeConnection c)
      -- the budget for shared values of a worker among this many, as a
      -- packet to it ('Nothing': no limit, no budget)
      budgetPacket n = do
        limit <- readIORef limitRef >>= \setting -> hostLimitBytes setting n
        traverse (\lim -> workerPacketOf (HoldBudget (fromIntegral (heldBudget lim)))) limit
      -- the master numbered a worker: from now on its frames are kept for it
      numbered token wid = do
        waiter <- atomicModifyIORef' pending (\m -> (M.delete token m, M.lookup token m))
        forM_ waiter $ \(pid, mv) -> do
          l <- Local <$> newIORef Nothing <*> newEmptyTMVarIO <*> pure pid <*> newTQueueIO <*> newTVarIO 0
          let writer = do
                link <- atomically (readTMVar (localReady l))
                forever $ do
                  parts <- atomically (readTQueue (localOut l))
                  sendRawParts link parts
                  atomically (modifyTVar' (localQueued l) (subtract 1))
          _ <- forkIO (void (try writer :: IO (Either SomeException ())))
          -- its budget and the shared values first, before any frame the
          -- master sends it
          n <- M.size <$> readIORef locals
          budgetPacket (n + 1) >>= mapM_ (toLocal l)
          heldShares shares >>= mapM_ (toLocalParts l)
          modifyIORef' locals (M.insert (fromIntegral wid) l)
          putMVar mv (fromIntegral wid, l)
      onHostEntry entry = case decodeEntry entry of
        Left why -> logToStderr ("herd agent: bad entry from the master: " ++ why)
        Right (slot, body)
          | slot == controlSlot -> case decodeHostControl body of
              Right (WorkerAdded token wid) -> numbered token wid
              Right (StopWorker wid) -> do
                -- as the master's own supervisor does: a worker still there
                -- two seconds after its link was closed (stopped, say) is killed
                victim <- M.lookup (fromIntegral wid) <$> readIORef locals
                dropLocal (fromIntegral wid)
                forM_ victim $ \l -> forkIO $ do
                  threadDelay 2000000
                  void (try (signalProcess sigKILL (fromIntegral (localPid l))) :: IO (Either IOException ()))
              Right CloseHost -> void (tryPutMVar lost Nothing)
              Right (HostMemoryLimit l) -> do
                writeIORef limitRef l
                ls <- M.elems <$> readIORef locals
                budgetPacket (length ls) >>= mapM_ (\p -> mapM_ (`toLocal` p) ls)
              Right (HostShare n total piece) -> sharePieceCame shares n total piece >>= \came -> case came of
                Left why -> hostLost why
                Right (Just packets) -> readIORef locals >>= mapM_ (\l -> mapM_ (toLocalParts l) packets) . M.elems
                Right Nothing -> pure ()
              Right (HostUnshare n) -> forgetShare shares n
              Right other -> logToStderr ("herd agent: the master sent " ++ show other ++ ", which only a host sends")
              Left why -> logToStderr ("herd agent: bad control message from the master: " ++ why)
          | otherwise -> M.lookup (fromIntegral slot) <$> readIORef locals >>= mapM_ (`toLocal` body)
      onHostPacket packet = case splitPacket (joinedMaxFrame j `div` 5) packet of
        Left why -> pure (Left ("bad packet from the master: " ++ why))
        Right entries -> Right () <$ mapM_ onHostEntry entries
      -- a worker's packet, as it came, becomes an entry of the host link's
      -- (a reduction's part for a worker of this host goes to it directly)
      onLocalPacket :: Int -> OnPacket
      onLocalPacket wid packet = do
        here <- readIORef locals
        case splitLocalParts (joinedMaxFrame j `div` 5) (\d -> M.member (fromIntegral d) here) packet of
          Nothing -> toMaster wid packet
          Just (parts, rest) -> do
            forM_ parts $ \(d, msg) -> forM_ (M.lookup (fromIntegral d) here) (\l -> workerPacketOf msg >>= toLocal l)
            mapM_ (toMaster wid) rest
        pure (Right ())
      toMaster wid packet = do
        r <- try (sendMessageHeld hostSender Bulk (entryEncoder (fromIntegral wid) packet) B.empty)
        case r of
          Left (e :: SomeException) -> hostLost ("cannot send to the master: " ++ displayException e)
          Right () -> pure ()
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
            modifyIORef' pending (M.insert token (fromIntegral (helloPid hello), waiter))
            control (AddWorker token (helloPid hello) (helloCpu hello)) >> flushIdle hostSender
            answer <- timeout (30 * 1000000) (takeMVar waiter)
            case answer of
              Nothing -> refuse "the master did not number it within 30 s"
              Just (wid, l) -> do
                sendFrame local (BL.fromStrict (encodeMasterReply (Welcome build (fromIntegral wid) (fromIntegral workerCap)
                  (round (joinedLiveness j * 1000)) (policyChunking policy) (fromIntegral (policyCapacity policy))
                  (round (policyTimeout policy * 1e6)) (fromIntegral (joinedWindow j)))))
                link <- if helloLink hello == ShmLink then upgradeMaster 10 local else pure local
                -- what came for it meanwhile goes first, by its writer
                atomically (putTMVar (localReady l) link)
                writeIORef (localLink l) (Just link)
                still <- M.member wid <$> readIORef locals
                if still then readerAdd reader wid link (onLocalPacket wid) (onLocalLost wid)
                else closeConnection link
  -- memory governance, as the master's for its own workers ("Herd.Node.Agent.Memory")
  let governed = AgentWorkers
        { awWorkers = map (\(w, l) -> (w, localPid l)) . M.toList <$> readIORef locals
        , awLimit = readIORef limitRef, awControl = control, awFlush = flushIdle hostSender, awDrop = dropLocal }
      watching = forever $ do
        r <- try (watchAgentMemory governed heldRef)
        either (\(e :: SomeException) -> hostLost ("cannot send to the master: " ++ displayException e)) pure r
        threadDelay (round (memoryWatchPeriod * 1e6))
  readerAdd reader 0 conn onHostPacket hostLost
  -- the reader's descriptors are released once its thread has stopped
  outcome <- flip finally release $ bracket (listenUnix 0) (close . fst) $ \(lsock, name) ->
    withAsync (readerRun reader `catch` \(e :: SomeException) -> hostLost ("the relay stopped: " ++ displayException e)) $ \_ ->
    withAsync (forever (acceptUnix lsock >>= \c -> forkIO (admit c))) $ \_ ->
    withAsync watching $ \_ ->
      race (takeMVar lost) (action ("shm:" ++ name))
  pure $ case outcome of
    Left (Just why) -> Left (LinkLost why)
    Left Nothing -> Left MasterClosed
    Right a -> Right a
