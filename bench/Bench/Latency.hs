-- | @herd bench latency@: the cost of one message between the master and
-- one worker over each transport, next to a floor measured in the same
-- run: the same mechanism driven from C with nothing on top
-- (@bench/cbits/pingpong.c@, built with the benchmark), its readers
-- waiting as herd's do (the adaptive spin of @cbits/herd_spin.h@, then a
-- blocking wait). A second C row blocks at once, without the spin: the
-- kernel's plain wake-up round trip.
--
-- herd's round trip is a 'Ping' through the master's packet layer, the
-- frame layer and the transport, answered by the worker's message loop
-- with a 'Pong'. The master reads the answer the way its loops do: on its
-- own OS thread, a spin and then a blocking call (sockets: @recv@; shared
-- memory: @poll@ on the eventfd). For comparison the table also shows the
-- same round trip with the master waiting through GHC's IO manager.
module Bench.Latency
  ( LatencyOptions (..)
  , runLatency
    -- * Shared with "Bench.Bandwidth"
  , cTransport
  , withOneWorker
  , RawLink (..)
  , Wait (..)
  , awaitPong
  ) where

import Control.Concurrent (runInUnboundThread)
import Control.Concurrent.STM (retry)
import Control.Exception (finally, throwIO, ErrorCall (..))
import Control.Monad (forM, forM_, when, unless)
import qualified Data.ByteString as B
import Data.List (sort)
import qualified Data.Vector.Unboxed as U
import qualified Data.Vector.Unboxed.Mutable as UM
import Data.Word (Word64)
import Foreign.C.Types (CInt (..), CLong (..))
import Foreign.Marshal.Array (allocaArray, peekArray)
import Foreign.Ptr (Ptr)
import Herd
import Herd.Config
import Herd.Sys.Clock (monotonicSeconds)
import Herd.Master (withRawWorker)
import Herd.Master.Link (LinkHandle (..), openLink, stopWriting)
import Herd.Packet (Sender, sendMessage, splitPacket)
import Herd.Core.Packet.Policy (Urgency (..))
import Herd.Core.Report
import Herd.Transport (Connection, awaitReadable, recvAvailable, recvFrame, spinNanos, takeBufferedFrame)

import Herd.Core.Wire (FromWorker (..), ToWorker (..), decodeFromWorker)
import Herd.Wire.Encode (encodeToWorker)
import System.IO
import Bench.Plot

foreign import ccall safe "herd_pingpong"
  c_pingpong :: CInt -> CInt -> CLong -> Ptr Double -> IO CInt
foreign import ccall safe "herd_wakeup_floor"
  c_wakeupFloor :: CInt -> CInt -> Ptr Double -> IO CInt

-- | Latency settings.
data LatencyOptions = LatencyOptions
  { latTransports :: [TransportKind]
  , latRounds     :: Int
  , latJson       :: Bool
  , latPlot       :: Maybe FilePath
  , latTls        :: Bool  -- ^ also measure tcp with TLS on ("herd-tls" rows)
  }

-- | How the master waits for the answer.
data Wait = Direct | IoManager
  deriving Eq

-- | The C floor's number for a transport.
cTransport :: TransportKind -> CInt
cTransport t = case t of
  TcpTransport -> 0
  UnixTransport -> 1
  ShmTransport -> 2

-- | One worker, unpinned like the C floor's child, on the given transport,
-- with a 1 MB nursery: the message loop then stays in cache (the default
-- 32 MB nursery, sized for allocation-heavy tasks, measured about 0.3 us
-- slower per round trip on shared memory).
withOneWorker :: Bool -> TransportKind -> (RawLink -> IO a) -> IO a
withOneWorker tls transport body = do
  let cfg = defaultConfig { configWorkers = Just 1, configTransport = Just transport, configTls = tls
                          , configPinning = NoPinning, configWorkerRtsOptions = ["-N1", "-A1m"] }
  -- the worker's link is handed to this thread alone: the master's core
  -- never reads or writes it, so what is timed is the link itself
  withRawWorker cfg $ \conn -> do
    -- the master's own send path for a link: packets leave from this
    -- thread when the kernel takes them, else through the link's writer
    l <- openLink cfg conn (\why -> hPutStrLn stderr ("the link broke: " ++ why))
    body (RawLink conn (lhSender l)) `finally` stopWriting l

