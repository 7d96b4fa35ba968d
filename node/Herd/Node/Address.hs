-- | Where a worker (or a host agent) finds its master: the address forms
-- of @HERD_WORKER@ and @--connect@, and so the transport of the link.
-- Parsing names what is wrong.
module Herd.Node.Address
  ( MasterAddress (..)
  , parseMasterAddress
  , showMasterAddress
  , parseHostPort
  ) where

import Herd.Core.Config.Parse (parseHostPortFrom)
import Herd.Transport.Unix (unixAddressName)

-- | Where a worker finds its master, and so the transport of its link.
data MasterAddress
  = TcpAddress String Int  -- ^ @HOST:PORT@: TCP
  | TlsAddress String Int  -- ^ @tls:HOST:PORT@: TLS over TCP ("Herd.Transport.Tls")
  | UnixAddress String     -- ^ @unix:NAME@: the master's abstract Unix socket
  | ShmAddress String      -- ^ @shm:NAME@: that socket, then shared-memory rings
  deriving (Eq, Show)

-- | Parse @HOST:PORT@, @tls:HOST:PORT@, @unix:NAME@ or @shm:NAME@,
-- naming what is wrong.
parseMasterAddress :: String -> Either String MasterAddress
parseMasterAddress s = case break (== ':') s of
  ("unix", ':' : name) -> UnixAddress <$> unixAddressName name
  ("shm", ':' : name) -> ShmAddress <$> unixAddressName name
  ("tls", ':' : rest) -> uncurry TlsAddress <$> parseHostPort rest
  _ -> uncurry TcpAddress <$> parseHostPort s

-- | The form 'parseMasterAddress' reads.
showMasterAddress :: MasterAddress -> String
showMasterAddress a = case a of
  TcpAddress h p -> (if ':' `elem` h then "[" ++ h ++ "]" else h) ++ ":" ++ show p
  TlsAddress h p -> "tls:" ++ showMasterAddress (TcpAddress h p)
  UnixAddress n -> "unix:" ++ n
  ShmAddress n -> "shm:" ++ n

-- | Parse @HOST:PORT@, naming what is wrong.
parseHostPort :: String -> Either String (String, Int)
parseHostPort = parseHostPortFrom 1
