{-# LANGUAGE ScopedTypeVariables #-}
-- | Large messages on the send and receive paths: a large value at a
-- message's end leaves as a part of its own (the value's bytes, not a
-- copy) and arrives whole, a small one inside the packet; a master's link
-- whose socket is full queues what the kernel did not take without
-- mixing up the frame heads its sender reuses; a receiver that reads a
-- large frame straight into a buffer of its own still applies its cap.
module LargeMessageSpec (spec) where

import Control.Concurrent.Async (concurrently, withAsync)
import Control.Exception (evaluate, try)
import Control.Monad (forM, forM_)
import qualified Data.ByteString as B
import qualified Data.ByteString.Internal as BI
import Data.IORef
import Data.List (foldl')
import qualified Data.Map.Strict as M
import ClusterSpec (withTestClusterConfig)
import Herd
import Herd.Config
import Herd.Examples.Eden (echoProcess, wordsItem)
import TestTasks (byteSumEvolver, byteSumTask)
import Herd.Master.Link (LinkHandle (..), openLink, stopWriting)
import Herd.Packet
import Herd.Core.Packet.Policy (PacketPolicy (..), Urgency (..))
import Herd.Transport
import Herd.Core.Wire (ToWorker (..), decodeToWorker)
import Herd.Wire.Encode (toWorkerParts)
import SocketSpec (withSocketPair)
import Test.Hspec

-- Bytes that differ with the seed and the position.
bytesOf :: Int -> Int -> B.ByteString
bytesOf seed n = fst (B.unfoldrN n (\k -> Just (fromIntegral (seed * 131 + k * 7 + k `div` 251), k + 1)) 0)

-- A frame as a sender hands it out, read back into its messages.
messagesOf :: B.ByteString -> Either String [B.ByteString]
messagesOf frame = splitPacket 16 (B.drop 4 frame)

spec :: Spec
spec = describe "large messages" $ do
  it "send a large value as a part of its own, not copied, and a small one inside the packet" $ do
    handed <- newIORef []
    -- the first part is the sender's buffer: copied here, as a link must
    s <- newSender (PacketPolicy True 65536 10) $ \parts -> case parts of
      (own : kept) -> modifyIORef handed ((B.copy own, kept) :)
      [] -> pure ()
    let big = bytesOf 1 (300 * 1024)
        small = bytesOf 2 100
        send msg = let (enc, tl) = toWorkerParts msg in sendMessageTail s Urgent enc tl
    send (Ping 7 big)
    send (Ping 8 small)
    flushIdle s
    frames <- reverse <$> readIORef handed
    case frames of
      [(bigHead, [bigTail]), (smallFrame, [])] -> do
        -- the tail handed out is the value itself: same buffer, no copy
        let (fp, off, len) = BI.toForeignPtr bigTail
            (fp', off', len') = BI.toForeignPtr big
        (fp == fp', off, len) `shouldBe` (True, off', len')
        (fmap (map decodeToWorker) . messagesOf) (bigHead <> bigTail) `shouldBe` Right [Right (Ping 7 big)]
        (fmap (map decodeToWorker) . messagesOf) smallFrame `shouldBe` Right [Right (Ping 8 small)]
      other -> expectationFailure ("expected a frame of two parts, then one of one part; got part counts "
                                   ++ show [ 1 + length kept | (_, kept) <- other ])

  it "leave a master's link whole and in order when the socket is full and the rest waits for the writer" $
    withSocketPair $ \(master, worker) -> do
      l <- openLink defaultConfig master (\why -> expectationFailure ("the link broke: " ++ why))
      -- far more than the socket holds, sent before anything is read: most
      -- of it waits for the link's writer, while the sender reuses the
      -- buffer where it frames each message's head
      let count = 24
          payload i = bytesOf i (1024 * 1024 + i)
      forM_ [1 .. count] $ \i ->
        let (enc, tl) = toWorkerParts (Ping (fromIntegral i) (payload i)) in sendMessageTail (lhSender l) Urgent enc tl
      got <- forM [1 .. count] $ \_ -> do
        frame <- recvFrame (4 * 1024 * 1024) worker
        pure (fmap (map decodeToWorker) . splitPacket 16 <$> frame)
      stopWriting l
      got `shouldBe` [ Just (Right [Right (Ping (fromIntegral i) (payload i))]) | i <- [1 .. count] ]

  it "read the next large frame into the buffer of one given back, and never into one still held" $
    withSocketPair $ \(a, b) -> do
      let frames@[first, held, given, larger, reusing] =
            [bytesOf i n | (i, n) <- zip [1 ..] [1024 * 1024, 1024 * 1024, 600 * 1024, 2 * 1024 * 1024, 500 * 1024]]
          bufferOf bs = let (fp, _, _) = BI.toForeignPtr bs in fp
          recv = recvFrame (4 * 1024 * 1024) b >>= maybe (fail "the connection ended") pure
      (_, (f, h, g, gWhole, l, r)) <- concurrently (mapM_ (sendFrameStrict a) frames) $ do
        f <- recv
        h <- recv
        -- giving back a frame handed out before the last one does nothing
        recycleFrame b f
        g <- recv
        gWhole <- pure $! g == given   -- before its buffer is given back
        recycleFrame b g
        -- too large for the buffer given back: a fresh one
        l <- recv
        -- fits: read into the buffer given back
        r <- recv
        pure (f, h, g, gWhole, l, r)
      (f == first, h == held, gWhole, l == larger, r == reusing) `shouldBe` (True, True, True, True, True)
      [bufferOf g == bufferOf x | x <- [f, h, l, r]] `shouldBe` [False, False, False, True]
      [bufferOf h == bufferOf x | x <- [f, g, l, r]] `shouldBe` [False, False, False, False]

  it "arrive whole when read straight into a buffer of their size, and over the cap are refused" $
    withSocketPair $ \(a, b) -> do
      let frames = [bytesOf i n | (i, n) <- zip [1 ..] [3 * 1024 * 1024, 10, 700 * 1024, 257 * 1024, 5]]
      (_, got) <- concurrently (mapM_ (sendFrameStrict a) frames) (mapM (const (recvFrame (4 * 1024 * 1024) b)) frames)
      got `shouldBe` map Just frames
      -- larger than a read, within a cap that allows a small frame only
      r <- withAsync (sendFrameStrict a (bytesOf 9 (600 * 1024))) $ \_ -> try (recvFrame (500 * 1024) b)
      case r of
        Left (FrameTooLarge n cap) -> (n, cap) `shouldBe` (600 * 1024, 500 * 1024)
        other -> expectationFailure ("expected FrameTooLarge, got " ++ show (fmap (fmap B.length) other))

  it "keep large stream elements, farm arguments and evolve states whole through a worker that reuses packet buffers" $
    withTestClusterConfig 1 (\c -> c { configTransport = Just UnixTransport }) $ \_ cluster -> do
      -- each larger than a read (256 KiB): each arrives as a large frame,
      -- and the next may be read into its buffer once the worker is done
      -- with it; stream input and states are kept past their packet
      let item i = wordsItem 40000 i
          check (n, ok) (y, i) = let ok' = ok && y == item i in ok' `seq` (n + 1, ok')
      (count, same) <- withStream cluster echoProcess (map item [1 .. 120]) $ \ys ->
        evaluate (foldl' check (0 :: Int, True) (zip ys [1 ..]))
      (count, same) `shouldBe` (120, True)
      let arg i = bytesOf i (300 * 1024)
          sumOf = B.foldl' (\k w -> k + fromIntegral w) (0 :: Int)
      sums <- farm cluster byteSumTask (map arg [1 .. 40])
      sums `shouldBe` map (sumOf . arg) [1 .. 40]
      ids <- resetStates cluster byteSumEvolver (map arg [1 .. 30])
      out <- evolveMany cluster byteSumEvolver (M.fromList [ (sid, 7) | sid <- ids ])
      [ map snd <$> M.lookup sid out | sid <- ids ] `shouldBe` [ Just [sumOf (arg i) + 7] | i <- [1 .. 30] ]
