{-# LANGUAGE ScopedTypeVariables #-}
-- | A simulated host: one process playing many workers, as Kubernetes'
-- hollow nodes do, so that a 2-core machine can show how the master
-- behaves with thousands of workers.
--
-- Each simulated worker has its own TCP connection to the master, its own
-- handshake and proof of the secret ("Herd.Worker.Join"), its own worker
-- number, and runs the worker's own steps: the farm's pure step
-- ("Herd.Core.Worker.Step") and the evolve holder's ("Herd.Core.Evolve.Held"),
-- calling the real task and evolve functions. Only the time is simulated:
-- what a function declares through 'Herd.Simulate.simulatedWork' is not
-- slept but becomes a timer, and the answer leaves when it fires. While a
-- farm run's timer is pending, that worker's later messages wait, as they
-- would behind a real computation; evolve states go on being given back at
-- once. One thread serves every worker: an epoll wait on all the links,
-- bounded by the next timer of one timer wheel ("Herd.Simulate.Wheel").
-- Stream processes are refused ('Herd.Wire.StreamAborted'). Once its
-- workers have joined, a host touches a heap reserve ("Herd.HeapReserve")
-- as the master does.
--
-- Promise: a worker that breaks the protocol or loses its link is dropped
-- with a line on standard error, and the others go on; the host exits
-- when its last worker is gone, or when the process that started it dies.
module Herd.Simulate.Host
  ( SimulatedHost (..)
  , runSimulatedHost
  ) where

import Control.Concurrent.Async (mapConcurrently)
import Control.Exception
import Control.Monad (forM_, when)
import Data.IORef
import qualified Data.IntMap.Strict as IM
import qualified Data.IntSet as IS
import qualified Data.Map.Strict as M
import qualified Data.Sequence as Seq
import qualified Data.Text as T
import Foreign.Marshal.Array (allocaArray, peekArray)
import Herd.BuildId (buildIdentity)
import Herd.Clock (monotonicSeconds)
import Herd.Epoll
import Herd.Core.Evolve.Held
import Herd.HeapReserve (heapReserveBytes, reserveHeap)
import Herd.Packet (flushIdle, newSender, splitPacket)
import Herd.WorkCost (beginSimulatedHost, sleepOsThread)
import Herd.Simulate.Play
import Herd.Simulate.Wheel
import Herd.Transport
import Herd.Transport.Tcp (connectTcp)
import Herd.Core.Wire
import Herd.Wire.Scratch (newScratch)
import Herd.Worker (SimulatedHost (..))
import Herd.Worker.Join
import Herd.Core.Worker.Step

-- | Connect every worker, then serve them all from this thread until the
-- last is gone. Throws (naming the reason) if a worker cannot join.
runSimulatedHost :: SimulatedHost -> IO ()
runSimulatedHost opts = do
  beginSimulatedHost
  build <- buildIdentity
  let where_ = simHost opts ++ ":" ++ show (simPort opts)
      hello = WorkerHello protocolVersion build (fromIntegral (simHostPid opts)) (T.pack (simHostName opts))
                          (T.pack (simGroup opts)) False noCpu
      joinOne _ = do
        conn <- connectTcp (simHost opts) (simPort opts)
        joined <- joinMaster (simSecret opts) mempty build where_ hello conn
        case joined of
          Left why -> closeConnection conn >> throwIO (JoinRefused why)
          Right j -> do
            _ <- setLiveness (joinedLiveness j) conn
            -- the real worker's packet layer, over the same kind of link
            Sim conn j <$> newIORef noBatch <*> newIORef (newHeld (joinedId j)) <*> newIORef (Farm False Seq.empty)
                       <*> newSender (joinedPolicy j) (sendRawParts conn) <*> newIORef 0
  -- a few handshakes at a time: the master bounds those pending
  sims <- concat <$> mapM (mapConcurrently joinOne) (groupsOf 16 [1 .. simWorkers opts])
  -- the host's collections would otherwise first-touch their pages during
  -- the calls, while the master waits for the host's answers
  reserveHeap (heapReserveBytes Nothing (simWorkers opts))
  bracket epollCreate epollClose $ \ep -> do
    host <- Host <$> newIORef (IM.fromList (zip [0 ..] sims)) <*> newIORef (newWheel 1e-4) <*> newIORef IS.empty
                 <*> pure ep <*> newScratch <*> newIORef M.empty <*> newIORef M.empty <*> newIORef 0
    forM_ (zip [0 ..] sims) $ \(tag, s) -> do
      fds <- connWaitFds (sConn s)
      forM_ fds $ \fd -> epollAdd ep fd tag False
    serveAll host

groupsOf :: Int -> [a] -> [[a]]
groupsOf _ [] = []
groupsOf n xs = let (a, b) = splitAt n xs in a : groupsOf n b

-- The event loop: fire due timers, wait for links or the next timer, read
-- what came, send what the round produced.
serveAll :: Host -> IO ()
serveAll host = allocaArray 256 $ \tags -> do
  let loop = do
        live <- readIORef (hSims host)
        if IM.null live then pure () else do
          fireDue host
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
          forM_ ready $ \tag -> readLink host (fromIntegral tag)
          loop
  loop

-- Read every whole frame a link has.
readLink :: Host -> Int -> IO ()
readLink host tag = withSim host tag $ \s -> do
  let cap = joinedMaxFrame (sJoined s)
      -- a short read empties the (level-triggered) link: no receive
      -- after it just to hear "nothing ready"
      drain emptied = do
        frame <- takeBufferedFrame cap (sConn s)
        case frame of
          Just packet -> case splitPacket (cap `div` 5) packet of
            Left why -> pure (Left ("bad packet from master: " ++ why))
            Right msgs -> deliverAll msgs >>= either (pure . Left) (const (drain emptied))
          Nothing | emptied -> pure (Right ())
                  | otherwise -> do
            (got, short) <- recvAvailableShort (sConn s)
            case got of
              0 -> pure (Left "")   -- the master closed the link
              -1 -> pure (Right ())
              _ -> drain short
      deliverAll [] = pure (Right ())
      deliverAll (m : ms) = case decodeToWorker m of
        Left why -> pure (Left ("bad message from master: " ++ why))
        Right Shutdown -> pure (Left "")
        Right msg -> do
          readIORef (hClock host) >>= writeIORef (sFedAt s)
          deliver host tag s msg
          deliverAll ms
  r <- try (drain False)
  case r of
    Left (e :: SomeException) -> dropSim host tag ("its link broke: " ++ displayException e)
    Right (Left why) -> dropSim host tag why
    Right (Right ()) -> pure ()

-- Send what each worker's packet buffer holds at the end of the round.
flushAll :: Host -> IO ()
flushAll host = do
  dirty <- atomicModifyIORef' (hDirty host) (\d -> (IS.empty, IS.toList d))
  forM_ dirty $ \tag -> withSim host tag $ \s -> do
    r <- try (flushIdle (sSender s))
    case r of
      Left (e :: SomeException) -> dropSim host tag ("cannot send to the master: " ++ displayException e)
      Right () -> pure ()
