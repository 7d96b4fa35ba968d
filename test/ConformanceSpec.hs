{-# LANGUAGE ScopedTypeVariables #-}
-- | The conformance suite every transport must pass on its own, with both
-- ends in this process: TCP and a Unix socket over a fresh listener on
-- loopback, shared memory over its loopback pair. Frames of every size up
-- to the cap (and past a shared ring's size) arrive whole and in order;
-- both directions carry frames at once; a frame cut short by the peer's
-- close is reported as truncated; a clean close is seen after the bytes
-- before it; a frame length over the cap is refused before its body is
-- read or allocated.
module ConformanceSpec (spec, withPair) where

import Control.Concurrent.Async (concurrently)
import Control.Exception (bracket, try)
import Control.Monad (forM, forM_)
import qualified Data.ByteString as B
import Data.IORef
import Herd.Transport
import Herd.Transport.Shm (ringBytes, shmLoopback)
import Herd.Transport.Tcp (acceptTcp, connectTcp, listenPort, listenTcp)
import Herd.Transport.Unix (acceptUnix, connectUnix, listenUnix)
import Network.Socket (close)
import System.IO.Unsafe (unsafePerformIO)
import System.Timeout (timeout)
import Test.Hspec
import Test.Hspec.QuickCheck (modifyMaxSuccess)
import Test.QuickCheck
import Test.QuickCheck.Monadic (assert, monadicIO, run)

-- | Two connected ends of a fresh link of this kind.
withPair :: TransportKind -> ((Connection, Connection) -> IO a) -> IO a
withPair kind body = case kind of
  TcpTransport -> bracket (listenTcp "127.0.0.1" 0) close $ \l -> do
    port <- listenPort l
    bracket (concurrently (connectTcp "127.0.0.1" port) (acceptTcp l)) closeBoth body
  UnixTransport -> do
    salt <- atomicModifyIORef' unixSalt (\k -> (k + 1, k))
    bracket (listenUnix salt) (close . fst) $ \(l, name) ->
      bracket (concurrently (connectUnix name) (acceptUnix l)) closeBoth body
  ShmTransport -> bracket shmLoopback (\(a, b, _) -> closeBoth (a, b)) (\(a, b, _) -> body (a, b))
  where closeBoth (a, b) = closeConnection a >> closeConnection b

-- abstract socket names of this process must differ between tests
unixSalt :: IORef Int
unixSalt = unsafePerformIO (newIORef 900000)
{-# NOINLINE unixSalt #-}

-- A frame of this size whose bytes depend on its position.
frameOf :: Int -> Int -> B.ByteString
frameOf i n = fst (B.unfoldrN n (\k -> Just (fromIntegral (i * 31 + k), k + 1)) 0)

-- A length prefix claiming this many bytes.
header :: Int -> B.ByteString
header n = B.pack [ fromIntegral (n `div` (256 ^ k)) | k <- [3, 2, 1, 0 :: Int] ]

cap :: Int
cap = 4 * ringBytes

spec :: Spec
spec = describe "every transport (conformance)" $ mapM_ conformance [minBound .. maxBound]

-- A receive that does not answer within ten seconds fails the test
-- instead of hanging the suite.
recvWithin :: Int -> Connection -> IO (Maybe B.ByteString)
recvWithin limit conn = do
  r <- timeout 10000000 (recvFrame limit conn)
  maybe (ioError (userError "no frame and no error within 10 s")) pure r

conformance :: TransportKind -> Spec
conformance kind = describe (transportName kind) $ do
  modifyMaxSuccess (const 20) $ it "carries frames of any size up to the cap whole and in order, while the reader reads" $
    forAll (resize 15 (listOf (frequency [(5, choose (0, 300)), (2, choose (300, 70000)), (1, choose (70000, cap))]))) $ \lens ->
      monadicIO $ do
        ok <- run $ withPair kind $ \(a, b) -> do
          (_, got) <- concurrently
            (forM_ (zip [0 ..] lens) $ \(i, n) -> sendFrameStrict a (frameOf i n))
            (forM (zip [0 ..] lens) $ \(i, n) -> (== Just (frameOf i n)) <$> recvWithin cap b)
          pure (and got)
        assert ok

  it "carries frames both ways at once" $
    withPair kind $ \(a, b) -> do
      let lens = [ (i * 7919) `mod` 200000 | i <- [1 .. 40] ]
          side me peer = concurrently
            (forM_ (zip [0 ..] lens) $ \(i, n) -> sendFrameStrict me (frameOf i n))
            (forM (zip [0 ..] lens) $ \(i, n) -> (== Just (frameOf i n)) <$> recvWithin cap peer)
      ((_, gotB), (_, gotA)) <- concurrently (side a b) (side b a)
      and gotB `shouldBe` True
      and gotA `shouldBe` True

  it "accepts a frame of exactly the cap and refuses one byte more" $
    withPair kind $ \(a, b) -> do
      let n = 100000
      (_, got) <- concurrently (sendFrameStrict a (frameOf 1 n)) (recvWithin n b)
      got `shouldBe` Just (frameOf 1 n)
      sendRaw a (header (n + 1))
      r <- try (recvWithin n b)
      case r of
        Left (FrameTooLarge claimed limit) -> (claimed, limit) `shouldBe` (n + 1, n)
        other -> expectationFailure ("expected FrameTooLarge, got " ++ show (fmap (fmap B.length) other))

  it "refuses a huge frame length at once, without waiting for or allocating its body" $
    withPair kind $ \(a, b) -> do
      sendRaw a (header 2000000000)
      r <- try (recvWithin 65536 b)
      case r of
        Left (FrameTooLarge 2000000000 65536) -> pure ()
        other -> expectationFailure ("expected FrameTooLarge, got " ++ show (fmap (fmap B.length) other))

  it "reports a frame cut short by the peer's close as truncated" $
    withPair kind $ \(a, b) -> do
      sendRaw a (header 5000 <> B.replicate 1000 7)
      closeConnection a
      r <- try (recvWithin 10000 b)
      case r of
        Left (TruncatedFrame expected got) -> (expected, got) `shouldBe` (5004, 1004)
        other -> expectationFailure ("expected TruncatedFrame, got " ++ show (fmap (fmap B.length) other))

  it "sees a clean close after the frames sent before it" $
    withPair kind $ \(a, b) -> do
      forM_ [1 .. 3] $ \i -> sendFrameStrict a (frameOf i (100 * i))
      closeConnection a
      got <- forM [1 .. 3 :: Int] $ \_ -> recvWithin 1000 b
      got `shouldBe` [ Just (frameOf i (100 * i)) | i <- [1 .. 3] ]
      recvWithin 1000 b `shouldReturn` Nothing
