-- | The fuzzer in small ("Herd.Fuzz"; @herd bench fuzz@ runs it in
-- large): mutated frames of every message type at a master and at a
-- worker's loop, over every transport, must crash and hang nothing, and a
-- master must not keep what its dropped peers leave behind.
module FuzzSpec (spec) where

import Control.Monad (forM_)
import Data.List (isInfixOf)
import Herd
import Herd.Config
import Herd.Fuzz
import Herd.Fuzz.Mutate (mutate, sentinelFrame)
import Herd.Task (taskRef)
import qualified Data.ByteString as B
import Test.Hspec
import TestTasks (squareTask)

spec :: Spec
spec = describe "the fuzzer" $ do
  it "changes most frames, making some longer and some shorter; the sentinel frame is too short to be a packet" $ do
    let frame = B.pack [0 .. 63]
        out = [ mutate seed frame | seed <- [1 .. 1000] ]
    length (filter (/= frame) out) `shouldSatisfy` (> 800)
    length (filter ((> 64) . B.length) out) `shouldSatisfy` (> 100)
    length (filter ((< 64) . B.length) out) `shouldSatisfy` (> 100)
    B.length sentinelFrame `shouldSatisfy` (< 4)

  forM_ [minBound .. maxBound] $ \kind -> do
    it ("drops every fuzzing peer of a master over " ++ transportName kind ++ ", crashing and hanging nothing, with its real worker still serving") $ do
      r <- fuzzMaster kind 300 7 (\c -> (== map (^ (2 :: Int)) [1 .. 20]) <$> farm c squareTask [1 .. 20])
      (rowCrashes r, rowHangs r, rowDropped r) `shouldBe` (0, 0, 300)
    it ("ends a worker's loop with its protocol error, never a crash or a hang, over " ++ transportName kind) $ do
      r <- fuzzWorker kind 300 7 (taskRef squareTask)
      (rowCrashes r, rowHangs r, rowDropped r) `shouldBe` (0, 0, 300)

  it "drops a peer that starts a frame and stops, naming configFrameDeadline" $ do
    (closed, logged) <- stallAtMaster 0.5
    closed `shouldBe` True
    filter ("of a frame and then nothing for 0.5 s (configFrameDeadline)" `isInfixOf`) logged `shouldSatisfy` (not . null)

  it "keeps no buffers of the peers a master dropped (600 sessions, each with a 256 KiB read buffer)" $ do
    r <- fuzzMaster TcpTransport 600 11 (\_ -> pure True)
    case (rowLiveStart r, rowLiveEnd r) of
      (Just before, Just after) -> after - before `shouldSatisfy` (< 16)
      _ -> pendingWith "the test runs without +RTS -T"
