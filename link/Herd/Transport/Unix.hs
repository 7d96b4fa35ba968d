-- | The Unix-domain socket transport: framed connections between processes
-- on one host, through the kernel but without TCP's stack.
--
-- The master listens on an abstract socket (Linux): a name with no file
-- behind it, so nothing is left in the file system if the master is
-- killed. Anyone on the host can connect; the handshake's proof of the
-- shared secret ("Herd.Transport.Auth") still decides who may join.
module Herd.Transport.Unix
  ( listenUnix
  , acceptUnix
  , connectUnix
  , unixAddressName
  ) where

import Control.Exception (bracketOnError)
import Data.Char (isAlphaNum)
import Herd.Transport
import Herd.Transport.Socket
import Network.Socket
import System.Posix.Process (getProcessID)

-- | Listen on a fresh abstract Unix socket; returns it and its name (the
-- part after the leading NUL, which 'connectUnix' takes).
listenUnix :: Int -> IO (Socket, String)
listenUnix salt = do
  pid <- getProcessID
  let name = "herd-" ++ show pid ++ "-" ++ show salt
  bracketOnError (socket AF_UNIX Stream defaultProtocol) close $ \sock -> do
    withFdSocket sock setCloseOnExecIfNeeded
    bind sock (SockAddrUnix ('\0' : name))
    listen sock 1024
    pure (sock, name)

-- | Accept one connection.
acceptUnix :: Socket -> IO Connection
acceptUnix = acceptConnection UnixTransport noLiveness

-- | Connect to a master's abstract socket by name.
connectUnix :: String -> IO Connection
connectUnix name = bracketOnError (socket AF_UNIX Stream defaultProtocol) close $ \sock -> do
  withFdSocket sock setCloseOnExecIfNeeded
  connect sock (SockAddrUnix ('\0' : name))
  socketConnection UnixTransport noLiveness sock ("local socket " ++ name)

-- A dead peer on this host closes its end at once: nothing to probe.
noLiveness :: Double -> Socket -> IO Int
noLiveness _ _ = pure 0

-- | Check a socket name given from outside (letters, digits, @-_.@).
unixAddressName :: String -> Either String String
unixAddressName s
  | null s = Left "empty local socket name"
  | length s > 100 = Left ("local socket name longer than 100 characters: " ++ show s)
  | all (\c -> isAlphaNum c || c `elem` "-_.") s = Right s
  | otherwise = Left ("bad local socket name " ++ show s ++ " (letters, digits, - _ . only)")
