{-# LANGUAGE ScopedTypeVariables #-}
-- | The master's side of a host link ("Herd.Core.Wire.Host"): one
-- connection from a host agent (or a simulated host) that carries all of
-- that host's workers. The reader reads it as one link; each entry of its
-- packets is handed to the worker it names exactly as a packet of the
-- worker's own link would be ('deliver'), and each worker's sender gives
-- its packets to the host link's sender, so one write carries many
-- workers' packets. The core still sees one worker per core.
--
-- Promises: a host may speak only for the workers the master numbered on
-- its link (an entry for any other number is ignored, so a host cannot
-- reach another host's workers); the host link's loss is every one of its
-- workers' loss, in one step of the core; a worker the master drops is
-- named to its host ('StopWorker'), which ends it.
module Herd.Master.HostLink
  ( joinHost
  ) where

import Control.Concurrent.STM
import Control.Concurrent (forkIO)
import Control.Monad (void, when)
import System.Timeout (timeout)
import qualified Data.ByteString as B
import Data.IORef
import Data.Word (Word32)
import qualified Data.Map.Strict as M
import qualified Data.Text as T
import Herd.Settings
import Herd.Core.Fault (LinkFault (..), renderFault)
import Herd.Core.Master.Events (Event (..))
import Herd.Core.Packet.Policy (Urgency (..))
import Herd.Core.Farm (WorkerId)
import Herd.Core.Wire (noCpu)
import Herd.Core.Wire.Host
import Herd.Wire.HostEntry (controlEncoder, hostCallEncoder, sentPacketEntry)
import Herd.Core.Wire.HostCall (decodeHostCall, hostCallNumber, hostCallSlot)
import Herd.Master.Link
import Herd.Reader
import Herd.Master.Shell
import Herd.Master.ShellState (Shell (..))
import Herd.Master.Types
import Herd.Packet
import Herd.Transport

-- | A host agent passed the handshake on this connection (numbered like
-- a worker, from the same count): serve its link. The action gives each
-- of its workers a number; the information is the host's hello.
joinHost :: Shell -> IO WorkerId -> WorkerId -> Connection -> WorkerInfo -> IO ()
joinHost sh nextId hid conn hostInfo = do
  let cfg = shConfig sh
  members <- newIORef M.empty
  reader <- readIORef (shReader sh)
  let loseAll why = do
        gone <- atomicModifyIORef' members (\m -> (M.empty, M.keys m))
        atomically $ do
          modifyTVar' (shHosts sh) (M.delete hid)
          -- every host-scheduled call hears of the loss: its states here are gone
          calls <- readTVar (shHostCalls sh)
          mapM_ (\q -> writeTQueue q (hid, Left why)) (M.elems calls)
        -- one event for the host: all its workers' work runs elsewhere.
        -- Held first, so that the work of the first lost is not handed to
        -- the next, lost too (a task charged once per worker of the host)
        shellStep sh True ([ WorkerHeld w True | w <- gone ]
                           ++ [ LinkDown w (PeerLost ("its host agent's link was lost: " ++ why)) | w <- gone ])
  handle <- openLinkWith (hostLinkPolicy (configMaxFrameBytes cfg) (packetPolicyOf cfg)) cfg (shShared sh) conn loseAll
  let host = HostLink sh nextId hid conn hostInfo members handle reader
  let handle' = HostHandle { hostName = infoHost hostInfo, hostClose = closeHost host
                           , hostTell = \c -> void (trySync (hostControl host c >> flushIdle (lhSender handle)))
                           , hostMembers = M.size <$> readIORef members
                           , hostCallTo = \m -> void (trySync (sendMessageTail (lhSender handle) Urgent (hostCallEncoder m) B.empty
                                                             >> flushIdle (lhSender handle))) }
  atomically $ modifyTVar' (shHosts sh) (M.insert hid handle')
  -- the host watches its workers' memory against the cluster's limit
  _ <- trySync (hostControl host (HostMemoryLimit (hostLimit (configWorkerMemoryLimit cfg))) >> flushIdle (lhSender handle))
  readerAdd reader hid conn (onHostPacket host) loseAll
  where
    hostLimit l = case l of
      NoMemoryLimit -> NoHostLimit
      MemoryLimitAuto -> HostLimitAuto
      MemoryLimitMiB mib -> HostLimitBytes (fromIntegral mib * 1024 * 1024)

-- One host agent's link as the shell serves it.
data HostLink = HostLink
  { hlShell   :: !Shell
  , hlNextId  :: IO WorkerId                      -- ^ numbers for its workers
  , hlId      :: !WorkerId                        -- ^ the host's own number
  , hlConn    :: !Connection
  , hlInfo    :: !WorkerInfo                      -- ^ the host's hello, for its workers
  , hlMembers :: !(IORef (M.Map WorkerId (IORef PeerStats)))  -- ^ its workers, numbered by the master
  , hlHandle  :: !LinkHandle
  , hlReader  :: !Reader
  }

-- The host link's sender.
hostSenderOf :: HostLink -> Sender
hostSenderOf = lhSender . hlHandle

-- A control message to the host.
hostControl :: HostLink -> HostControl -> IO ()
hostControl host c = sendMessageTail (hostSenderOf host) Urgent (controlEncoder c) B.empty

