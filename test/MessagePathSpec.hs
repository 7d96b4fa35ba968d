-- | What one small message costs the thread that handles it, in bytes of
-- heap: an urgent message through a sender's packet layer into a shared
-- ring, and its frame taken out at the other end, both ends in this
-- process. A latency probe, a credit, a last value and an evolve answer
-- each go this way alone, so what they allocate is paid per message (the
-- farm's and the stream's per-element figures are guarded in
-- "ClusterSpec").
module MessagePathSpec (spec) where

import Control.Exception (bracket)
import Control.Monad (forM_, unless)
import qualified Data.ByteString as B
import GHC.Conc (getAllocationCounter)
import Herd.Packet (newSender, sendMessage, splitPacket)
import Herd.Core.Packet.Policy (Urgency (..), defaultPacketPolicy)
import Herd.Transport (closeConnection, recvFrame, sendRawParts)
import Herd.Transport.Shm (shmLoopback)
import Herd.Core.Wire (ToWorker (..), decodeToWorker)
import Herd.Wire.Encode (encodeToWorker)
import Test.Hspec

-- | Bytes this thread allocated while running the action.
allocatedBy :: IO () -> IO Int
allocatedBy act = do
  before <- getAllocationCounter
  act
  after <- getAllocationCounter
  pure (fromIntegral (before - after))

spec :: Spec
spec = describe "one small message" $
  it "costs at most 2000 bytes of heap to send urgently over a ring, receive and decode" $
    bracket shmLoopback (\(m, w, _) -> closeConnection m >> closeConnection w) $ \(m, w, _) -> do
      sender <- newSender defaultPacketPolicy (sendRawParts m)
      let n = 20000 :: Int
          one i = do
            sendMessage sender Urgent (encodeToWorker (Ping (fromIntegral i) B.empty))
            frame <- recvFrame maxBound w
            case fmap (map decodeToWorker) . splitPacket 10 =<< maybe (Left "closed") Right frame of
              Right [Right (Ping k _)] | k == fromIntegral i -> pure ()
              other -> expectationFailure ("message " ++ show i ++ " came back as " ++ show other)
      -- the first messages settle the buffers (the sender's, the
      -- connection's read buffer) and the code paths
      forM_ [1 .. 1000 :: Int] one
      bytes <- allocatedBy (forM_ [1 .. n] one)
      let perMessage = fromIntegral bytes / fromIntegral n :: Double
      -- 1848 when measured (2424 before the bytes of a number were read
      -- under one pinning of their buffer, slices were made as consumed,
      -- and a send stopped rebuilding its endpoint; back to the old way of
      -- reading numbers alone, 2136)
      unless (perMessage <= 2000) $
        expectationFailure ("allocated " ++ show perMessage ++ " bytes per message")
      perMessage `shouldSatisfy` (> 0)

