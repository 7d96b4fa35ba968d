{-# LANGUAGE ScopedTypeVariables #-}
-- | The imperative shell around the master's core ("Herd.Core.Master"):
-- it owns the core's state behind one lock, steps it with events from the
-- reader, the accepting threads and callers, and carries out its commands
-- ("Herd.Master.Execute").
--
-- Promises:
--
-- * INV-ONE-WRITER: bytes reach a link only through its packet sender
--   (and writer thread): the shell writes it holding its lock, and a
--   stream's feeder appends its input elements to the sender its opening
--   returned (the sender's own lock keeps whole messages in order);
--   nothing else in herd writes to a worker.
-- * INV-SERIAL: the core is stepped by one thread at a time, so both
--   readers drive exactly the same machine; a command that fails (an
--   argument that throws, a result that does not decode, a send that
--   breaks) is fed back as an event, never lost.
-- * INV-CALLER-CODE: no caller's code runs under the lock: a farm's
--   results go to its caller's thread undecoded ('FarmNews'), and an
--   evolve session's answer is a put into its caller's variable.
-- * Sends never block the shell: what the kernel does not take at once
--   goes to the link's writer thread; a worker with more than 64 MiB
--   waiting is dropped.
module Herd.Master.Shell
  ( Shell
  , newShell
  , setReader
  , shellStep
  , shellRegister
  , joinLink
  , addWorkerLink
  , deliver
  , deliverEvents
  , packetEvents
  , afterRound
  , shutdownShell
  , shellWorkers
  , shellDeparted
  , shellCore
  , shellPeers
  , shellCounters
  , bumpCounter
  , Registration (..)
  , LossHooks (..)
  , setLossHooks
  , shellLossHooks
  , shellAwaitedChanged
  , shellAwaited
  , shellSetMemoryLimit
  , shellRecordLocalMemory
  , shellRecordHostMemory
  , shellMemory
  , HostHandle (..)
  , shellHosts
  , shellRecordHosts
  , shellHostView
  , shellShare
  , shellUnshare
  , shellLinkCount
  , shellRelayCounts
  , shellRemovePartsDir
  ) where

import Control.Concurrent (yield)
import Control.Concurrent.MVar
import Control.Concurrent.STM
import Control.Monad (foldM, forM_, void, when)
import qualified Data.ByteString as B
import qualified Data.Set as S
import Data.Maybe (isNothing)
import Data.Word (Word64)
import Data.IORef
import qualified Data.Map.Strict as M
import Control.Exception (IOException, evaluate, try)
import System.Directory (removeDirectoryRecursive)
import Herd.Master.StepTrace (traceSlowStep)
import Herd.Sys.Clock (monotonicSeconds)
import Herd.Settings
import Herd.Core.Master
import Herd.Core.Master.Events
import Herd.Master.Execute
import Herd.Master.Relay (isRelayed, relay)
import Herd.Master.Link
import Herd.Reader
import Herd.Master.ShellState
import Herd.Core.Fault (LinkFault (..), renderFault)
import Herd.Master.Types
import Herd.Sys.Trace (traceHerd, tracing)
import Herd.Packet
import Herd.Core.Farm (WorkerId)
import Herd.Transport
import Herd.Core.Wire

-- | Step the core with these events. With 'True' every link with buffered
-- messages is flushed afterwards; with 'False' they wait for the reader's
-- round or the packet timer.
shellStep :: Shell -> Bool -> [Event] -> IO ()
shellStep sh flushNow = shellRegister sh flushNow NoRegistration

-- | Register a caller's answer and step the core, under one hold of the lock.
shellRegister :: Shell -> Bool -> Registration -> [Event] -> IO ()
-- INV-SERIAL: every step of the core happens under this one lock
shellRegister sh flushNow reg events = void (stepUnderLock sh flushNow reg events)

-- Register and step under the lock; whether farm news went to callers.
-- With 'False' the flush waits for the reader's round, but farm news is
-- handed over every 'newsHandOver' pieces: left for the end of a round
-- (with chunking off, thousands of one-result packets), results stayed
-- live through collections, and copying them cost more than the switches;
-- handed over every packet, the switches cost more.
stepUnderLock :: Shell -> Bool -> Registration -> [Event] -> IO Bool
stepUnderLock sh flushNow reg events = modifyMVar (shState sh) $ \ss0 -> do
  let ss = case reg of
        RegisterFarm jid spec news -> ss0 { ssFarms = M.insert jid (spec, news) (ssFarms ss0) }
        RegisterSession sid answer -> ss0 { ssSessions = M.insert sid answer (ssSessions ss0) }
        ForgetSession sid -> ss0 { ssSessions = M.delete sid (ssSessions ss0) }
        RegisterExchange xid answer -> ss0 { ssExchanges = M.insert xid answer (ssExchanges ss0) }
        ForgetExchange xid -> ss0 { ssExchanges = M.delete xid (ssExchanges ss0) }
        RegisterStream sid ends reply -> ss0 { ssStreams = M.insert sid ends (ssStreams ss0)
                                             , ssOpening = M.insert sid reply (ssOpening ss0) }
        Forget jid sid -> ss0 { ssFarms = maybe id M.delete jid (ssFarms ss0)
                              , ssStreams = maybe id M.delete sid (ssStreams ss0) }
        NoRegistration -> ss0
  t <- monotonicSeconds
  ss1 <- runEvents sh t ss events
  -- a reader's packets wait for the end of its round (afterRound): stream
  -- output is handed over once per round, not once per packet, so a
  -- caller is woken once for many elements
  let news = ssNewsCount ss1
  if flushNow then (\s -> (s, news > 0)) <$> (handOver ss1 >>= flushTouched)
  else if news >= newsHandOver then (\s -> (s, True)) <$> handOverFarms ss1
  else pure (ss1, False)

-- | What the reader runs after each round: hand the callers of farms and
-- streams what the round received, let them run, and flush what it
-- buffered.
afterRound :: Shell -> IO ()
afterRound sh = do
  handed <- modifyMVar (shState sh) $ \ss -> do
    ss' <- handOver ss >>= flushTouched
    pure (ss', ssNewsCount ss > 0)
  when handed yield

-- | Pieces of farm news a reader gathers before it hands them over.
newsHandOver :: Int
newsHandOver = 64

-- | A worker passed the handshake: set up its sender and writer, start
-- reading it, and tell the core.
joinLink :: Shell -> WorkerId -> Connection -> WorkerInfo -> IO ()
joinLink sh wid conn info = do
  received <- newIORef noPeerStats
  handle <- openLinkWith (packetPolicyOf (shConfig sh)) (shConfig sh) (shShared sh) conn (\why -> shellStep sh True [LinkDown wid (PeerLost why)])
  reader <- readIORef (shReader sh)
  let link = WorkerLink (lhSender handle) (lhBacklog handle) Nothing
                        (readerRemove reader wid conn >> closeConnection conn >> stopWriting handle)
                        (stopWriting handle)
  added <- addWorkerLink sh wid info link received $
    readerAdd reader wid conn (deliver sh wid conn received) (\why -> shellStep sh True [LinkDown wid (PeerLost why)])
  when (not added) $ stopWriting handle >> closeConnection conn

-- | Tell the core of a worker whose link is set up, under the lock, after
-- the action (which starts reading it); 'False', doing nothing, when the
-- cluster is stopping.
addWorkerLink :: Shell -> WorkerId -> WorkerInfo -> WorkerLink -> IORef PeerStats -> IO () -> IO Bool
addWorkerLink sh wid info link received startReading =
  modifyMVar (shState sh) $ \ss ->
    if coreStopping (ssCore ss) then pure (ss, False) else do
      atomically $ do
        modifyTVar' (shWorkers sh) (M.insert wid info)
        modifyTVar' (shPeers sh) (M.insert wid (wlSender link, received))
      startReading
      -- a worker on a link of its own hears its budget for shared values
      -- from the master, before any value (a host agent tells its own)
      (limit, _) <- readTVarIO (shMemory sh)
      case (wlHost link, limit) of
        (Nothing, Just l) -> void (trySync (sendHoldBudget link l))
        _ -> pure ()
      -- a worker on this host with a link of its own hands large parts
      -- to the others on this host in files, not through the master
      case (wlHost link, shPartsDir sh) of
        (Nothing, Just dir) | infoTransport info `elem` [ShmTransport, UnixTransport] ->
          void (trySync (sendPartsDirectory link dir))
        _ -> pure ()
      -- every worker hears the deadline per task before its first batch
      forM_ (configTaskDeadline (shConfig sh)) $ \d -> trySync (sendTaskDeadline link d)
      t <- monotonicSeconds
      ss' <- runEvents sh t ss { ssLinks = M.insert wid link (ssLinks ss) } [LinkUp wid] >>= handOver >>= flushTouched
      pure (ss', True)

-- | One packet from a worker: check its structure, count it, and step
-- the core with its messages ('Left': it was bad, and the core was told).
deliver :: Shell -> WorkerId -> Connection -> IORef PeerStats -> OnPacket
deliver sh wid conn received packet = do
  decoded <- packetEvents sh wid conn received packet
  case decoded of
    Left fault -> do
      -- a broken protocol, not a death: nothing that ran there is charged
      shellStep sh True [LinkBroken wid fault]
      pure (Left (renderFault fault))
    Right events -> do
      -- the callers that were handed farm news run before the next packet
      handed <- stepUnderLock sh False NoRegistration events
      when handed yield
      pure (Right ())

-- | Step the core with events of many workers' packets at once (a host
-- link's packet): one hold of the lock for them all.
deliverEvents :: Shell -> [Event] -> IO ()
deliverEvents _ [] = pure ()
deliverEvents sh events = do
  handed <- stepUnderLock sh False NoRegistration events
  when handed yield

-- | A worker's packet as the core's events, checked and counted; a packet
-- that fails the packet layer's checks is the fault returned.
packetEvents :: Shell -> WorkerId -> Connection -> IORef PeerStats -> B.ByteString -> IO (Either LinkFault [Event])
packetEvents sh wid conn received packet =
  case splitPacket (configMaxFrameBytes (shConfig sh) `div` 5) packet of
    Left why -> pure (Left (BadPacket (connPeer conn) why))
    Right msgs -> do
      let n = length msgs
          events = decodeAll msgs
      modifyIORef' received (countReceived n (sum (map valuesOf events)) (B.length packet))
      traceHerd ("herd packet in from worker " ++ show wid ++ ": " ++ show n ++ " messages, "
                 ++ show (B.length packet) ++ " bytes")
      when tracing $ forM_ events $ \ev -> case ev of
        Received _ (BatchDone bid ns) ->
          traceHerd ("herd batch " ++ show bid ++ " done by worker " ++ show wid ++ ", busy " ++ show (ns `div` 1000) ++ " us")
        _ -> pure ()
      bumpCounter sh (\c -> c { countWorkerMessages = countWorkerMessages c + n })
      pure (Right events)
  where
    valuesOf ev = case ev of
      Received _ (Results k _) -> fromIntegral k
      Received _ (StreamOut _ k _) -> fromIntegral k
      _ -> 1
    decodeAll [] = []
    decodeAll (m : ms) = case decodeFromWorker m of
      Right msg -> Received wid msg : decodeAll ms
      Left why -> [LinkBroken wid (BadMessage (connPeer conn) why)]

-- | Stop: answer every caller, ask every worker to stop, and let the
-- writers drain.
shutdownShell :: Shell -> IO ()
shutdownShell sh = do
  shellStep sh True [Stop]
  links <- ssLinks <$> readMVar (shState sh)
  mapM_ wlStopWriting (M.elems links)
  hosts <- readTVarIO (shHosts sh)
  mapM_ hostClose (M.elems hosts)

-- | Remove the directory workers on this host handed parts in (after the
-- shell stopped, however that went).
shellRemovePartsDir :: Shell -> IO ()
shellRemovePartsDir sh = forM_ (shPartsDir sh) $ \dir -> try (removeDirectoryRecursive dir) >>= \r -> case r of
  Left (_ :: IOException) -> pure ()
  Right () -> pure ()

-- | What the shell asks now of whoever restarts lost workers (so another
-- replacer can add its own count).
shellLossHooks :: Shell -> IO LossHooks
shellLossHooks sh = readIORef (shLosses sh)

-- | Tell the shell who replaces lost workers.
setLossHooks :: Shell -> LossHooks -> IO ()
setLossHooks sh = writeIORef (shLosses sh)

-- | How many lost workers are being replaced now.
shellAwaited :: Shell -> IO Int
shellAwaited sh = readIORef (shLosses sh) >>= lossAwaited

-- | The number of workers being replaced changed: tell the core (read
-- under the lock, so the core always ends with the latest number).
shellAwaitedChanged :: Shell -> IO ()
shellAwaitedChanged sh = modifyMVar_ (shState sh) $ \ss -> do
  n <- readIORef (shLosses sh) >>= lossAwaited
  t <- monotonicSeconds
  runEvents sh t ss [WorkersAwaited n] >>= handOver >>= flushTouched

-- Step the core through the events and every event its commands feed back.
runEvents :: Shell -> Double -> ShellState -> [Event] -> IO ShellState
runEvents _ _ ss [] = pure ss
runEvents sh t ss (LinkDown w why : es) | M.member w (ssLinks ss) = do
  -- a worker that will be replaced is awaited before its loss is stepped,
  -- so a job does not fail for want of workers meanwhile
  hooks <- readIORef (shLosses sh)
  info <- M.lookup w <$> readTVarIO (shWorkers sh)
  mapM_ (lossClaim hooks) info
  n <- lossAwaited hooks
  ss1 <- runEvents1 sh t ss (WorkersAwaited n) []
  runEvents1 sh t ss1 (LinkDown w why) es
runEvents sh t ss (Received _ msg : es) | isRelayed msg = relay sh ss msg >>= \ss' -> runEvents sh t ss' es
runEvents sh t ss (e : es) = runEvents1 sh t ss e es

runEvents1 :: Shell -> Double -> ShellState -> Event -> [Event] -> IO ShellState
runEvents1 sh t ss e es = do
  let (core', cmds) = step t e (ssCore ss)
      run = foldM (execute sh) (ss { ssCore = core' }, []) cmds
      decide = evaluate core' >> mapM_ evaluate cmds
  (ss', fed) <- if tracing then traceSlowStep e decide run else run
  runEvents sh t ss' (reverse fed ++ es)

-- | Set the memory limit of the workers on links of their own, and tell
-- each of them, now, its budget for the shared values it keeps in memory
-- (those linking later hear it as they link). A host agent tells its own.
shellSetMemoryLimit :: Shell -> Maybe Int -> IO ()
shellSetMemoryLimit sh limit = do
  atomically (modifyTVar' (shMemory sh) (\(_, m) -> (limit, m)))
  forM_ limit $ \l -> withMVar (shState sh) $ \ss ->
    forM_ [ link | link <- M.elems (ssLinks ss), Nothing <- [wlHost link] ] $ \link ->
      trySync (sendHoldBudget link l)

-- | The latest resident-set readings of the workers this master watches
-- itself (those in the set); readings of workers gone are dropped, and
-- those host agents reported for their own workers are kept.
shellRecordLocalMemory :: Shell -> S.Set WorkerId -> M.Map WorkerId Int -> IO ()
shellRecordLocalMemory sh watched readings = atomically $ do
  workers <- readTVar (shWorkers sh)
  modifyTVar' (shMemory sh) $ \(l, m) ->
    (l, M.union readings (M.filterWithKey (\w _ -> M.member w workers && not (S.member w watched)) m))

-- | Readings a host agent reported for its own workers.
shellRecordHostMemory :: Shell -> M.Map WorkerId Int -> IO ()
shellRecordHostMemory sh known = atomically $ modifyTVar' (shMemory sh) (\(l, m) -> (l, M.union known m))

-- | The memory limit of workers on links of their own, and every worker's
-- latest resident-set reading in bytes.
shellMemory :: Shell -> IO (Maybe Int, M.Map WorkerId Int)
shellMemory sh = readTVarIO (shMemory sh)

-- | The open host agents' links.
shellHosts :: Shell -> IO [(Int, HostHandle)]
shellHosts sh = M.toList <$> readTVarIO (shHosts sh)

-- | Each host's herd workers and (on the master's host) the memory limit
-- each may hold, as the memory watch shared them out.
shellRecordHosts :: Shell -> [(String, Int, Maybe Int)] -> IO ()
shellRecordHosts sh = atomically . writeTVar (shHostView sh)

-- | What 'shellRecordHosts' last recorded.
shellHostView :: Shell -> IO [(String, Int, Maybe Int)]
shellHostView sh = readTVarIO (shHostView sh)

-- | Share a value under this number: every worker, now and later, is sent
-- its encoding ("Herd.Core.Shared"); the bytes count towards what the
-- master holds for its workers.
shellShare :: Shell -> Word64 -> B.ByteString -> IO ()
shellShare sh n bytes = do
  atomically $ do
    modifyTVar' (shShared sh) (+ B.length bytes)
    modifyTVar' (shShareSizes sh) (M.insert n (B.length bytes))
  shellStep sh True [ShareValue n bytes]

-- | Drop the shared value of this number everywhere (one not shared, or
-- dropped already, is no error).
shellUnshare :: Shell -> Word64 -> IO ()
shellUnshare sh n = do
  shellStep sh True [Unshare n]
  atomically $ do
    size <- M.findWithDefault 0 n <$> readTVar (shShareSizes sh)
    modifyTVar' (shShareSizes sh) (M.delete n)
    modifyTVar' (shShared sh) (subtract size)

-- | How many links the master keeps open: one per host agent, and one
-- per worker linked directly.
shellLinkCount :: Shell -> IO Int
shellLinkCount sh = do
  direct <- M.size . M.filter (\l -> isNothing (wlHost l)) . ssLinks <$> readMVar (shState sh)
  hosts <- M.size <$> readTVarIO (shHosts sh)
  pure (direct + hosts)

-- | Shared values sent so far and reduction parts relayed, each as (count, bytes).
shellRelayCounts :: Shell -> IO ((Int, Int), (Int, Int), (Int, Int))
shellRelayCounts sh = (\ss -> (pair (ssShareSends ss), pair (ssRelayed ss), pair (ssHanded ss))) <$> readMVar (shState sh)
  where pair (Sends k b) = (k, b)
