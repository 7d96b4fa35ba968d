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
-- Every decision (where an entry or a part goes, when a worker is
-- numbered, welcomed and told its budget, when the master hears of a
-- worker's end) is the pure machine "Herd.Core.Agent", stepped under one
-- lock; this module owns the sockets, the threads and the frames, and
-- carries out the machine's commands in order.
--
-- Promises: a worker is welcomed only after it proved the secret and the
-- master numbered it; a worker's end (its process, its link) is told to
-- the master at once and once ('WorkerGone'), and a worker the master
-- stops loses its link; the host link's loss ends 'withHostLink', so the
-- agent and, through their lifelines, its workers end; sending to a
-- worker never blocks the relay (what the ring does not take goes to
-- that worker's writer thread).
module Herd.Node.Agent.Serve
  ( withHostLink
  , HostEnd (..)
  ) where

import Control.Concurrent
import Control.Concurrent.Async (race, withAsync)
import Control.Concurrent.STM
import Control.Exception
import Control.Monad (foldM, forM, forM_, forever, void)
import qualified Data.Set as S
import Herd.Core.Agent
import Herd.Core.Launch.MemoryPolicy (heldBudget)
import Herd.Node.Memory (memoryWatchPeriod)
import System.Posix.Signals (sigKILL, signalProcess)
import qualified Data.ByteString as B
import qualified Data.ByteString.Lazy as BL
import Data.IORef
import qualified Data.Map.Strict as M
import qualified Data.Text as T
import Herd.Transport.Auth
import Herd.Sys.BuildId (buildIdentity)
import Herd.Core.Bytes (bytesBE)
import Herd.Core.Packet.Policy (PacketPolicy (..), Urgency (..))
import Herd.Core.Wire
import Herd.Core.Wire.Host
import Herd.Wire.HostEntry (controlEncoder, entryEncoder, hostCallEncoder, workerPacketOf)
import Herd.Core.Wire.HostCall (decodeHostCall, hostCallSlot)
import Herd.Core.Agent.Evolve (HostEvent (..))
import Herd.Node.Agent.Evolve
import Herd.Node.Agent.Shares
import Herd.Node.Agent.Exchange (splitLocalParts)
import Herd.Node.Agent.Steal (HostStealer, newHostStealer, stealerGone, takeSteals)
import Herd.Node.Agent.Memory (AgentWorkers (..), hostLimitBytes, watchAgentMemory)
import Herd.Sys.Log (logToStderr)
import Herd.Reader.Epoll (newEpollReader)
import Herd.Reader
import Herd.Packet (Sender, flushIdle, newSender, sendMessageHeld, sendMessageTail, splitPacket)
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

-- One worker's frames as the driver keeps them.
data Local = Local
  { localLink  :: !(IORef (Maybe Connection))
    -- ^ its link, once its handshake is done: until then (the master may
    -- send to it as soon as it numbered it) frames wait for its writer
  , localReady :: !(TMVar Connection)        -- ^ the same, for its writer thread
  , localOut   :: !(TQueue [B.ByteString])  -- ^ frames for its writer thread
  , localQueued :: !(TVar Int)               -- ^ frames waiting there
  }

-- | Why a host link ended before the agent's work did.
data HostEnd
  = MasterClosed        -- ^ the master closed its cluster, after telling its workers to stop
  | LinkLost String     -- ^ the link broke or could not be opened: why
  deriving (Eq, Show)

-- The driver: the machine under its lock, and what it owns.
data Relay = Relay
  { rlAgent   :: !(MVar Agent)
  , rlLocals  :: !(IORef (M.Map Int Local))
  , rlWaiting :: !(IORef (M.Map Token (MVar (Int, Local))))  -- ^ handshakes waiting for a number
  , rlHost    :: !Sender
  , rlShares  :: !AgentShares
  , rlReader  :: !Reader
  , rlLost    :: !(MVar (Maybe String))      -- ^ how the host link ended ('Nothing': the master closed it)
  , rlMaxFrame :: !Int
  , rlNonces  :: !NonceSource                -- ^ for the local workers' challenges
  , rlEvolve  :: !AgentEvolve                -- ^ two-level evolve's scheduler ("Herd.Node.Agent.Evolve")
  , rlSteals  :: !HostStealer                -- ^ the host's broker of stolen Par children ("Herd.Node.Agent.Steal")
  }

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
  hostSender <- newSender (hostLinkPolicy (joinedMaxFrame j) (joinedPolicy j)) (sendRawParts conn)
  (reader, release) <- newEpollReader (joinedMaxFrame j + 1024) (void (try (flushIdle hostSender) :: IO (Either SomeException ())))
  locals <- newIORef M.empty
  let localOf w = M.lookup w <$> readIORef locals
  evolve <- newAgentEvolve
    (\w m -> workerPacketOf m >>= \packet -> localOf w >>= mapM_ (`toLocal` packet))
    (\m -> void (try (sendMessageHeld hostSender Bulk (hostCallEncoder m) B.empty) :: IO (Either SomeException ())))
    (\w why -> do
        logToStderr ("herd agent: worker " ++ show w ++ " broke the evolve protocol: " ++ why)
        -- its reader then reports it gone
        localOf w >>= mapM_ (\l -> readIORef (localLink l) >>= mapM_ closeConnection))
  relay <- Relay <$> newMVar newAgent <*> pure locals <*> newIORef M.empty <*> pure hostSender
                 <*> newAgentShares <*> pure reader <*> newEmptyMVar <*> pure (joinedMaxFrame j) <*> newNonceSource
                 <*> pure evolve <*> newHostStealer
  heldRef <- newIORef (S.empty, M.empty)
  let watching = forever $ do
        r <- try (watchAgentMemory (governed relay) heldRef)
        either (\(e :: SomeException) -> hostLost relay ("cannot send to the master: " ++ displayException e)) pure r
        threadDelay (round (memoryWatchPeriod * 1e6))
  readerAdd reader 0 conn (onHostPacket relay) (hostLost relay)
  -- the reader's descriptors are released once its thread has stopped
  outcome <- flip finally release $ bracket (listenUnix 0) (close . fst) $ \(lsock, name) ->
    withAsync (readerRun reader `catch` \(e :: SomeException) -> hostLost relay ("the relay stopped: " ++ displayException e)) $ \_ ->
    withAsync (forever (acceptUnix lsock >>= \c -> forkIO (admit relay secret build j c))) $ \_ ->
    withAsync watching $ \_ ->
      race (takeMVar (rlLost relay)) (action ("shm:" ++ name))
  pure $ case outcome of
    Left (Just why) -> Left (LinkLost why)
    Left Nothing -> Left MasterClosed
    Right a -> Right a

-- The host link is lost, for this reason (the first reason counts).
hostLost :: Relay -> String -> IO ()
hostLost relay why = void (tryPutMVar (rlLost relay) (Just why))

-- Step the machine with these events under its lock, carrying out its
-- commands there, in order.
stepRelay :: Relay -> [AgentEvent B.ByteString] -> IO ()
stepRelay relay events = modifyMVar_ (rlAgent relay) $ \a0 ->
  foldM (\a ev -> let (a', cmds) = stepAgent ev a in a' <$ mapM_ (runCommand relay) cmds) a0 events

-- Carry out one of the machine's commands.
runCommand :: Relay -> AgentCommand B.ByteString -> IO ()
runCommand relay cmd = case cmd of
  AskNumber t pid cpu -> control relay (AddWorker t (fromIntegral pid) cpu)
  OpenLocal w _ -> openLocal relay w >> evolveStep (rlEvolve relay) (LocalJoined (fromIntegral w))
  SendBudgets limit n ws -> do
    budget <- hostLimitBytes limit n
    forM_ budget $ \lim -> do
      packet <- workerPacketOf (HoldBudget (fromIntegral (heldBudget lim)))
      forM_ ws $ \w -> withLocal w (`toLocal` packet)
  SendHeldShares w -> withLocal w $ \l -> heldShares (rlShares relay) >>= mapM_ (toLocalParts l)
  WelcomeLocal t w -> do
    waiter <- atomicModifyIORef' (rlWaiting relay) (\m -> (M.delete t m, M.lookup t m))
    forM_ waiter $ \mv -> withLocal w (\l -> putMVar mv (w, l))
  ToWorker w p -> withLocal w (`toLocal` p)
  ToMaster w p -> do
    r <- try (sendMessageHeld (rlHost relay) Bulk (entryEncoder (fromIntegral w) p) B.empty)
    either (\(e :: SomeException) -> hostLost relay ("cannot send to the master: " ++ displayException e)) pure r
  Control c -> control relay c
  HoldSharePiece (HostShare n total piece) ws -> sharePieceCame (rlShares relay) n total piece >>= \came -> case came of
    Left why -> hostLost relay why
    Right (Just packets) -> forM_ ws $ \w -> withLocal w (\l -> mapM_ (toLocalParts l) packets)
    Right Nothing -> pure ()
  HoldSharePiece other _ -> logToStderr ("herd agent: not a share's piece: " ++ show other)
  ForgetShare n -> forgetShare (rlShares relay) n
  Unlink w -> do
    evolveStep (rlEvolve relay) (LocalLost (fromIntegral w) "its link ended")
    stealerGone (rlSteals relay) w >>= mapM_ (runCommand relay)
    gone <- atomicModifyIORef' (rlLocals relay) (\m -> (M.delete w m, M.lookup w m))
    forM_ gone $ \l -> readIORef (localLink l) >>= mapM_ (\c -> readerRemove (rlReader relay) w c >> closeConnection c)
  KillLater pid ->
    -- as the master's own supervisor does: a worker still there two
    -- seconds after its link was closed (stopped, say) is killed
    void $ forkIO $ do
      threadDelay 2000000
      void (try (signalProcess sigKILL (fromIntegral pid)) :: IO (Either IOException ()))
  EndHost -> void (tryPutMVar (rlLost relay) Nothing)
  Complain why -> logToStderr ("herd agent: " ++ why)
  where
    withLocal w act = M.lookup w <$> readIORef (rlLocals relay) >>= mapM_ act

-- Say this to the master now.
control :: Relay -> HostControl -> IO ()
control relay c = do
  r <- try (sendMessageTail (rlHost relay) Urgent (controlEncoder c) B.empty >> flushIdle (rlHost relay))
  either (\(e :: SomeException) -> hostLost relay ("cannot send to the master: " ++ displayException e)) pure r

-- A newly numbered worker's frames: from now on they are kept for it,
-- and its writer sends them once its link is up.
openLocal :: Relay -> Int -> IO ()
openLocal relay w = do
  l <- Local <$> newIORef Nothing <*> newEmptyTMVarIO <*> newTQueueIO <*> newTVarIO 0
  let writer = do
        link <- atomically (readTMVar (localReady l))
        forever $ do
          parts <- atomically (readTQueue (localOut l))
          sendRawParts link parts
          atomically (modifyTVar' (localQueued l) (subtract 1))
  _ <- forkIO (void (try writer :: IO (Either SomeException ())))
  modifyIORef' (rlLocals relay) (M.insert w l)

-- A frame to a worker: now if its ring takes it, else by its writer.
toLocal :: Local -> B.ByteString -> IO ()
toLocal l body = toLocalParts l [body]

-- A frame of a packet in parts (a shared value's piece stays uncopied).
toLocalParts :: Local -> [B.ByteString] -> IO ()
toLocalParts l packet = do
  let parts = B.pack (bytesBE 4 (fromIntegral (sum (map B.length packet)))) : packet
      queue = atomically $ modifyTVar' (localQueued l) (+ 1) >> writeTQueue (localOut l) parts
  waiting <- readTVarIO (localQueued l)
  linked <- readIORef (localLink l)
  case linked of
    Just c | waiting == 0 -> do
      left <- try (sendAvailableParts c parts)
      case left of
        Left (_ :: SomeException) -> pure ()   -- its loss is reported by the reader
        Right [] -> pure ()
        Right rest -> atomically $ modifyTVar' (localQueued l) (+ 1) >> writeTQueue (localOut l) rest
    _ -> queue

-- A packet from the master: its entries, each a control message or a
-- packet for one worker, stepped under one hold of the lock.
onHostPacket :: Relay -> OnPacket
onHostPacket relay packet = case splitPacket (rlMaxFrame relay `div` 5) packet of
  Left why -> pure (Left ("bad packet from the master: " ++ why))
  Right entries -> do
    events <- fmap concat $ forM entries $ \entry -> case decodeEntry entry of
      Left why -> [] <$ logToStderr ("herd agent: bad entry from the master: " ++ why)
      Right (slot, body)
        | slot == controlSlot -> case decodeHostControl body of
            Right c -> pure [ControlCame c]
            Left why -> [] <$ logToStderr ("herd agent: bad control message from the master: " ++ why)
        | slot == hostCallSlot -> case decodeHostCall body of
            -- under the agent's lock, as the workers' answers are
            Right m -> [] <$ withMVar (rlAgent relay) (\_ -> evolveMasterSaid (rlEvolve relay) m)
            Left why -> [] <$ logToStderr ("herd agent: bad host call message from the master: " ++ why)
        | otherwise -> pure [EntryCame (fromIntegral slot) body]
    Right () <$ stepRelay relay events

-- A worker's packet, as it came, becomes an entry of the host link's (a
-- reduction's part for a worker of this host goes to it directly).
onLocalPacket :: Relay -> Int -> OnPacket
onLocalPacket relay wid whole = Right () <$ modifyMVar_ (rlAgent relay) (\here -> do
 -- under two-level evolve its evolve answers are the agent's own
 evolveKept <- takeEvolveAnswers (rlEvolve relay) (rlMaxFrame relay `div` 5) wid whole
 -- its asks for work and answers to the host's own steals are the host's broker's
 (kept, stealCmds) <- case evolveKept of
   Just p | agentHolds here wid -> takeSteals (rlSteals relay) (rlMaxFrame relay `div` 5) wid p
   other -> pure (other, [])
 mapM_ (runCommand relay) stealCmds
 case kept of
  Nothing -> pure here
  Just packet -> do
   -- split by the same state the step then sees: one hold of the lock a packet
   event <- case splitLocalParts (rlMaxFrame relay `div` 5) (agentHolds here . fromIntegral) packet of
     Nothing -> pure (LocalPacket wid [] [packet])
     Just (parts, rest) -> do
       encoded <- forM parts $ \(d, msg) -> (,) (fromIntegral d) <$> workerPacketOf msg
       pure (LocalPacket wid encoded (maybe [] pure rest))
   let (here', cmds) = stepAgent event here
   here' <$ mapM_ (runCommand relay) cmds)

-- The memory watch's view of the workers ("Herd.Node.Agent.Memory").
governed :: Relay -> AgentWorkers
governed relay = AgentWorkers
  { awWorkers = agentWorkers <$> readMVar (rlAgent relay)
  , awLimit = agentLimit <$> readMVar (rlAgent relay)
  , awControl = \c -> sendMessageTail (rlHost relay) Urgent (controlEncoder c) B.empty
  , awFlush = flushIdle (rlHost relay)
  , awGone = \w why -> stepRelay relay [LocalGone w why]
  }

-- A worker's handshake, as the master's ("Herd.Master.Accept"); then it
-- is numbered by the master, welcomed, and read.
admit :: Relay -> Secret -> B.ByteString -> Joined -> Connection -> IO ()
admit relay secret build j local = do
  r <- try $ timeout (10 * 1000000) $ do
    auth <- authenticateWorker (rlNonces relay) secret B.empty local
    case auth of
      Left failure -> pure (Left (show failure))
      Right () -> do
        frame <- recvFrame handshakeFrameLimit local
        pure $ case frame of
          Nothing -> Left "it closed its link before its hello"
          Just bytes -> decodeWorkerHello bytes >>= \h -> h <$ checkHello build h
  case r of
    Left (e :: SomeException) -> refuseLocal local ("bad handshake: " ++ displayException e)
    Right Nothing -> refuseLocal local "no handshake within 10 s"
    Right (Just (Left why)) -> refuseLocal local why
    Right (Just (Right hello)) -> do
      waiter <- newEmptyMVar
      token <- askNumber relay hello waiter
      answer <- timeout (30 * 1000000) (takeMVar waiter)
      case answer of
        Nothing -> do
          stepRelay relay [NumberingLate token]
          refuseLocal local "the master did not number it within 30 s"
        Just (wid, l) -> welcome relay build j hello local wid l

-- Ask the master for a number, the waiter registered before the master
-- can answer (its answer is stepped under the same lock).
askNumber :: Relay -> WorkerHello -> MVar (Int, Local) -> IO Token
askNumber relay hello waiter = modifyMVar (rlAgent relay) $ \a -> do
  let (a', cmds) = stepAgent (LocalHello (fromIntegral (helloPid hello)) (helloCpu hello)) a
      tokens = [ t | AskNumber t _ _ <- cmds ]
  forM_ tokens $ \t -> modifyIORef' (rlWaiting relay) (M.insert t waiter)
  mapM_ (runCommand relay) cmds
  pure (a', head (tokens ++ [0]))

-- Welcome a numbered worker, move its link to shared memory if it asked,
-- and start reading it (unless it was lost or stopped meanwhile).
welcome :: Relay -> B.ByteString -> Joined -> WorkerHello -> Connection -> Int -> Local -> IO ()
welcome relay build j hello local wid l = do
  let policy = joinedPolicy j
      -- a worker's frames travel inside the host link's: it is told a cap
      -- that leaves room for the entry around them
      workerCap = joinedMaxFrame j - 1024
  sendFrame local (BL.fromStrict (encodeMasterReply (Welcome build (fromIntegral wid) (fromIntegral workerCap)
    (round (joinedLiveness j * 1000)) (policyChunking policy) (fromIntegral (policyCapacity policy))
    (round (policyTimeout policy * 1e6)) (fromIntegral (joinedWindow j)))))
  link <- if helloLink hello == ShmLink then upgradeMaster 10 local else pure local
  -- what came for it meanwhile goes first, by its writer
  atomically (putTMVar (localReady l) link)
  writeIORef (localLink l) (Just link)
  still <- (`agentHolds` wid) <$> readMVar (rlAgent relay)
  if still then readerAdd (rlReader relay) wid link (onLocalPacket relay wid) (\why -> stepRelay relay [LocalGone wid (GoneDied (T.pack why))])
  else closeConnection link

-- Refuse a local worker's handshake, saying why.
refuseLocal :: Connection -> String -> IO ()
refuseLocal local why = do
  logToStderr ("herd agent: refused a local worker: " ++ why)
  _ <- try (sendFrame local (BL.fromStrict (encodeMasterReply (Refused (T.pack why))))) :: IO (Either SomeException ())
  closeConnection local