-- | A worker's link read and written by the benchmark alone.
data RawLink = RawLink
  { rawConn   :: Connection
  , rawSender :: Sender
  }

-- | Read frames until the Pong with this number; anything else is an error.
awaitPong :: Wait -> Connection -> Word64 -> IO ()
awaitPong wait conn n = do
  frame <- case wait of
    Direct -> recvFrame maxBound conn
    IoManager -> viaIoManager
  case frame of
    Nothing -> throwIO (ErrorCall "the worker closed the link")
    Just packet -> case splitPacket 1000000 packet of
      Left why -> throwIO (ErrorCall ("bad packet: " ++ why))
      Right msgs -> do
        let pongs = [ m | Right (Pong m) <- map decodeFromWorker msgs ]
        unless (pongs == [n]) $ throwIO (ErrorCall ("expected pong " ++ show n ++ ", got " ++ show pongs))
  where
    viaIoManager = do
      ready <- takeBufferedFrame maxBound conn
      case ready of
        Just f -> pure (Just f)
        Nothing -> do
          got <- recvAvailable conn
          case got of
            0 -> pure Nothing
            -1 -> awaitReadable conn retry >> viaIoManager
            _ -> viaIoManager

-- Round trips in microseconds.
herdRoundTrips :: Wait -> RawLink -> Int -> IO (U.Vector Double)
herdRoundTrips wait l rounds = do
  samples <- UM.new rounds
  let ping i = sendMessage (rawSender l) Urgent (encodeToWorker (Ping (fromIntegral i) B.empty))
  -- warm up for half a second: code paths, caches, the spin's adaptation,
  -- and the first touch of fresh pages (a ring's megabyte, the master's
  -- 64 MB nursery), which faulted on every few round trips of a cold run
  start <- monotonicSeconds
  let warm i = do
        ping i >> awaitPong wait (rawConn l) (fromIntegral i)
        now <- monotonicSeconds
        when (now - start < 0.5 || i < 1000) $ warm (i + 1)
  warm (1 :: Int)
  forM_ [0 .. rounds - 1] $ \i -> do
    t0 <- monotonicSeconds
    ping (i + 100000000)
    awaitPong wait (rawConn l) (fromIntegral (i + 100000000))
    t1 <- monotonicSeconds
    UM.write samples i ((t1 - t0) * 1e6)
  U.freeze samples

-- The C floor's round trips, its readers spinning for this long before
-- they block (0: blocking at once).
cRoundTrips :: TransportKind -> Int -> Int -> IO (U.Vector Double)
cRoundTrips t spin rounds = allocaArray rounds $ \p -> do
  rc <- c_pingpong (cTransport t) (fromIntegral rounds) (fromIntegral spin) p
  when (rc /= 0) $ throwIO (ErrorCall ("the C floor failed on " ++ transportName t))
  U.fromList <$> peekArray rounds p

wakeups :: Int -> Int -> IO (U.Vector Double)
wakeups mechanism rounds = allocaArray rounds $ \p -> do
  rc <- c_wakeupFloor (fromIntegral mechanism) (fromIntegral rounds) p
  when (rc /= 0) $ throwIO (ErrorCall "the wake-up floor failed")
  U.fromList <$> peekArray rounds p

-- A percentile of samples sorted once ('ascending'): an index, not a sort
-- per percentile (which took minutes at a million rounds).
percentile :: Double -> U.Vector Double -> Double
percentile q s
  | U.null s = 0
  | otherwise = s U.! min (U.length s - 1) (floor (q * fromIntegral (U.length s)))

ascending :: U.Vector Double -> U.Vector Double
ascending = U.fromList . sort . U.toList

