-- | A stream's flow window ("Herd.Task.StreamFlow") against a model: a list
-- of the sizes in flight. Whatever sends and acknowledgements come, the
-- window is open exactly when the model has room in elements and bytes,
-- and acknowledgements free exactly the oldest elements' bytes (more than
-- are in flight free all of them).
module FlowSpec (spec) where

import Control.Monad (foldM)
import Herd.Task.StreamFlow
import Test.Hspec
import Test.QuickCheck

-- What a sender and its receiver do.
data Op = Send Int | Ack Int
  deriving Show

instance Arbitrary Op where
  arbitrary = frequency [(4, Send <$> frequency [(3, choose (0, 50)), (1, choose (50, 3000))]), (1, Ack <$> choose (-2, 12))]

spec :: Spec
spec = describe "Herd.Task.StreamFlow" $ do
  it "is open exactly when elements and bytes in flight leave room, and acknowledgements free the oldest" $
    property $ \(Positive window) (Positive bytesWindow) ops -> ioProperty $ do
      let w = 1 + window `mod` 20
      f <- newFlow w bytesWindow
      let step (ok, model) op = do
            open <- flowOpen f
            let modelOpen = length model < w && sum model < bytesWindow
            case op of
              -- a sender sends only when the window is open
              Send s | open -> flowSent f s >> check (ok && open == modelOpen) (model ++ [s])
                     | otherwise -> check (ok && open == modelOpen) model
              Ack k -> flowAcked f k >> check (ok && open == modelOpen) (drop (max 0 k) model)
          check ok model = do
            got <- flowInFlight f
            pure (ok && got == (length model, sum model), model)
      (ok, _) <- foldM step (True, []) (ops :: [Op])
      pure ok

  it "asks for an acknowledgement each quarter window of elements or of bytes, and never for nothing" $ do
    grantDue 4096 (4 * 1024 * 1024) 1024 10 `shouldBe` True
    grantDue 4096 (4 * 1024 * 1024) 1023 10 `shouldBe` False
    grantDue 4096 (4 * 1024 * 1024) 3 (1024 * 1024) `shouldBe` True
    grantDue 4096 (4 * 1024 * 1024) 0 0 `shouldBe` False
    grantDue 2 100 1 0 `shouldBe` True

  describe "early sends at a stream's start" $ do
    it "sends after a sixteenth of a packet, then after twice as much more each time, four times at most" $
      property $ \(Positive capacity0) sizes0 -> do
        let capacity = 64 + capacity0 `mod` 200000
            sizes = map ((`mod` 3000) . getNonNegative) sizes0
            -- the bytes fed when each early send came
            run _ [] _ = []
            run fed (s : rest) e =
              let (due, e') = earlyAfter capacity s e
              in if due then (fed + s) : run (fed + s) rest e' else run (fed + s) rest e'
            points = run 0 sizes (earlyStart capacity)
            gaps = zipWith (-) points (0 : points)
            step0 = max 1 (capacity `div` 16)
        -- at most four early sends, each gap at least the doubled step
        length points <= 4
          && and [ g >= step0 * 2 ^ i | (i, g) <- zip [0 :: Int ..] gaps ]
          -- and one at every step reached: the first as soon as a step's bytes are in
          && (sum sizes < step0 || not (null points))

    it "sends at 4, 12, 28 and 60 KiB of one-byte elements into 64 KiB packets, then never" $ do
      let go fed e k acc
            | k >= (200000 :: Int) = reverse acc
            | otherwise = let (due, e') = earlyAfter 65536 1 e
                          in go (fed + 1) e' (k + 1) (if due then fed + 1 : acc else acc)
      go (0 :: Int) (earlyStart 65536) 0 [] `shouldBe` [4096, 12288, 28672, 61440]

    it "never sends early with chunking off" $
      fst (earlyAfter 0 1000000 (earlyStart 0)) `shouldBe` False
