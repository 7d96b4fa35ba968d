{-# LANGUAGE ScopedTypeVariables #-}
-- | A framed connection's parts ("Herd.Transport"): the transport's byte
-- pipe ('Endpoint'), the connection around it with its receive state and
-- send lock, and the errors a transport reports.
module Herd.Transport.Connection
  ( Endpoint (..)
  , Connection (..)
  , Large (..)
  , Spare (..)
  , readChunk
  , firstReadChunk
  , spareLimit
  , spinNanos
  , connKind
  , newConnection
  , TransportError (..)
  , setLiveness
  , connSocket
  , closeConnection
  ) where

import Control.Concurrent.MVar
import Control.Exception
import qualified Data.ByteString as B
import Data.IORef
import Data.Word (Word8)
import Foreign.C.Types (CInt (..))
import Foreign.ForeignPtr (ForeignPtr, mallocForeignPtrBytes)
import Foreign.Ptr (Ptr)
import Network.Socket (Socket)
import Herd.Core.Base (TransportKind (..))

-- | One transport's byte pipe. Every operation but the waits returns at
-- once.
data Endpoint = Endpoint
  { epKind     :: !TransportKind
  , epRecv     :: Ptr Word8 -> Int -> IO Int
    -- ^ copy up to n bytes in: the count, 0 at end of stream, -1 when
    -- nothing is there now; throws on an error
  , epSend     :: Ptr Word8 -> Int -> IO Int
    -- ^ take up to n bytes: the count taken now (maybe 0); throws on error
  , epRecvWait :: Ptr Word8 -> Int -> IO Int
    -- ^ like 'epRecv', but wait for bytes first (for about a second at
    -- most: -1 then means nothing came yet); the cheapest way for one
    -- thread to wait on one connection
  , epWaitOut  :: IO ()
    -- ^ block until a send may make progress
  , epArm      :: Bool -> IO Bool
    -- ^ get ready for a wait on 'epFds' elsewhere (epoll, the IO manager);
    -- the flag says whether to clear stale wake-ups first (needed for a
    -- level-triggered wait). True: bytes are already there, do not wait
  , epFds      :: IO [CInt]
    -- ^ descriptors that become readable when a receive may progress
  , epEdge     :: !Bool
    -- ^ whether an epoll wait on 'epFds' must be edge-triggered
  , epClose    :: IO ()
  , epLiveness :: Double -> IO Int
    -- ^ see 'setLiveness'
  , epSocket   :: !(Maybe Socket)
    -- ^ the socket underneath, if any (the shared-memory upgrade passes
    -- descriptors over it)
  }

-- | One framed, bidirectional connection.
data Connection = Connection
  { connEndpoint :: !Endpoint
  , connPending  :: !(IORef B.ByteString)  -- ^ bytes read past the last frame
  , connSendLock :: !(MVar ())
  , connPeer     :: !String                -- ^ the peer's address, for log lines
  , connBuffer   :: !(IORef (ForeignPtr Word8, Int))
    -- ^ where bytes land before they are copied out, and its size
    -- ('firstReadChunk', then 'readChunk' once a read filled it)
  , connLarge    :: !(IORef (Maybe Large))
    -- ^ a large frame being read straight into a buffer of its size
  , connComplete :: !(IORef (Maybe B.ByteString))
    -- ^ a large frame read whole, to be taken before the pending bytes
  , connSpare    :: !(IORef Spare)
    -- ^ where the last large frame handed out lives, and a buffer given back
  }

-- | A large frame in progress: its body's buffer, the buffer's capacity,
-- the body's length, and bytes so far.
data Large = Large !(ForeignPtr Word8) !Int !Int !Int

-- | Large-frame buffers a connection remembers, each with its capacity:
-- the address of the one it handed out last (the only one a receiver may
-- give back; an address, so that a connection whose receiver never gives
-- one back, like the master's, keeps no frame alive) and one given back,
-- which the next large frame that fits is read into. A buffer the
-- receiver keeps in cache this way, instead of a fresh one per frame, is
-- what lets a stream of large messages near the kernel's copy speed (see
-- 'Herd.Transport.recycleFrame').
data Spare = Spare
  { spareIssued :: !(Maybe (Ptr Word8, Int))
  , spareFree   :: !(Maybe (ForeignPtr Word8, Int))
  }

-- | The largest buffer a connection keeps for reuse: 16 MiB. A larger
-- frame's buffer is left to the garbage collector when given back, so an
-- idle connection never holds more than this.
spareLimit :: Int
spareLimit = 16 * 1024 * 1024

-- | How long a reader spins before it blocks, on every transport (the
-- adaptive spin of @cbits/herd_spin.h@: after four spins that found
-- nothing it stops spinning, and tries again on every 16th wait or when a
-- blocking wait shows bytes came soon after it began). It is about one
-- round trip of two blocking wake-ups across CPUs: a spin this long
-- catches the answer of a round trip at both ends without sleeping.
spinNanos :: Int
spinNanos = 20000

-- | The transport a connection runs over.
connKind :: Connection -> TransportKind
connKind = epKind . connEndpoint

-- | Bytes one read asks for on a busy connection. Reads land in the
-- connection's own buffer and only the bytes that came are copied out, so
-- a small message costs a small allocation, not a fresh buffer of this
-- size.
readChunk :: Int
readChunk = 256 * 1024

-- | Bytes one read asks for until a read fills them: 16 KiB. A connection
-- starts with a buffer this size and moves to 'readChunk' the first time
-- the transport had that much waiting: a master of thousands of links held
-- 'readChunk' per link, almost all of it never written, and its major
-- collections copied it.
firstReadChunk :: Int
firstReadChunk = 16 * 1024

-- | A connection over an endpoint, with the peer's name for log lines.
newConnection :: Endpoint -> String -> IO Connection
newConnection ep peer = do
  buf <- mallocForeignPtrBytes firstReadChunk
  Connection ep <$> newIORef B.empty <*> newMVar () <*> pure peer <*> newIORef (buf, firstReadChunk)
                <*> newIORef Nothing <*> newIORef Nothing <*> newIORef (Spare Nothing Nothing)

-- | Why a frame could not be received or sent.
data TransportError
  = FrameTooLarge { frameClaimed :: !Int, frameLimit :: !Int }
    -- ^ the length prefix exceeds the receiver's cap
  | TruncatedFrame { frameExpected :: !Int, frameGot :: !Int }
    -- ^ the peer closed the connection in the middle of a frame
  | PeerBroken String
    -- ^ the peer broke the transport itself (e.g. a shared ring whose
    -- indices are inconsistent), or went away while a send waited
  deriving (Eq, Show)

instance Exception TransportError where
  displayException (FrameTooLarge n cap) =
    "frame of " ++ show n ++ " bytes exceeds the limit of " ++ show cap
  displayException (TruncatedFrame want got) =
    "connection closed mid-frame (" ++ show got ++ " of " ++ show want ++ " bytes)"
  displayException (PeerBroken why) = why

-- | Declare the connection dead after this many seconds (at least 1) in
-- which the peer answered nothing. On TCP this sets the kernel's keepalive
-- probes and a send timeout; on one host a dead peer shows at once as the
-- end of its socket, so this does nothing there. Returns the errno of a
-- failed socket option, or 0.
setLiveness :: Double -> Connection -> IO Int
setLiveness secs conn = epLiveness (connEndpoint conn) secs

-- | The socket underneath the connection, if it has one.
connSocket :: Connection -> Maybe Socket
connSocket = epSocket . connEndpoint

-- | Close the connection; safe to call more than once. A failure to close
-- is ignored, but an asynchronous exception that arrives meanwhile is not:
-- swallowing the cancel of a cluster's reader while it closed one of its
-- links left the reader running and the cluster's end waiting for it
-- forever (about one run in twenty of @herd bench pfilter@ at 2048
-- workers hung there).
closeConnection :: Connection -> IO ()
closeConnection conn = epClose (connEndpoint conn) `catch` \(e :: SomeException) ->
  case fromException e of
    Just (async :: SomeAsyncException) -> throwIO async
    Nothing -> pure ()
