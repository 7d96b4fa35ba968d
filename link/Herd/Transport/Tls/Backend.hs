{-# LANGUAGE BangPatterns #-}
-- | The TLS handshake's footing ("Herd.Transport.Tls"): the @tls@
-- package's backend over the TCP link's own endpoint calls, and the
-- reasons a link cannot be put under TLS. What the handshake read past
-- its end stays in the raw buffer for the record layer
-- ("Herd.Transport.Tls.Records"), and the records the server's context
-- sealed after it last read are counted, so that the record layer's
-- sequence numbers follow them.
module Herd.Transport.Tls.Backend
  ( TlsRefused (..)
  , Raw (..)
  , newRaw
  , rawBackend
  ) where

import Control.Exception (Exception (..))
import Control.Monad (when)
import qualified Data.ByteString as B
import qualified Data.ByteString.Internal as BI
import qualified Data.ByteString.Unsafe as BU
import Data.IORef
import Data.Word (Word8)
import Foreign.ForeignPtr (ForeignPtr, mallocForeignPtrBytes, withForeignPtr)
import Foreign.Marshal.Utils (copyBytes)
import Foreign.Ptr (castPtr, plusPtr)
import Herd.Transport
import Herd.Transport.Connection (Connection (..))
import Network.TLS (Backend (..))

-- | Why a link could not be put under TLS.
data TlsRefused
  = MasterShowedNoCertificate  -- ^ the master's side of the handshake carried no certificate
  | NotOverTcp                 -- ^ the connection is not a TCP socket
  | NoTrafficSecret            -- ^ the handshake gave no TLS 1.3 traffic secret to seal records with
  | RecordRefused              -- ^ a record did not authenticate, was longer than TLS allows, or was not application data
  deriving (Eq, Show)

instance Exception TlsRefused where
  displayException e = case e of
    MasterShowedNoCertificate -> "the master showed no certificate"
    NotOverTcp -> "TLS needs a TCP connection"
    NoTrafficSecret -> "the TLS handshake gave no traffic secret"
    RecordRefused -> "a TLS record did not authenticate, or was malformed"

-- | The TCP link's own calls as the TLS context's backend: sends go out
-- whole (waiting for room when the kernel takes part), receives take the
-- bytes asked for, waiting for them; bytes read past what was asked wait
-- in the link's raw buffer for the next record.
data Raw = Raw
  { rawEp   :: !Endpoint
  , rawIn   :: !(IORef B.ByteString)  -- ^ received, not yet given to the context
  , rawEnd  :: !(IORef Bool)          -- ^ the TCP stream ended
  , rawBuf  :: !(ForeignPtr Word8)    -- ^ where a receive lands
  , rawSentSinceRecv :: !(IORef Int)
    -- ^ records the context sent since it last asked to receive
  }

rawChunk :: Int
rawChunk = 256 * 1024

-- | The backend's state for this link, nothing received yet.
newRaw :: Connection -> IO Raw
newRaw conn = Raw (connEndpoint conn) <$> newIORef B.empty <*> newIORef False <*> mallocForeignPtrBytes rawChunk
                   <*> newIORef 0

-- Receive what the TCP link has (waiting for it first, or not): the count
-- added to the raw buffer, 0 at the stream's end, -1 for nothing.
rawFill :: Bool -> Raw -> IO Int
rawFill wait raw = do
  k <- withForeignPtr (rawBuf raw) $ \p -> do
    k <- (if wait then epRecvWait else epRecv) (rawEp raw) p rawChunk
    when (k > 0) $ do
      -- one copy: what was left of the last receive, then what came
      buffered <- readIORef (rawIn raw)
      let l = B.length buffered
      joined <- BI.create (l + k) $ \d -> do
        BU.unsafeUseAsCString buffered $ \src -> copyBytes d (castPtr src) l
        copyBytes (d `plusPtr` l) p k
      writeIORef (rawIn raw) joined
    pure k
  when (k == 0) $ writeIORef (rawEnd raw) True
  pure k

-- How many records begin in these bytes (sent whole, as the tls package
-- sends them).
recordsIn :: B.ByteString -> Int
recordsIn = go 0
  where
    go !k b | B.length b < 5 = k
            | otherwise = go (k + 1) (B.drop (5 + fromIntegral (BU.unsafeIndex b 3) * 256 + fromIntegral (BU.unsafeIndex b 4)) b)

-- | The @tls@ package's backend over the link: sends counted in records
-- (the server skips the sequence numbers of those it sent past the
-- handshake), receives taken from the raw buffer.
rawBackend :: Raw -> Backend
rawBackend raw = Backend
  { backendFlush = pure ()
  , backendClose = epClose (rawEp raw)
  , backendSend = \bytes -> (modifyIORef' (rawSentSinceRecv raw) (+ recordsIn bytes) >>) $ BU.unsafeUseAsCStringLen bytes $ \(p, n) ->
      let go off | off >= n = pure ()
                 | otherwise = do
                     k <- epSend (rawEp raw) (castPtr p `plusPtr` off) (n - off)
                     when (k == 0) $ epWaitOut (rawEp raw)
                     go (off + k)
      in go 0
  , backendRecv = \n -> do
      writeIORef (rawSentSinceRecv raw) 0
      let have = do
            buffered <- readIORef (rawIn raw)
            if B.length buffered >= n then Just <$> take' n buffered else do
              ended <- readIORef (rawEnd raw)
              if ended then Just <$> take' (B.length buffered) buffered else Nothing <$ rawFill True raw
          take' k buffered = do
            let (now, later) = B.splitAt k buffered
            writeIORef (rawIn raw) later
            pure now
          loop = have >>= maybe loop pure
      loop
  }
