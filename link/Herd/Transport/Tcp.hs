-- | The TCP transport: framed connections across hosts (see
-- "Herd.Transport" for the frames). Sockets have TCP_NODELAY set, since
-- herd's messages are already batched and latency matters more than packet
-- count, and a liveness timeout built from the kernel's keepalive probes.
module Herd.Transport.Tcp
  ( listenTcp
  , tcpLiveness
  , listenPort
  , acceptTcp
  , connectTcp
  ) where

import Control.Exception (bracketOnError)
import Foreign.C.Types (CInt (..), CUInt (..))
import Herd.Transport
import Herd.Transport.Socket
import Network.Socket

foreign import ccall unsafe "herd_set_liveness"
  c_setLiveness :: CInt -> CInt -> CInt -> CInt -> CUInt -> IO CInt

-- | Declare the connection dead after this many seconds (at least 1) in
-- which the peer's kernel answered nothing: no data, no acknowledgement, no
-- answer to a keepalive probe. Probes go out every third of that time.
tcpLiveness :: Double -> Socket -> IO Int
tcpLiveness secs sock = withFdSocket sock $ \fd -> do
  let whole = max 1 (floor (secs / 3)) :: Int
  rc <- c_setLiveness fd (fromIntegral whole) (fromIntegral whole) 3 (round (secs * 1000))
  pure (fromIntegral rc)

-- | Listen on a host and port (0 for any free port).
listenTcp :: String -> Int -> IO Socket
listenTcp host port = do
  let hints = defaultHints { addrFlags = [AI_PASSIVE, AI_NUMERICSERV], addrSocketType = Stream }
  addr : _ <- getAddrInfo (Just hints) (Just host) (Just (show port))
  bracketOnError (socket (addrFamily addr) Stream defaultProtocol) close $ \sock -> do
    setSocketOption sock ReuseAddr 1
    withFdSocket sock setCloseOnExecIfNeeded
    bind sock (addrAddress addr)
    listen sock 1024
    pure sock

-- | The port a listening socket is bound to.
listenPort :: Socket -> IO Int
listenPort sock = fromIntegral <$> socketPort sock

-- | Accept one TCP connection.
acceptTcp :: Socket -> IO Connection
acceptTcp = acceptConnection TcpTransport tcpLiveness

-- | Connect to a master.
connectTcp :: String -> Int -> IO Connection
connectTcp host port = do
  let hints = defaultHints { addrFlags = [AI_NUMERICSERV], addrSocketType = Stream }
  addr : _ <- getAddrInfo (Just hints) (Just host) (Just (show port))
  bracketOnError (socket (addrFamily addr) Stream defaultProtocol) close $ \sock -> do
    withFdSocket sock setCloseOnExecIfNeeded
    connect sock (addrAddress addr)
    setSocketOption sock NoDelay 1
    socketConnection TcpTransport tcpLiveness sock (host ++ ":" ++ show port)
