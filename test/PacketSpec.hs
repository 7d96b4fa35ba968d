-- | The flush policy's promises, checked over random event sequences with
-- 'simulate' (which runs the same decisions the packet layer's driver
-- follows), and the packet splitter's refusal of packets that lie.
module PacketSpec (spec) where

import qualified Data.ByteString as B
import Data.List (isInfixOf)
import Herd.Packet (encodeBytes, packetOf, splitPacket)
import Herd.Core.Packet.Policy
import Test.Hspec
import Test.QuickCheck

-- | Events with increasing times; messages numbered in offering order.
newtype Events = Events [Event Int] deriving (Show)

instance Arbitrary Events where
  arbitrary = do
    steps <- listOf (frequency [(6, offer), (2, tick), (1, pure (const Idle))])
    gaps <- vectorOf (length steps) (choose (0, 0.003 :: Double))
    let times = scanl1 (+) gaps
    pure (Events [ f (t, i) | (f, t, i) <- zip3 steps times [0 ..] ])
    where
      offer = do
        size <- frequency [(8, choose (1, 200)), (1, choose (200, 5000))]
        urgent <- frequency [(5, pure Bulk), (1, pure Urgent)]
        pure (\(t, i) -> Offer t urgent size i)
      tick = pure (\(t, _) -> Tick t)

instance Arbitrary PacketPolicy where
  arbitrary = PacketPolicy <$> frequency [(4, pure True), (1, pure False)]
                           <*> choose (64, 4096) <*> choose (0.0005, 0.004)

offered :: [Event Int] -> [Int]
offered evs = [ m | Offer _ _ _ m <- evs ]

sizeOf :: [Event Int] -> Int -> Int
sizeOf evs m = head [ s | Offer _ _ s m' <- evs, m' == m ]

spec :: Spec
spec = describe "Herd.Packet" $ do
  it "keeps order per peer, and loses and duplicates nothing" $ property $ \policy (Events evs) ->
    let (sent, held, _) = simulate policy evs
    in concatMap snd sent ++ map snd held === offered evs

  it "never holds more than the buffer's capacity, and packs no more into a packet" $ property $
    \policy (Events evs) ->
      let (sent, _, fills) = simulate policy evs
          bytes ms = sum [ sizeOf evs m + messageOverhead | m <- ms ]
      in conjoin [ counterexample (show f) (fillBytes f <= policyCapacity policy) | f <- fills ]
         .&&. conjoin [ counterexample (show p) (length ms == 1 || bytes ms <= policyCapacity policy)
                      | p@(_, ms) <- sent ]

  it "holds nothing past the timeout: after any event, the oldest buffered message is younger" $ property $
    \policy (Events evs) ->
      let (_, _, fills) = simulate policy evs
          at ev = case ev of { Offer t _ _ _ -> Just t; Tick t -> Just t; Idle -> Nothing }
      in conjoin [ counterexample (show (ev, f)) (fillCount f == 0 || t - fillSince f < policyTimeout policy)
                 | (ev, f) <- zip evs fills, Just t <- [at ev] ]

  it "never leaves an urgent message buffered, and empties the buffer when idle" $ property $
    \policy (Events evs) ->
      let (_, _, fills) = simulate policy evs
      in conjoin [ counterexample (show ev) (fillCount f == 0)
                 | (ev, f) <- zip evs fills, urgentOrIdle ev ]
  it "sends one message per packet with chunking off" $ property $ \policy (Events evs) ->
    let (sent, held, _) = simulate policy { policyChunking = False } evs
    in null held .&&. all ((== 1) . length . snd) sent

  it "takes the fast path exactly when the plan sends nothing" $ property $
    \policy (t :: Double) urgent (size :: Int) (bytes :: Int) (count :: Int) (since :: Double) ->
      let fill = Fill (abs bytes `mod` (policyCapacity policy + 1)) (abs count `mod` 50) since
          s = 1 + abs size `mod` 6000
          u = if urgent then Urgent else Bulk
      in joinsQuietly policy t u s fill === (fillCount fill > 0 && planAdd policy t u s fill == AddPlan Nothing Nothing Nothing)

  it "refuses packets whose count or lengths claim more than they hold" $ do
    good <- packetOf [encodeBytes (B.pack [1, 2, 3]), encodeBytes (B.pack [4])]
    splitPacket 100 good `shouldBe` Right [B.pack [1, 2, 3], B.pack [4]]
    let lie = B.pack [0, 0, 0, 3] <> B.drop 4 good                 -- claims 3 messages, holds 2
        long = B.take 4 good <> B.pack [0, 0, 1, 0] <> B.drop 8 good  -- first message claims 256 bytes
        extra = good <> B.pack [9, 9]
        many = B.pack [0, 0, 0xFF, 0xFF]
    either id (const "") (splitPacket 100 lie) `shouldSatisfy` ("claims 3 messages" `isInfixOf`)
    either id (const "") (splitPacket 100 long) `shouldSatisfy` ("claims 256 bytes" `isInfixOf`)
    either id (const "") (splitPacket 100 extra) `shouldSatisfy` ("after its 2 messages" `isInfixOf`)
    either id (const "") (splitPacket 100 many) `shouldSatisfy` ("more than the limit" `isInfixOf`)
  where
    urgentOrIdle ev = case ev of { Offer _ Urgent _ _ -> True; Idle -> True; _ -> False }
