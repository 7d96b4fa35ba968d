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
import qualified Data.Map.Strict as M
import qualified Data.Text as T
import Herd.Settings
import Herd.Core.Fault (LinkFault (..), renderFault)
import Herd.Core.Master.Events (Event (..))
import Herd.Core.Packet.Policy (Urgency (..))
import Herd.Core.Farm (WorkerId)
import Herd.Core.Wire (noCpu)
import Herd.Core.Wire.Host
import Herd.Wire.HostEntry (controlEncoder, sentPacketEntry)
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
  members <- newIORef (M.empty :: M.Map WorkerId (IORef PeerStats))
  reader <- readIORef (shReader sh)
  let loseAll why = do
        gone <- atomicModifyIORef' members (\m -> (M.empty, M.keys m))
        atomically $ modifyTVar' (shHosts sh) (M.delete hid)
        -- one event for the host: all its workers' work runs elsewhere
        shellStep sh True [ LinkDown w (PeerLost ("its host agent's link was lost: " ++ why)) | w <- gone ]
  handle <- openLinkWith (hostLinkPolicy (configMaxFrameBytes cfg) (packetPolicyOf cfg)) cfg (shShared sh) conn loseAll
  let hostSender = lhSender handle
      -- the cluster is closing: the host hears so after its workers' last
      -- messages, and the link closes once the writer has sent them (or
      -- after two seconds)
      closeHost = do
        _ <- trySync (control CloseHost >> flushIdle hostSender)
        stopWriting handle
        void $ forkIO $ do
          _ <- timeout 2000000 (atomically (readTVar (lhBacklog handle) >>= \b -> when (b > 0) retry))
          readerRemove reader hid conn
          closeConnection conn
      control c = sendMessageTail hostSender Urgent (controlEncoder c) B.empty
      -- a worker's packets become entries of the host's (the first part
      -- is the worker sender's own buffer and its frame length, dropped)
      entryOut wid parts = mapM_ (uncurry (sendMessageTail hostSender Bulk)) (sentPacketEntry (fromIntegral wid) parts)
      addWorker token pid cpu = do
        wid <- nextId
        received <- newIORef noPeerStats
        sender <- newSender (packetPolicyOf cfg) (entryOut wid)
        let info = hostInfo { infoId = wid, infoPid = fromIntegral pid
                            , infoCpu = if cpu == noCpu then Nothing else Just (fromIntegral cpu) }
            end = do
              known <- atomicModifyIORef' members (\m -> (M.delete wid m, M.member wid m))
              when known $ control (StopWorker (fromIntegral wid))
            link = WorkerLink sender (lhBacklog handle) (Just (hid, hostSender)) end (pure ())
        modifyIORef' members (M.insert wid received)
        -- the number goes out before anything the core sends the worker
        control (WorkerAdded token (fromIntegral wid))
        added <- addWorkerLink sh wid info link received (pure ())
        when (not added) $ modifyIORef' members (M.delete wid)
        bumpCounter sh (\c -> c { countJoined = countJoined c + 1 })
      -- a control message is acted on in order: the workers' events
      -- gathered before it are stepped first
      onControl pending body = case decodeHostControl body of
        Left why -> pure (Left ("bad host control message: " ++ why))
        Right (AddWorker token pid cpu) -> Right [] <$ (deliverEvents sh (reverse pending) >> addWorker token pid cpu)
        Right (WorkerGone w reason) -> do
          let wid = fromIntegral w
          known <- M.member wid <$> readIORef members
          pure (Right (if known then LinkDown wid (goneFault reason) : pending else pending))
        Right (WorkerHold w held) -> do
          let wid = fromIntegral w
          known <- M.member wid <$> readIORef members
          pure (Right (if known then WorkerHeld wid held : pending else pending))
        Right (WorkerMemory readings) -> do
          mine <- readIORef members
          let known = M.fromList [ (fromIntegral w, fromIntegral b) | (w, b) <- readings, M.member (fromIntegral w) mine ]
          shellRecordHostMemory sh known
          pure (Right pending)
        Right other -> pure (Left ("a host agent sent " ++ show other ++ ", which only the master sends"))
      onEntry pending entry = case decodeEntry entry of
        Left why -> pure (Left why)
        Right (slot, body)
          | slot == controlSlot -> onControl pending body
          | otherwise -> do
              let wid = fromIntegral slot
              -- INV-HOST-ROUTE: only the workers numbered on this link
              found <- M.lookup wid <$> readIORef members
              case found of
                -- dropped already, its packets still on the way
                Nothing -> pure (Right pending)
                Just received -> do
                  decoded <- packetEvents sh wid conn received body
                  -- a bad packet breaks that worker alone: the core drops it
                  pure (Right (either (\fault -> [LinkBroken wid fault]) reverse decoded ++ pending))
      -- all the entries' events in one step of the core
      onPacket packet = case splitPacket (configMaxFrameBytes cfg `div` 5) packet of
        Left why -> pure (Left (renderFault (BadPacket (connPeer conn) why)))
        Right entries -> go [] entries
          where go pending [] = Right () <$ deliverEvents sh (reverse pending)
                go pending (e : es) = onEntry pending e >>= either (\why -> deliverEvents sh (reverse pending) >> pure (Left why)) (\p -> go p es)
  atomically $ modifyTVar' (shHosts sh) (M.insert hid closeHost)
  -- the host watches its workers' memory against the cluster's limit
  _ <- trySync (control (HostMemoryLimit (hostLimit (configWorkerMemoryLimit cfg))) >> flushIdle hostSender)
  readerAdd reader hid conn onPacket loseAll
  where
    hostLimit l = case l of
      NoMemoryLimit -> NoHostLimit
      MemoryLimitAuto -> HostLimitAuto
      MemoryLimitMiB mib -> HostLimitBytes (fromIntegral mib * 1024 * 1024)
    goneFault reason = case reason of
      GoneDied why -> PeerLost (T.unpack why)
      GoneMemory used limit -> MemoryExceeded (fromIntegral used) (fromIntegral limit)
