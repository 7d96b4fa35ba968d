-- | Sending on a framed connection ("Herd.Transport"): whole frames under
-- the connection's send lock, so frames from concurrent senders never
-- interleave (INV-SEND), and what the transport takes without waiting, for
-- a sender that must not block.
module Herd.Transport.Send
  ( sendFrame
  , sendFrameStrict
  , framed
  , frameParts
  , sendRaw
  , sendRawParts
  , sendAvailableParts
  ) where

import Control.Concurrent.MVar
import Control.Monad (when)
import qualified Data.ByteString as B
import qualified Data.ByteString.Internal as BI
import qualified Data.ByteString.Lazy as BL
import qualified Data.ByteString.Unsafe as BU
import Data.Word (Word8)
-- 'unsafeWithForeignPtr', here and in the transports' receive paths, not
-- 'withForeignPtr': what runs inside always returns (a copy, a system call
-- that waits a second at most), and in this GHC 'withForeignPtr'
-- allocates per call (on the send path; the receive paths showed no
-- difference)
import GHC.ForeignPtr (unsafeWithForeignPtr)
import Foreign.Ptr (Ptr, castPtr, plusPtr)
import Herd.Wire.Writer (pokeBE)
import Herd.Transport.Connection

-- | Send one frame.
sendFrame :: Connection -> BL.ByteString -> IO ()
sendFrame conn body = sendFrameStrict conn (BL.toStrict body)

-- | Send one frame whose body is a strict string.
sendFrameStrict :: Connection -> B.ByteString -> IO ()
sendFrameStrict conn body = sendRawParts conn (frameParts body)

-- | The bytes of one frame as parts to send in order: a small frame as one
-- copy with its length in front ('framed'), a large one as the length and
-- the body itself, so the body is not copied.
frameParts :: B.ByteString -> [B.ByteString]
frameParts body
  | B.length body <= 64 * 1024 = [framed body]
  | otherwise = [lengthBytes, body]
  where
    lengthBytes = BI.unsafeCreate 4 $ \p ->
      pokeBE 4 p 0 (fromIntegral (B.length body))

-- | The bytes of one frame: its length, then the body.
framed :: B.ByteString -> B.ByteString
framed body = BI.unsafeCreate (4 + n) $ \p -> do
  pokeBE 4 p 0 (fromIntegral n)
  BU.unsafeUseAsCString body $ \src -> BI.memcpy (p `plusPtr` 4) (castPtr src) n
  where n = B.length body

-- Send what this send function takes now; the rest (empty when it took
-- everything). It is given the endpoint's send function, not the endpoint:
-- given the endpoint, GHC passed on the one field used and rebuilt a
-- record of all eleven around it on every call, 96 bytes a send.
sendSome :: (Ptr Word8 -> Int -> IO Int) -> B.ByteString -> IO B.ByteString
sendSome send = go
  where
    go bs@(BI.PS fp off len)
      | len <= 0 = pure B.empty
      | otherwise = do
          k <- unsafeWithForeignPtr fp $ \p -> send (p `plusPtr` off) len
          if k <= 0 then pure bs
            else if k >= len then pure B.empty
            else go (BI.PS fp (off + k) (len - k))

-- | Send bytes already framed (from 'framed'), waiting as needed.
sendRaw :: Connection -> B.ByteString -> IO ()
sendRaw conn bytes = sendRawParts conn [bytes]

-- | Send these parts in order ('frameParts'), waiting as needed, under one
-- hold of the send lock.
sendRawParts :: Connection -> [B.ByteString] -> IO ()
sendRawParts conn parts = withMVar (connSendLock conn) $ \_ -> mapM_ go parts
  where
    send = epSend (connEndpoint conn)
    waitOut = epWaitOut (connEndpoint conn)
    go bs = do
      rest <- sendSome send bs
      when (not (B.null rest)) $ waitOut >> go rest

-- | Send as much of these parts as the transport takes now, without
-- waiting, and return the parts (or the rest of one) left; throws on an
-- error.
sendAvailableParts :: Connection -> [B.ByteString] -> IO [B.ByteString]
sendAvailableParts conn parts = withMVar (connSendLock conn) $ \_ -> go parts
  where
    send = epSend (connEndpoint conn)
    go [] = pure []
    go (p : ps) = do
      rest <- sendSome send p
      if B.null rest then go ps else pure (rest : ps)