-- The cluster is closing: the host hears so after its workers' last
-- messages, and the link closes once the writer has sent them (or after
-- two seconds).
closeHost :: HostLink -> IO ()
closeHost host = do
  _ <- trySync (hostControl host CloseHost >> flushIdle (hostSenderOf host))
  stopWriting (hlHandle host)
  void $ forkIO $ do
    _ <- timeout 2000000 (atomically (readTVar (lhBacklog (hlHandle host)) >>= \b -> when (b > 0) retry))
    readerRemove (hlReader host) (hlId host) (hlConn host)
    closeConnection (hlConn host)

-- The host started a worker: number it, tell the host the number before
-- anything the core sends it, and link it (its packets become entries of
-- the host's: the first part is the worker sender's own buffer and its
-- frame length, dropped).
addHostWorker :: HostLink -> Word32 -> Word32 -> Word32 -> IO ()
addHostWorker host token pid cpu = do
  let sh = hlShell host
      cfg = shConfig sh
  wid <- hlNextId host
  received <- newIORef noPeerStats
  sender <- newSender (packetPolicyOf cfg) (\parts -> mapM_ (uncurry (sendMessageTail (hostSenderOf host) Bulk)) (sentPacketEntry (fromIntegral wid) parts))
  let info = (hlInfo host) { infoId = wid, infoPid = fromIntegral pid
                           , infoCpu = if cpu == noCpu then Nothing else Just (fromIntegral cpu) }
      end = do
        known <- atomicModifyIORef' (hlMembers host) (\m -> (M.delete wid m, M.member wid m))
        when known $ hostControl host (StopWorker (fromIntegral wid))
      link = WorkerLink sender (lhBacklog (hlHandle host)) (Just (hlId host, hostSenderOf host)) end (pure ())
  modifyIORef' (hlMembers host) (M.insert wid received)
  hostControl host (WorkerAdded token (fromIntegral wid))
  added <- addWorkerLink sh wid info link received (pure ())
  when (not added) $ modifyIORef' (hlMembers host) (M.delete wid)
  bumpCounter sh (\c -> c { countJoined = countJoined c + 1 })

-- A control message is acted on in order: the workers' events gathered
-- before it are stepped first.
onHostControl :: HostLink -> [Event] -> B.ByteString -> IO (Either String [Event])
onHostControl host pending body = case decodeHostControl body of
  Left why -> pure (Left ("bad host control message: " ++ why))
  Right (AddWorker token pid cpu) -> Right [] <$ (deliverEvents (hlShell host) (reverse pending) >> addHostWorker host token pid cpu)
  Right (WorkerGone w reason) -> ifMember w (LinkDown (fromIntegral w) (goneFault reason))
  Right (WorkerHold w held) -> ifMember w (WorkerHeld (fromIntegral w) held)
  Right (WorkerMemory readings) -> do
    mine <- readIORef (hlMembers host)
    let known = M.fromList [ (fromIntegral w, fromIntegral b) | (w, b) <- readings, M.member (fromIntegral w) mine ]
    shellRecordHostMemory (hlShell host) known
    pure (Right pending)
  Right other -> pure (Left ("a host agent sent " ++ show other ++ ", which only the master sends"))
  where
    ifMember w ev = do
      known <- M.member (fromIntegral w) <$> readIORef (hlMembers host)
      pure (Right (if known then ev : pending else pending))
    goneFault reason = case reason of
      GoneDied why -> PeerLost (T.unpack why)
      GoneMemory used limit -> MemoryExceeded (fromIntegral used) (fromIntegral limit)

-- One entry of the host's packet: a control message, or a worker's packet.
onHostEntry :: HostLink -> [Event] -> B.ByteString -> IO (Either String [Event])
onHostEntry host pending entry = case decodeEntry entry of
  Left why -> pure (Left why)
  Right (slot, body)
    | slot == controlSlot -> onHostControl host pending body
    | slot == hostCallSlot -> case decodeHostCall body of
        Left why -> pure (Left ("bad host call message: " ++ why))
        Right m -> do
          -- to its call's caller; a message of a call that ended goes nowhere
          let sh = hlShell host
          atomically $ do
            calls <- readTVar (shHostCalls sh)
            mapM_ (\q -> writeTQueue q (hlId host, Right m)) (M.lookup (hostCallNumber m) calls)
          pure (Right pending)
    | otherwise -> do
        let wid = fromIntegral slot
        -- INV-HOST-ROUTE: only the workers numbered on this link
        found <- M.lookup wid <$> readIORef (hlMembers host)
        case found of
          -- dropped already, its packets still on the way
          Nothing -> pure (Right pending)
          Just received -> do
            decoded <- packetEvents (hlShell host) wid (hlConn host) received body
            -- a bad packet breaks that worker alone: the core drops it
            pure (Right (either (\fault -> [LinkBroken wid fault]) reverse decoded ++ pending))

-- A packet from the host: all its entries' events in one step of the core.
onHostPacket :: HostLink -> OnPacket
onHostPacket host packet = case splitPacket (configMaxFrameBytes (shConfig (hlShell host)) `div` 5) packet of
  Left why -> pure (Left (renderFault (BadPacket (connPeer (hlConn host)) why)))
  Right entries -> go [] entries
  where
    step = deliverEvents (hlShell host) . reverse
    go pending [] = Right () <$ step pending
    go pending (e : es) = onHostEntry host pending e >>= either (\why -> step pending >> pure (Left why)) (\p -> go p es)
