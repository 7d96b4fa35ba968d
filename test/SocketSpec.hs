-- | The socket transports' reads: frames over a Unix socket pair arrive
-- whole and in order whatever their sizes, through the spin's reads and
-- the blocking ones alike; and the adaptive spin of @cbits/herd_spin.h@
-- spins before a wait, pauses on an idle link, and comes back when bytes
-- come quickly. The spin is timed with a long spin (100 ms), so that
-- "it spun" and "it did not" are far apart on a loaded machine.
module SocketSpec (spec, withSocketPair) where

import Control.Concurrent (threadDelay)
import Control.Concurrent.Async (concurrently, withAsync)
import Control.Exception (bracket)
import Control.Monad (forM, forM_, replicateM)
import qualified Data.ByteString as B
import Data.Word (Word8)
import Foreign.C.Types (CInt (..), CLong (..), CSize (..))
import Foreign.ForeignPtr (mallocForeignPtrBytes, withForeignPtr)
import Foreign.Marshal.Array (allocaArray)
import Foreign.Ptr (Ptr)
import Herd.Sys.Clock (monotonicSeconds)
import Herd.Transport
import Herd.Transport.Socket (socketConnection)
import Network.Socket
import qualified Network.Socket.ByteString as NB
import Test.Hspec
import Test.Hspec.QuickCheck (modifyMaxSuccess)
import Test.QuickCheck
import Test.QuickCheck.Monadic (assert, monadicIO, run)

data Spin

foreign import ccall unsafe "herd_spin_bytes" c_spinBytes :: CSize
foreign import ccall unsafe "herd_spin_setup" c_spinSetup :: Ptr Spin -> CLong -> IO ()
foreign import ccall safe "herd_recv_spin" c_recvSpin :: CInt -> Ptr Word8 -> CSize -> Ptr Spin -> IO CLong
foreign import ccall safe "herd_recv_wait" c_recvWait :: CInt -> Ptr Word8 -> CSize -> Ptr Spin -> IO CLong
foreign import ccall unsafe "herd_socket_blocking" c_socketBlocking :: CInt -> IO CInt

-- | A connected pair of Unix-domain socket connections, set up as herd's own.
withSocketPair :: ((Connection, Connection) -> IO a) -> IO a
withSocketPair = bracket open (\(a, b) -> closeConnection a >> closeConnection b)
  where
    open = do
      (s1, s2) <- socketPair AF_UNIX Stream defaultProtocol
      (,) <$> socketConnection UnixTransport none s1 "a" <*> socketConnection UnixTransport none s2 "b"
    none _ _ = pure 0

-- A frame of this size whose bytes depend on its position.
frameOf :: Int -> Int -> B.ByteString
frameOf i n = fst (B.unfoldrN n (\k -> Just (fromIntegral (i * 31 + k), k + 1)) 0)

-- One spin on the socket with the given state: what it returned, and how
-- long it took.
timedSpin :: Socket -> Ptr Spin -> IO (CLong, Double)
timedSpin sock sp = allocaArray 64 $ \buf -> withFdSocket sock $ \fd -> do
  t0 <- monotonicSeconds
  r <- c_recvSpin fd buf 64 sp
  t1 <- monotonicSeconds
  pure (r, t1 - t0)

spinSeconds :: Double
spinSeconds = 0.1

spec :: Spec
spec = do
 describe "the socket transports" $
  modifyMaxSuccess (const 30) $ it "carry frames of any size whole and in order, while the reader reads" $
    forAll (resize 20 (listOf (frequency [(4, choose (1, 300)), (1, choose (300, 300000))]))) $ \lens -> monadicIO $ do
      ok <- run $ withSocketPair $ \(a, b) -> do
        (_, got) <- concurrently
          (forM_ (zip [0 ..] lens) $ \(i, n) -> sendFrameStrict a (frameOf i n))
          (forM (zip [0 ..] lens) $ \(i, n) -> (== Just (frameOf i n)) <$> recvFrame (1024 * 1024) b)
        pure (and got)
      assert ok
 describe "a socket reader's adaptive spin" $ do
  it "spins before it waits, and takes the bytes it finds" $
    withSpin $ \(mine, theirs, sp) -> do
      (r, secs) <- timedSpin mine sp
      r `shouldBe` (-1)
      secs `shouldSatisfy` (>= spinSeconds * 0.99)
      NB.sendAll theirs (B.replicate 10 7)
      fst <$> timedSpin mine sp `shouldReturn` 10
  it "pauses after four fruitless spins, and tries again on every 16th wait" $
    withSpin $ \(mine, _, sp) -> do
      spun <- replicateM 4 (snd <$> timedSpin mine sp)
      spun `shouldSatisfy` all (>= spinSeconds * 0.99)
      paused <- replicateM 15 (timedSpin mine sp)
      paused `shouldSatisfy` all (\(r, secs) -> r == -1 && secs < spinSeconds / 2)
      snd <$> timedSpin mine sp >>= (`shouldSatisfy` (>= spinSeconds * 0.99))
  it "spins again at once after a blocking wait that bytes ended soon" $
    withSpin $ \(mine, theirs, sp) -> do
      forM_ [1 .. 4 :: Int] $ \_ -> timedSpin mine sp
      (_, secs) <- timedSpin mine sp
      secs `shouldSatisfy` (< spinSeconds / 2)
      -- the bytes come 20 ms into a blocking wait: within the spin's length
      withAsync (threadDelay 20000 >> NB.sendAll theirs (B.replicate 5 1)) $ \_ ->
        allocaArray 64 $ \buf -> withFdSocket mine $ \fd -> do
          r <- c_recvWait fd buf 64 sp
          r `shouldBe` 5
      snd <$> timedSpin mine sp >>= (`shouldSatisfy` (>= spinSeconds * 0.99))
  where
    withSpin body = bracket (socketPair AF_UNIX Stream defaultProtocol) (\(a, b) -> close a >> close b) $ \(a, b) -> do
      -- as herd's connections are: waits block (with a timeout)
      mapM_ (\s -> withFdSocket s c_socketBlocking `shouldReturn` 0) [a, b]
      spin <- mallocForeignPtrBytes (fromIntegral c_spinBytes)
      withForeignPtr spin $ \sp -> do
        c_spinSetup sp (round (spinSeconds * 1e9))
        body (a, b, sp)