-- | Measure and print the latency table (and JSON line).
runLatency :: LatencyOptions -> IO ()
runLatency o = do
  hSetBuffering stdout LineBuffering
  checkPlotWritable "latency" (latPlot o)
  measured <- fmap concat $ forM (latTransports o) $ \t -> do
    hPutStrLn stderr ("  " ++ transportName t ++ ": C floor")
    c <- cRoundTrips t spinNanos (latRounds o)
    hPutStrLn stderr ("  " ++ transportName t ++ ": C, blocking at once")
    -- for reference only, and slow (20-30 us a round trip): at most 20 000
    cBlocking <- cRoundTrips t 0 (min 20000 (latRounds o))
    hPutStrLn stderr ("  " ++ transportName t ++ ": herd")
    (h, viaManager) <- withOneWorker False t $ \l -> do
      h <- runInUnboundThread (herdRoundTrips Direct l (latRounds o))
      m <- herdRoundTrips IoManager l (min 5000 (latRounds o))
      pure (h, m)
    tls <- if latTls o && t == TcpTransport
      then do
        hPutStrLn stderr "  tcp: herd with TLS"
        v <- withOneWorker True t $ \l -> runInUnboundThread (herdRoundTrips Direct l (latRounds o))
        pure [(t, "herd-tls", v)]
      else pure []
    pure ([ (t, "c", c), (t, "c-blocking", cBlocking), (t, "herd", h), (t, "herd-iomanager", viaManager) ] ++ tls)
  [eventfdWake, futexWake] <- forM [0, 1] $ \m -> ascending <$> wakeups m (min 5000 (latRounds o))
  let rows = [ (t, impl, ascending v) | (t, impl, v) <- measured ]
  let medianOf v = percentile 0.5 v
      floorOf t = head ([ medianOf v | (t', "c", v) <- rows, t' == t ] ++ [0])
      path t impl = case (impl, t) of
        ("c", ShmTransport) -> spin ++ "poll on eventfd"
        ("c", _) -> spin ++ "blocking read"
        ("c-blocking", ShmTransport) -> "poll on eventfd, no spin"
        ("c-blocking", _) -> "blocking read, no spin"
        ("herd-iomanager", _) -> "GHC IO manager (epoll, thread wake-up)"
        ("herd-tls", _) -> "TLS records sealed and opened inside the link"
        (_, ShmTransport) -> spin ++ "poll on eventfd"
        _ -> spin ++ "blocking recv on its own OS thread"
      spin = "spin " ++ show (spinNanos `div` 1000) ++ " us, then "
  putStrLn ("round trip of one small message, master and one worker, " ++ show (latRounds o) ++ " rounds")
  putStr $ renderTable ["transport", "impl", "master waits by", "median us", "p99 us", "x C floor"]
    [ [transportName t, impl, path t impl, fixed 2 (medianOf v), fixed 2 (percentile 0.99 v)
      , fixed 2 (medianOf v / max 1e-9 (floorOf t))]
    | (t, impl, v) <- rows ]
  forM_ rows $ \(t, impl, v) -> hPutStrLn stderr ("  " ++ transportName t ++ " " ++ impl ++ " percentiles 10/25/50/75/90: "
                                                ++ unwords [ fixed 2 (percentile q v) | q <- [0.1, 0.25, 0.5, 0.75, 0.9] ])
  putStrLn ("blocking wake-up round trip, no spinning (C): eventfd " ++ fixed 2 (medianOf eventfdWake)
            ++ " us, futex " ++ fixed 2 (medianOf futexWake) ++ " us (median)")
  writePlot (latPlot o) $ barSvg Log10 ("round trip of one small message, median of " ++ show (latRounds o))
      "microseconds" (map transportName (latTransports o))
      [ Series name colour False [ (g, medianOf v) | (g, t) <- zip [0 ..] (latTransports o), (t', impl', v) <- rows, t' == t, impl' == impl ]
      | (impl, name, colour) <- [ ("herd", "herd", "#1f77b4"), ("c", "C floor", "#555")
                                , ("c-blocking", "C, blocking at once", "#aaa")
                                , ("herd-iomanager", "herd via the IO manager", "#ff7f0e") ] ]
  when (latJson o) $ putStrLn $ renderJson $ JObject
    [ ("bench", JString "latency")
    , ("rows", JArray [ JObject [ ("transport", JString (transportName t)), ("impl", JString impl)
                                , ("median_us", JNumber (medianOf v)), ("p99_us", JNumber (percentile 0.99 v)) ]
                      | (t, impl, v) <- rows, impl `elem` ["herd", "c", "c-blocking", "herd-tls"] ])
    , ("iomanager_rows", JArray [ JObject [ ("transport", JString (transportName t))
                                          , ("median_us", JNumber (medianOf v)), ("p99_us", JNumber (percentile 0.99 v)) ]
                                | (t, "herd-iomanager", v) <- rows ])
    , ("wakeups", JArray [ JObject [ ("mechanism", JString name), ("median_us", JNumber (medianOf v)) ]
                         | (name, v) <- [("eventfd", eventfdWake), ("futex", futexWake)] ]) ]
