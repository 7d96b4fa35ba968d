-- | A stream's flow window ("Herd.Stream.Flow") against a model: a list
-- of the sizes in flight. Whatever sends and acknowledgements come, the
-- window is open exactly when the model has room in elements and bytes,
-- and acknowledgements free exactly the oldest elements' bytes (more than
-- are in flight free all of them).
module FlowSpec (spec) where

import Control.Monad (foldM)
import Herd.Stream.Flow
import Test.Hspec
import Test.QuickCheck

-- What a sender and its receiver do.
data Op = Send Int | Ack Int
  deriving Show

instance Arbitrary Op where
  arbitrary = frequency [(4, Send <$> frequency [(3, choose (0, 50)), (1, choose (50, 3000))]), (1, Ack <$> choose (-2, 12))]

spec :: Spec
spec = describe "Herd.Stream.Flow" $ do
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
