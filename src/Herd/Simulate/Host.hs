{-# LANGUAGE ScopedTypeVariables #-}
-- | A simulated host: one process playing many workers, as Kubernetes'
-- hollow nodes do, so that a 2-core machine can show how the master
-- behaves with thousands of workers.
--
-- Each simulated worker has its own TCP connection to the master, its own
-- handshake and proof of the secret ("Herd.Worker.Join"), its own worker
-- number, and runs the worker's own steps: the farm's pure step
-- ("Herd.Worker.Step") and the evolve holder's ("Herd.Evolve.Held"),
-- calling the real task and evolve functions. Only the time is simulated:
-- what a function declares through 'Herd.Simulate.simulatedWork' is not
-- slept but becomes a timer, and the answer leaves when it fires. While a
-- farm run's timer is pending, that worker's later messages wait, as they
-- would behind a real computation; evolve states go on being given back at
-- once. One thread serves every worker: an epoll wait on all the links,
-- bounded by the next timer of one timer wheel ("Herd.Simulate.Wheel").
-- Stream processes are refused ('Herd.Wire.StreamAborted').
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
import qualified Data.ByteString as B
import Data.IORef
import qualified Data.IntMap.Strict as IM
import qualified Data.IntSet as IS
import qualified Data.Map.Strict as M
import Data.Sequence (Seq, (|>))
import qualified Data.Sequence as Seq
import qualified Data.Text as T
import Foreign.C.Types (CInt (..), CUInt (..))
import Foreign.Marshal.Array (allocaArray, peekArray)
import Herd.Auth (Secret)
import Herd.Base (Encoder (..), encodeBytes, encoderBytes)
import Herd.BuildId (buildIdentity)
import Herd.Clock (monotonicSeconds)
import Herd.Closure (cachedLookup)
import Herd.Epoll
import Herd.Evolve.Function (EvolveRunner, lookupEvolver)
import Herd.Evolve.Held
import Herd.Evolve.Holder (runJob)
import Herd.Log (logToStderr)
import Herd.Packet (packetOf, splitPacket)
import Herd.Packet.Policy (PacketPolicy (..))
import Herd.Simulate (beginSimulatedHost, takeSimulatedCost)
import Herd.Simulate.Wheel
import Herd.Task (Runner (..), TaskRef (..), lookupRunner)
import Herd.Transport
import Herd.Transport.Tcp (connectTcp)
import Herd.Wire
import Herd.Wire.Scratch (ChunkOutcome (..), Scratch, newScratch, resultsEncoder, resultsFitting, scratchCount)
import Herd.Worker.Join
import Herd.Worker.Step

-- | What a simulated host needs.
data SimulatedHost = SimulatedHost
  { simHost    :: String  -- ^ the master's host
  , simPort    :: Int     -- ^ and TCP port
  , simWorkers :: Int     -- ^ workers to play
  , simGroup   :: String  -- ^ the launch they belong to, reported in each hello
  , simSecret  :: Secret
  , simHostPid :: Int     -- ^ reported as each worker's process
  , simHostName :: String -- ^ reported as each worker's host
  }

-- A farm run's timer is pending ('True'); the messages that came after
-- it wait, oldest first.
data Farm = Farm !Bool !(Seq ToWorker)

-- One simulated worker.
data Sim = Sim
  { sConn    :: !Connection
  , sJoined  :: !Joined
  , sBatches :: !(IORef (Batches Runner))
  , sHeld    :: !(IORef (Held EvolveRunner))
  , sFarm    :: !(IORef Farm)
  , sOut     :: !(IORef [Encoder])  -- ^ to send at the end of the round, newest first
  }

-- A timer's event: a worker's evolve job or farm run is done.
data Due
  = EvolveDue !Int !Finished
  | FarmDue !Int ![Encoder] !Outcome

-- The host's state, touched only by its one thread.
data Host = Host
  { hSims     :: !(IORef (IM.IntMap Sim))
  , hWheel    :: !(IORef (Wheel Due))
  , hDirty    :: !(IORef IS.IntSet)
  , hEpoll    :: !Epoll
  , hScratch  :: !Scratch
  , hRunners  :: !(IORef (M.Map TaskRef (Either String Runner)))
  , hEvolvers :: !(IORef (M.Map TaskRef (Either String EvolveRunner)))
  }

foreign import ccall safe "usleep" c_usleep :: CUInt -> IO CInt

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
        joined <- joinMaster (simSecret opts) build where_ hello conn
        case joined of
          Left why -> closeConnection conn >> throwIO (userError why)
          Right j -> do
            _ <- setLiveness (joinedLiveness j) conn
            Sim conn j <$> newIORef noBatch <*> newIORef (newHeld (joinedId j)) <*> newIORef (Farm False Seq.empty)
                       <*> newIORef []
  -- a few handshakes at a time: the master bounds those pending
  sims <- concat <$> mapM (mapConcurrently joinOne) (groupsOf 16 [1 .. simWorkers opts])
  bracket epollCreate epollClose $ \ep -> do
    host <- Host <$> newIORef (IM.fromList (zip [0 ..] sims)) <*> newIORef (newWheel 1e-4) <*> newIORef IS.empty
                 <*> pure ep <*> newScratch <*> newIORef M.empty <*> newIORef M.empty
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
                 when (wait > 0) $ () <$ c_usleep (ceiling (wait * 1e6))
                 epollPoll (hEpoll host) tags 256
          when (n < 0 && n /= -4) $ ioError (userError ("epoll_wait failed (errno " ++ show (negate n) ++ ")"))
          ready <- if n > 0 then peekArray n tags else pure []
          forM_ ready $ \tag -> readLink host (fromIntegral tag)
          loop
  loop

-- Handle every timer whose tick has come.
fireDue :: Host -> IO ()
fireDue host = do
  now <- monotonicSeconds
  due <- atomicModifyIORef' (hWheel host) (\w -> let (ds, w') = expire now w in (w', ds))
  forM_ due $ \d -> case d of
    EvolveDue tag fin -> withSim host tag $ \s -> do
      stateRef (sHeld s) (heldFinish fin) >>= mapM_ (say host tag s)
      pumpEvolve host tag s
    FarmDue tag results outcome -> withSim host tag $ \s -> do
      mapM_ (out host tag) results
      verdicts <- stateRef (sBatches s) (applied now outcome)
      Farm _ inbox <- readIORef (sFarm s)
      writeIORef (sFarm s) (Farm False Seq.empty)
      mapM_ (verdict host tag s) verdicts
      -- what waited behind the run, in order (a new run queues the rest again)
      mapM_ (deliver host tag s) inbox

-- Read every whole frame a link has.
readLink :: Host -> Int -> IO ()
readLink host tag = withSim host tag $ \s -> do
  let cap = joinedMaxFrame (sJoined s)
      drain = do
        frame <- takeBufferedFrame cap (sConn s)
        case frame of
          Just packet -> case splitPacket (cap `div` 5) packet of
            Left why -> pure (Left ("bad packet from master: " ++ why))
            Right msgs -> deliverAll msgs >>= either (pure . Left) (const drain)
          Nothing -> do
            got <- recvAvailable (sConn s)
            case got of
              0 -> pure (Left "")   -- the master closed the link
              -1 -> pure (Right ())
              _ -> drain
      deliverAll [] = pure (Right ())
      deliverAll (m : ms) = case decodeToWorker m of
        Left why -> pure (Left ("bad message from master: " ++ why))
        Right Shutdown -> pure (Left "")
        Right msg -> deliver host tag s msg >> deliverAll ms
  r <- try drain
  case r of
    Left (e :: SomeException) -> dropSim host tag ("its link broke: " ++ displayException e)
    Right (Left why) -> dropSim host tag why
    Right (Right ()) -> pure ()

-- One message from the master to a simulated worker.
deliver :: Host -> Int -> Sim -> ToWorker -> IO ()
deliver host tag s msg = do
  Farm computing inbox <- readIORef (sFarm s)
  if computing then writeIORef (sFarm s) (Farm True (inbox |> msg)) else case msg of
    Ping n _ -> say host tag s (Pong n)
    RunBatch bid ref count -> do
      runner <- cachedLookup (hRunners host) lookupRunner ref
      now <- monotonicSeconds
      stateRef (sBatches s) (startBatch now bid runner (fromIntegral count) (refName ref)) >>= mapM_ (verdict host tag s)
    Args k bytes -> do
      now <- monotonicSeconds
      verdicts <- stateRef (sBatches s) (arguments now (fromIntegral k))
      forM_ verdicts $ \v -> case v of
        Apply r _ count -> runFarm host tag s r bytes count
        _ -> verdict host tag s v
    StreamOpen sid _ -> say host tag s (StreamAborted sid (T.pack "simulated workers do not run stream processes"))
    StreamIn {} -> pure ()
    StreamEnd _ -> pure ()
    StreamCredit _ _ -> pure ()
    StreamClose _ -> pure ()
    _ -> do
      found <- case msg of
        EvolveWith ref -> Just <$> cachedLookup (hEvolvers host) lookupEvolver ref
        _ -> pure Nothing
      stateRef (sHeld s) (heldMessage msg found) >>= mapM_ (say host tag s)
      pumpEvolve host tag s

-- Run a farm run's calls now; their results leave when its simulated
-- cost has passed (at once if it declared none).
runFarm :: Host -> Int -> Sim -> Runner -> B.ByteString -> Int -> IO ()
runFarm host tag s r bytes count = do
  _ <- takeSimulatedCost
  ran <- runnerChunk r (hScratch host) bytes count
  cost <- takeSimulatedCost
  n <- scratchCount (hScratch host)
  -- copied out of the scratch, which the next run reuses
  let room = max 64 (policyCapacity (joinedPolicy (sJoined s)) - 64)
      cut lo | lo >= n = pure []
             | otherwise = do
                 k <- resultsFitting (hScratch host) lo room
                 enc <- resultsEncoder (hScratch host) lo (lo + k) >>= encoderBytes
                 (encodeBytes enc :) <$> cut (lo + k)
  results <- cut 0
  let outcome = case ran of
        ChunkDone -> Computed
        ChunkUndecodable j why -> Undecodable j why
        ChunkThrew j why -> Threw j why
  now <- monotonicSeconds
  if cost <= 0
    then do
      mapM_ (out host tag) results
      stateRef (sBatches s) (applied now outcome) >>= mapM_ (verdict host tag s)
    else do
      writeIORef (sFarm s) (Farm True Seq.empty)
      modifyIORef' (hWheel host) (setTimer (now + cost) (FarmDue tag results outcome))

-- Start the worker's next evolve job if it has none in progress.
pumpEvolve :: Host -> Int -> Sim -> IO ()
pumpEvolve host tag s = do
  held <- readIORef (sHeld s)
  case heldTake held of
    Nothing -> pure ()
    Just (Left answer, held') -> writeIORef (sHeld s) held' >> say host tag s answer >> pumpEvolve host tag s
    Just (Right job, held') -> do
      writeIORef (sHeld s) held'
      _ <- takeSimulatedCost
      fin <- runJob (hEvolvers host) job
      cost <- takeSimulatedCost
      if cost <= 0
        then do
          stateRef (sHeld s) (heldFinish fin) >>= mapM_ (say host tag s)
          pumpEvolve host tag s
        else do
          now <- monotonicSeconds
          -- the master's estimates are of the simulated time
          let fin' = case fin of
                Children ns cs -> Children (ns + round (cost * 1e9)) cs
                other -> other
          modifyIORef' (hWheel host) (setTimer (now + cost) (EvolveDue tag fin'))

verdict :: Host -> Int -> Sim -> Verdict Runner -> IO ()
verdict host tag s v = case v of
  Reply _ m -> say host tag s m
  Broken why -> dropSim host tag why
  Apply {} -> dropSim host tag "a function call asked for outside a run of arguments"

-- Queue a message to the master.
say :: Host -> Int -> Sim -> FromWorker -> IO ()
say host tag _ m = out host tag (encodeFromWorker m)

out :: Host -> Int -> Encoder -> IO ()
out host tag enc = withSim host tag $ \s -> do
  modifyIORef' (sOut s) (enc :)
  modifyIORef' (hDirty host) (IS.insert tag)

-- Send what each worker queued this round, as few packets as the master's
-- packet size allows (one message each with chunking off).
flushAll :: Host -> IO ()
flushAll host = do
  dirty <- atomicModifyIORef' (hDirty host) (\d -> (IS.empty, IS.toList d))
  forM_ dirty $ \tag -> withSim host tag $ \s -> do
    encs <- reverse <$> atomicModifyIORef' (sOut s) (\e -> ([], e))
    let policy = joinedPolicy (sJoined s)
        packets | policyChunking policy = pack (policyCapacity policy - 4) encs
                | otherwise = map pure encs
    r <- try (forM_ packets $ \p -> packetOf p >>= sendFrameStrict (sConn s))
    case r of
      Left (e :: SomeException) -> dropSim host tag ("cannot send to the master: " ++ displayException e)
      Right () -> pure ()
  where
    pack _ [] = []
    pack room es = let (p, rest) = fill room es in p : pack room rest
    fill room (e@(Encoder n _) : es) = go (room - n - 4) [e] es
      where go left acc (x@(Encoder m _) : xs) | m + 4 <= left = go (left - m - 4) (x : acc) xs
            go _ acc xs = (reverse acc, xs)
    fill _ [] = ([], [])

-- Drop a worker: close its link (an empty reason: the master closed it).
dropSim :: Host -> Int -> String -> IO ()
dropSim host tag why = withSim host tag $ \s -> do
  unless' (null why) $ logToStderr ("herd simulated worker " ++ show (joinedId (sJoined s)) ++ ": " ++ why)
  fds <- try (connWaitFds (sConn s))
  either (\(_ :: SomeException) -> pure ()) (mapM_ (epollDel (hEpoll host))) fds
  modifyIORef' (hSims host) (IM.delete tag)
  _ <- try (closeConnection (sConn s)) :: IO (Either SomeException ())
  pure ()
  where unless' c act = if c then pure () else act

withSim :: Host -> Int -> (Sim -> IO ()) -> IO ()
withSim host tag act = IM.lookup tag <$> readIORef (hSims host) >>= mapM_ act

stateRef :: IORef a -> (a -> (a, b)) -> IO b
stateRef ref f = do
  (a', b) <- f <$> readIORef ref
  writeIORef ref $! a'
  pure b
