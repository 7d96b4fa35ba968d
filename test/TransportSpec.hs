{-# LANGUAGE ScopedTypeVariables #-}
-- | The shared-memory rings on their own, both ends in this process:
-- frames arrive whole and in order whatever their sizes (also those larger
-- than a ring, written while the reader reads), the end of the peer is
-- seen, and a ring whose published index does not add up is refused.
-- Also: closing any connection lets a cancel through, and a connection's
-- read buffer starts small.
module TransportSpec (spec) where

import Control.Concurrent (threadDelay)
import Control.Concurrent.Async (async, cancel, concurrently)
import Control.Exception (bracket, try)
import Control.Monad (forM, forM_, forever)
import System.Timeout (timeout)
import qualified Data.ByteString as B
import Data.IORef (readIORef)
import Herd.Transport
import Herd.Transport.Connection (Connection (..), firstReadChunk, readChunk)
import Herd.Transport.Shm (ringBytes, shmLoopback)
import Test.Hspec
import Test.QuickCheck
import Test.Hspec.QuickCheck (modifyMaxSuccess)
import Test.QuickCheck.Monadic (assert, monadicIO, run)

withLoopback :: ((Connection, Connection, IO ()) -> IO a) -> IO a
withLoopback = bracket shmLoopback (\(m, w, _) -> closeConnection m >> closeConnection w)

-- A frame of this size whose bytes depend on its position.
frameOf :: Int -> Int -> B.ByteString
frameOf i n = fst (B.unfoldrN n (\k -> Just (fromIntegral (i * 31 + k), k + 1)) 0)

spec :: Spec
spec = do
 describe "closing a connection" $
  it "lets an asynchronous exception through: a cancelled thread that was closing one stops" $ do
    -- a close that waits (interruptibly), as closing a socket may
    conn <- newConnection (slowClose (threadDelay 10000000)) "test"
    -- a reader-like thread: close, then go on forever unless stopped
    closer <- async (closeConnection conn >> forever (threadDelay 1000))
    threadDelay 50000
    stopped <- timeout 3000000 (cancel closer)
    stopped `shouldBe` Just ()
 describe "a connection's read buffer" $
  it "starts small, and grows to the full read size once a read fills it" $
    withLoopback $ \(m, w, _) -> do
      let bufferSize = snd <$> readIORef (connBuffer w)
          cap = 1024 * 1024
      bufferSize `shouldReturn` firstReadChunk
      -- small frames one at a time: no read fills the buffer
      forM_ [1 .. 20] $ \i -> do
        sendFrameStrict m (frameOf i 100)
        recvFrame cap w `shouldReturn` Just (frameOf i 100)
      bufferSize `shouldReturn` firstReadChunk
      -- a burst larger than the buffer, all waiting at once
      forM_ [1 .. 40] $ \i -> sendFrameStrict m (frameOf i 1000)
      got <- forM [1 .. 40] $ \_ -> recvFrame cap w
      got `shouldBe` [ Just (frameOf i 1000) | i <- [1 .. 40] ]
      bufferSize `shouldReturn` readChunk
 describe "the shared-memory transport" $ do
  modifyMaxSuccess (const 30) $ it "carries frames of any size whole and in order, while the reader reads" $
    -- mostly small frames, some larger than the ring (1 MiB)
    forAll (resize 20 (listOf (frequency [(4, choose (1, 300)), (1, choose (300, 2 * ringBytes))]))) $ \lens -> monadicIO $ do
      ok <- run $ withLoopback $ \(m, w, _) -> do
        (_, got) <- concurrently
          (forM_ (zip [0 ..] lens) $ \(i, n) -> sendFrameStrict m (frameOf i n))
          (forM (zip [0 ..] lens) $ \(i, n) -> (== Just (frameOf i n)) <$> recvFrame (4 * ringBytes) w)
        pure (and got)
      assert ok

  it "carries a frame four times the ring's size, both ways" $
    withLoopback $ \(m, w, _) -> do
      let big = frameOf 7 (4 * ringBytes)
      (_, got) <- concurrently (sendFrameStrict m big) (recvFrame (8 * ringBytes) w)
      got `shouldBe` Just big
      (_, back) <- concurrently (sendFrameStrict w big) (recvFrame (8 * ringBytes) m)
      back `shouldBe` Just big

  it "sees the end when the peer closes, after the bytes it sent" $
    withLoopback $ \(m, w, _) -> do
      sendFrameStrict m (frameOf 1 100)
      closeConnection m
      recvFrame 1000 w `shouldReturn` Just (frameOf 1 100)
      recvFrame 1000 w `shouldReturn` Nothing

  it "refuses a ring whose published index is inconsistent, as a bad peer" $
    withLoopback $ \(m, w, damage) -> do
      sendFrameStrict m (frameOf 2 10)
      damage
      r <- try (recvFrame 1000 w)
      case r of
        Left (PeerBroken why) -> why `shouldContain` "inconsistent"
        other -> expectationFailure ("expected PeerBroken, got " ++ show other)
      -- and it stays refused
      r2 <- try (recvFrame 1000 w)
      either (\(_ :: TransportError) -> pure ()) (\x -> expectationFailure (show x)) r2

  it "refuses a frame over the cap before reading its body" $
    withLoopback $ \(m, w, _) -> do
      sendFrameStrict m (frameOf 3 5000)
      r <- try (recvFrame 4096 w)
      case r of
        Left (FrameTooLarge 5000 4096) -> pure ()
        other -> expectationFailure ("expected FrameTooLarge, got " ++ show other)

-- An endpoint that does nothing but close with the given action.
slowClose :: IO () -> Endpoint
slowClose closing = Endpoint
  { epKind = TcpTransport
  , epRecv = \_ _ -> pure (-1)
  , epSend = \_ n -> pure n
  , epRecvWait = \_ _ -> pure (-1)
  , epWaitOut = pure ()
  , epArm = \_ -> pure False
  , epFds = pure []
  , epEdge = False
  , epClose = closing
  , epLiveness = \_ -> pure 0
  , epSocket = Nothing
  }
