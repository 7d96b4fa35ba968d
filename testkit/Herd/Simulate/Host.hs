{-# LANGUAGE ScopedTypeVariables #-}
-- | A simulated host: one process playing many workers, as Kubernetes'
-- hollow nodes do, so that a 2-core machine can show how the master
-- behaves with thousands of workers.
--
-- The host speaks the host agent's protocol: one TCP link to the master,
-- one handshake and proof of the secret ("Herd.Node.Join"), and every
-- worker numbered by the master on it and its packets carried as entries
-- of the link's ("Herd.Core.Wire.Host"). Each simulated worker runs the
-- worker's own steps: the farm's pure step
-- ("Herd.Core.Worker.Step") and the evolve holder's ("Herd.Core.Worker.Evolve"),
-- calling the real task and evolve functions. Only the time is simulated:
-- what a function declares through 'Herd.Simulate.simulatedWork' is not
-- slept but becomes a timer, and the answer leaves when it fires. While a
-- farm run's timer is pending, that worker's later messages wait, as they
-- would behind a real computation; evolve states go on being given back at
-- once. One thread serves every worker: an epoll wait on the link,
-- bounded by the next timer of one timer wheel ("Herd.Simulate.Wheel").
-- Stream processes are refused ('Herd.Wire.StreamAborted'). Once its
-- workers have joined, a host touches a heap reserve ("Herd.Sys.HeapReserve")
-- as the master does.
--
-- Promise: a worker that breaks the protocol is dropped with a line on
-- standard error and a word to the master, and the others go on; the
-- host exits when its last worker is gone, when its link is lost, or when
-- the process that started it dies.
module Herd.Simulate.Host
  ( SimulatedHost (..)
  , runSimulatedHost
  ) where

import Control.Concurrent (runInUnboundThread)
import Control.Exception
import qualified Data.ByteString as B
import Control.Monad (forM_, when)
import Data.IORef
import qualified Data.IntMap.Strict as IM
import qualified Data.IntSet as IS
import qualified Data.Map.Strict as M
import qualified Data.Sequence as Seq
import qualified Data.Text as T
import Foreign.Marshal.Array (allocaArray, peekArray)
import Herd.Node.Store (newAssembly)
import Herd.Sys.BuildId (buildIdentity)
import Herd.Sys.Clock (monotonicSeconds)
import Herd.Sys.Epoll
import Herd.Core.Worker.Evolve
import Herd.Sys.HeapReserve (heapReserveBytes, reserveHeap)
import Herd.Core.Packet.Policy (Urgency (..))
import Herd.Core.Wire.Host
import Herd.Sys.Log (logToStderr)
import Herd.Wire.HostEntry (sentPacketEntry)
import Herd.Packet (flushIdle, newSender, sendMessageHeld, splitPacket)
import Herd.Task.WorkCost (beginSimulatedHost, sleepOsThread)
import Herd.Simulate.Play
import Herd.Simulate.ParWorker (newOutbox, outboxFd, startParWorker, takePosted)
import Herd.Simulate.Wheel
import Herd.Transport
import Herd.Transport.Tcp (connectTcp)
import Herd.Core.Wire
import Herd.Wire.Scratch (newScratch)
import Herd.Node (SimulatedHost (..))
import Herd.Node.Join
import Herd.Core.Worker.Step
import Herd.Core.Agent.Evolve (HostEvent (..), newHostPopulation)
import Herd.Core.Agent.Steal (emptyHostSteals)
import Herd.Core.Wire.HostCall (decodeHostCall, hostCallSlot)

-- | Open the host link, ask the master to number every worker, then serve
-- them all from this thread until the last is gone. Throws (naming the
-- reason) if the host cannot join.
runSimulatedHost :: SimulatedHost -> IO ()
runSimulatedHost opts = runInUnboundThread $ do
  -- unbound: the workers' threads ("Herd.Simulate.ParWorker") and the
  -- loop hand the capability to each other at every message, which from
  -- the bound main thread costs an OS thread switch each time
  beginSimulatedHost
  build <- buildIdentity
  let where_ = simHost opts ++ ":" ++ show (simPort opts)
      hello = WorkerHello protocolVersion build (fromIntegral (simHostPid opts)) (T.pack (simHostName opts))
                          (T.pack (simGroup opts)) HostLink noCpu
  conn <- connectTcp (simHost opts) (simPort opts)
  joined <- joinMaster (simSecret opts) mempty build where_ hello conn
  j <- case joined of
    Left why -> closeConnection conn >> throwIO (JoinRefused why)
    Right j -> pure j
  _ <- setLiveness (joinedLiveness j) conn
  -- the host's collections would otherwise first-touch their pages during
  -- the calls, while the master waits for the host's answers
  reserveHeap (heapReserveBytes Nothing (simWorkers opts))
  sender <- newSender (hostLinkPolicy (joinedMaxFrame j) (joinedPolicy j)) (sendRawParts conn)
  bracket epollCreate epollClose $ \ep -> flip finally (closeConnection conn) $ do
    box <- newOutbox
    host <- Host conn sender <$> newIORef (simWorkers opts) <*> newIORef IM.empty <*> newIORef (newWheel 1e-4)
                 <*> newIORef IS.empty <*> pure ep <*> newScratch <*> newIORef M.empty <*> newIORef M.empty <*> newIORef M.empty
                 <*> newIORef 0 <*> newIORef newHostPopulation <*> newIORef False <*> pure box
                 <*> newIORef emptyHostSteals
    fds <- connWaitFds conn
    forM_ fds $ \fd -> epollAdd ep fd linkTag False
    -- unwatched, the workers' threads would never be heard
    added <- epollAdd ep (outboxFd box) outboxTag False
    when (added < 0) $ systemCallFailed "epoll_ctl" (negate added)
    forM_ [1 .. simWorkers opts] $ \token ->
      hostControl host (AddWorker (fromIntegral token) (fromIntegral (simHostPid opts)) noCpu)
    flushIdle sender
    serveAll host j


-- The tags of the loop's epoll set: the host link, the workers' threads.
linkTag, outboxTag :: Int
linkTag = 0
outboxTag = 1

-- The event loop: fire due timers, wait for links or the next timer, read
-- what came, send what the round produced.
serveAll :: Host -> Joined -> IO ()
serveAll host j = allocaArray 256 $ \tags -> do
  let loop = do
        live <- readIORef (hSims host)
        pending <- readIORef (hPending host)
        if IM.null live && pending == 0 then pure () else do
          fireDue host
          -- the agent reports what its workers evolved this round, in one message
          hosted <- readIORef (hHosted host)
          when hosted (agentStep host RoundEnded)
          flushAll host
          now <- monotonicSeconds
          next <- nextDeadline <$> readIORef (hWheel host)
          let wait = maybe 1 (\d -> max 0 (d - now)) next
          n <- if wait >= 0.001 then epollWait (hEpoll host) tags 256 (floor (wait * 1000))
               else do
                 -- epoll waits in milliseconds: a shorter wait sleeps, then looks
                 when (wait > 0) $ sleepOsThread wait
                 epollPoll (hEpoll host) tags 256
          when (n < 0 && n /= -4) $ systemCallFailed "epoll_wait" (negate n)
          ready <- if n > 0 then peekArray n tags else pure []
          -- what this round reads came now (one clock read per round)
          when (n > 0) $ monotonicSeconds >>= writeIORef (hClock host)
          when (fromIntegral outboxTag `elem` ready) $ takePosted (hOutbox host) >>= mapM_ (posted host)
          gone <- if fromIntegral linkTag `notElem` ready then pure Nothing else readLink host j
          maybe loop (\why -> when (not (null why)) (logToStderr ("herd simulated host: " ++ why))) gone
  loop

-- Read every whole frame the host link has, and hand each entry to its
-- worker; 'Just' why when the link is done (empty: the master closed it).
readLink :: Host -> Joined -> IO (Maybe String)
readLink host j = do
  let conn = hConn host
      cap = joinedMaxFrame j + 1024
      -- a short read empties the (level-triggered) link: no receive
      -- after it just to hear "nothing ready"
      drain emptied = do
        frame <- takeBufferedFrame cap conn
        case frame of
          Just packet -> case splitPacket (cap `div` 5) packet of
            Left why -> pure (Left ("bad packet from master: " ++ why))
            Right entries -> mapM_ (entry . decodeEntry) entries >> drain emptied
          Nothing | emptied -> pure (Right ())
                  | otherwise -> do
            (got, short) <- recvAvailableShort conn
            case got of
              0 -> pure (Left "")   -- the master closed the link
              -1 -> pure (Right ())
              _ -> drain short
      entry (Left why) = logToStderr ("herd simulated host: bad entry from master: " ++ why)
      entry (Right (slot, body))
        | slot == controlSlot = case decodeHostControl body of
            Right (WorkerAdded _ wid) -> added (fromIntegral wid)
            Right (StopWorker wid) -> dropSim host (fromIntegral wid) ""
            Right CloseHost -> writeIORef (hSims host) IM.empty >> writeIORef (hPending host) 0
            Right (HostShare n total piece) -> do
              let kept = B.copy piece
              _ <- evaluate kept
              modifyIORef' (hShares host) (M.insertWith (++) n [(total, kept)])
              sims <- IM.toList <$> readIORef (hSims host)
              forM_ sims $ \(tag, s) -> deliver host tag s (SharePart n total kept)
            Right (HostUnshare n) -> modifyIORef' (hShares host) (M.delete n)
            -- simulated workers share one process, whose memory no limit describes
            Right (HostMemoryLimit _) -> pure ()
            Right other -> logToStderr ("herd simulated host: unexpected " ++ show other)
            Left why -> logToStderr ("herd simulated host: bad control message: " ++ why)
        | slot == hostCallSlot = case decodeHostCall body of
            Right m -> writeIORef (hHosted host) True >> agentStep host (MasterSaid m)
            Left why -> logToStderr ("herd simulated host: bad host call message: " ++ why)
        | otherwise = withSim host (fromIntegral slot) $ \s ->
            case splitPacket (joinedMaxFrame j `div` 5) body of
              Left why -> dropSim host (fromIntegral slot) ("bad packet from master: " ++ why)
              Right msgs -> deliverAll (fromIntegral slot) s msgs
      deliverAll _ _ [] = pure ()
      deliverAll tag s (m : ms) = case decodeToWorker m of
        Left why -> dropSim host tag ("bad message from master: " ++ why)
        Right Shutdown -> dropSim host tag ""
        Right msg -> do
          readIORef (hClock host) >>= writeIORef (sFedAt s)
          deliver host tag s msg
          deliverAll tag s ms
      added wid = do
        let mine = j { joinedId = fromIntegral wid }
            -- its packets become entries of the host link's ('Herd.Master.HostLink')
            out parts = mapM_ (uncurry (sendMessageHeld (hSender host) Bulk)) (sentPacketEntry (fromIntegral wid) parts)
        s <- Sim mine <$> newIORef noBatch <*> newIORef (newHeld (fromIntegral wid)) <*> newIORef (Farm False Seq.empty)
                      <*> newSender (joinedPolicy j) out <*> newIORef 0 <*> newAssembly
                      <*> startParWorker (hOutbox host) wid
        modifyIORef' (hSims host) (IM.insert wid s)
        modifyIORef' (hPending host) (subtract 1)
        agentStep host (LocalJoined (fromIntegral wid))
        -- the shared values the host holds, before anything the master sends it
        held <- readIORef (hShares host)
        forM_ (M.toList held) $ \(n, pieces) ->
          forM_ (reverse pieces) $ \(total, piece) -> deliver host wid s (SharePart n total piece)
  r <- try (drain False)
  case r of
    Left (e :: SomeException) -> pure (Just ("its link broke: " ++ displayException e))
    Right (Left why) -> pure (Just why)
    Right (Right ()) -> pure Nothing

-- Send what each worker's packet buffer holds at the end of the round.
flushAll :: Host -> IO ()
flushAll host = do
  dirty <- atomicModifyIORef' (hDirty host) (\d -> (IS.empty, IS.toList d))
  r <- try $ do
    forM_ dirty $ \tag -> withSim host tag $ \s -> flushIdle (sSender s)
    -- then the host link's packet, which gathers them
    flushIdle (hSender host)
  case r of
    Right () -> pure ()
    Left (e :: SomeException) -> do
      logToStderr ("herd simulated host: cannot send to the master: " ++ displayException e)
      -- the link is lost, and every worker with it
      writeIORef (hSims host) IM.empty
      writeIORef (hPending host) 0
