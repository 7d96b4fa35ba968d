-- | @herd bench bandwidth@: the bytes per second of a stream of large
-- messages from the master to one worker over each transport, next to a
-- floor measured in the same run: the same transport driven from C with
-- nothing on top (@bench/cbits/pingpong.c@), through the same kernel
-- buffers (a Unix socket's floor asks for herd's send buffer).
--
-- herd's stream is 'Ping's with the message as padding, through the
-- master's packet layer and link (a value that ends a large message
-- leaves uncopied), answered by the worker's message loop with a 'Pong';
-- four are in flight. Floor and herd run in turns, several passes each
-- on one worker, and the table gives each one's median pass: on a shared
-- machine one pass of either can be slowed by a neighbour.
module Bench.Bandwidth
  ( BandwidthOptions (..)
  , runBandwidth
  ) where

import Control.Exception (throwIO, ErrorCall (..))
import Control.Monad (forM, forM_, when)
import qualified Data.ByteString as B
import Foreign.C.Types (CDouble (..), CInt (..), CLong (..))
import Herd.Config
import Herd.Sys.Clock (monotonicSeconds)
import Herd.Packet (sendMessageTail)
import Herd.Core.Packet.Policy (Urgency (..))
import Herd.Core.Report
import Herd.Transport (spinNanos)
import Herd.Transport.Socket (unixSendBuffer)
import Herd.Core.Wire (ToWorker (..))
import Herd.Wire.Encode (toWorkerParts)
import System.IO
import Bench.Common (median)
import Bench.Latency (RawLink (..), Wait (..), awaitPong, cTransport, withOneWorker)

foreign import ccall safe "herd_stream_floor"
  c_streamFloor :: CInt -> CLong -> CLong -> CInt -> CLong -> IO CDouble

-- | Bandwidth settings.
data BandwidthOptions = BandwidthOptions
  { bwTransports :: [TransportKind]
  , bwMessageMiB :: Int
  , bwTotalMiB   :: Int   -- ^ per pass
  , bwPasses     :: Int   -- ^ passes of floor and herd, in turns
  , bwJson       :: Bool
  , bwTls        :: Bool  -- ^ also measure tcp with TLS on ("herd-tls" rows)
  }

-- | Measure and print the bandwidth table (and JSON line).
runBandwidth :: BandwidthOptions -> IO ()
runBandwidth o = do
  hSetBuffering stdout LineBuffering
  let msgBytes = bwMessageMiB o * 1024 * 1024
      count = max 1 (bwTotalMiB o `div` bwMessageMiB o)
      total = count * msgBytes
      mib secs = fromIntegral total / (1024 * 1024) / secs
      passes = max 1 (bwPasses o)
      note t impl secs = hPutStrLn stderr ("  " ++ transportName t ++ " " ++ impl ++ ": "
                                           ++ fixed 0 (mib secs) ++ " MiB/s")
  rows <- fmap concat $ forM (bwTransports o) $ \t -> do
    -- the floor's sockets get the send buffer herd's ask for
    let sndbuf = if t == UnixTransport then unixSendBuffer else 0
        floorPass = do
          c <- c_streamFloor (cTransport t) (fromIntegral total) (fromIntegral msgBytes) (fromIntegral sndbuf)
                                 (fromIntegral spinNanos)
          when (c <= 0) $ throwIO (ErrorCall ("the C floor failed on " ++ transportName t))
          realToFrac c <$ note t "c" (realToFrac c)
    pairs <- withOneWorker False t $ \l -> forM [1 .. passes] $ \_ -> do
      c <- floorPass
      h <- streamPass msgBytes count l
      (c, h) <$ note t "herd" h
    tls <- if bwTls o && t == TcpTransport
      then withOneWorker True t $ \l -> do
        secs <- forM [1 .. passes] $ \_ -> streamPass msgBytes count l >>= \s -> s <$ note t "herd-tls" s
        pure [(t, "herd-tls", median secs)]
      else pure []
    pure ([ (t, "c", median (map fst pairs)), (t, "herd", median (map snd pairs)) ] ++ tls)
  let floorOf t = head ([ s | (t', "c", s) <- rows, t' == t ] ++ [0])
  putStrLn ("a stream of " ++ show count ++ " messages of " ++ show (bwMessageMiB o)
            ++ " MiB, master to one worker; median of " ++ show passes ++ " passes, floor and herd in turns")
  putStr $ renderTable ["transport", "impl", "seconds", "MiB/s", "x C floor"]
    [ [transportName t, impl, fixed 3 s, fixed 0 (mib s), fixed 2 (mib s / mib (floorOf t))] | (t, impl, s) <- rows ]
  when (bwJson o) $ putStrLn $ renderJson $ JObject
    [ ("bench", JString "bandwidth")
    , ("rows", JArray [ JObject [ ("transport", JString (transportName t)), ("impl", JString impl)
                                , ("mib_per_s", JNumber (mib s)), ("x_floor", JNumber (mib s / mib (floorOf t))) ]
                      | (t, impl, s) <- rows ]) ]

-- Seconds to stream this many messages of this size to the worker, four
-- in flight, after one to warm up.
streamPass :: Int -> Int -> RawLink -> IO Double
streamPass msgBytes count l = do
  let payload = B.replicate msgBytes 1
      send i = let (enc, tl) = toWorkerParts (Ping (fromIntegral i) payload)
               in sendMessageTail (rawSender l) Urgent enc tl
      window = 4
  send (0 :: Int) >> awaitPong Direct (rawConn l) 0
  t0 <- monotonicSeconds
  forM_ [1 .. min window count] send
  forM_ [1 .. count] $ \i -> do
    awaitPong Direct (rawConn l) (fromIntegral i)
    when (i + window <= count) $ send (i + window)
  t1 <- monotonicSeconds
  pure (t1 - t0)
