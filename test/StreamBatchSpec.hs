-- | How a stream hands its elements to the packet layer
-- ("Herd.Task.StreamSend"), against a sink that logs what it is given: every
-- element once and in order; ready elements gathered, one still to be
-- computed never held behind the ones before it; an element that throws
-- lets the ones before it go first. And the test of readiness itself
-- ("Herd.Task.Evaluated").
module StreamBatchSpec (spec) where

import Control.Exception
import Control.Monad (forM)
import qualified Data.ByteString as B
import qualified Data.ByteString.Internal as BI
import Data.IORef
import Data.Store (decodeEx)
import Herd.Task.Evaluated (isEvaluated)
import Herd.Task.StreamSend
import Herd.Wire.Staging (newStaging, stageValueAt)
import System.IO.Unsafe (unsafePerformIO)
import Test.Hspec
import Test.QuickCheck

-- A sink that logs each hand-over (its elements, decoded, and whether the
-- packet was to leave), open as the list of answers says (then always).
loggingSink :: Int -> [Bool] -> IO (BatchSink, IO [([Int], Bool)])
loggingSink batchBytes opens = do
  handed <- newIORef []
  answers <- newIORef opens
  let open = atomicModifyIORef' answers (\as -> case as of { a : rest -> (rest, a); [] -> ([], True) })
      hand p bytes _ now = do
        chunk <- BI.create bytes (\dst -> BI.memcpy dst p bytes)
        let values = [ decodeEx (B.take 8 (B.drop (8 * i) chunk)) | i <- [0 .. bytes `div` 8 - 1] ]
        modifyIORef' handed ((values, now) :)
      waitOpen = do
        o <- open
        if o then pure () else waitOpen
  pure ( BatchSink waitOpen open (\_ -> pure False) hand batchBytes
       , reverse <$> readIORef handed )

spec :: Spec
spec = describe "Herd.Task.StreamSend" $ do
  it "hands over every element once, in order, in batches no larger than asked plus one element" $
    property $ \(NonNegative limit) opens (xs :: [Int]) -> ioProperty $ do
      evaluatedList <- evaluate (foldr seq () xs `seq` xs)
      (sink, handed) <- loggingSink (limit `mod` 100) opens
      staging <- newStaging
      sendBatched stageValueAt staging sink evaluatedList
      got <- handed
      pure $ concatMap fst got === xs
        .&&. all (\(vs, _) -> not (null vs) && 8 * (length vs - 1) < max 8 (limit `mod` 100)) got

  it "gathers ready elements: one hand-over for a list evaluated before" $ do
    xs <- evaluate (let ys = [1 .. 200 :: Int] in sum ys `seq` ys)
    (sink, handed) <- loggingSink 100000 []
    staging <- newStaging
    sendBatched stageValueAt staging sink xs
    got <- handed
    map (length . fst) got `shouldBe` [200]

  it "never holds an element back behind one still to be computed" $ do
    count <- newIORef (0 :: Int)
    (sink0, handed) <- loggingSink 100000 []
    let sink = sink0 { sinkHandOver = \p b k n -> modifyIORef' count (+ k) >> sinkHandOver sink0 p b k n }
        -- evaluated when the sender reaches it: how many had been handed over by then
        late = unsafePerformIO (readIORef count)
        {-# NOINLINE late #-}
    xs <- evaluate (let ys = [1, 2, 3, late, 5, 6 :: Int] in length ys `seq` ys)
    staging <- newStaging
    sendBatched stageValueAt staging sink xs
    got <- handed
    concatMap fst got `shouldBe` [1, 2, 3, 3, 5, 6]

  it "hands over the elements before one that throws, then rethrows" $ do
    (sink, handed) <- loggingSink 100000 []
    let bad = (7, error "element four") :: (Int, Int)
    xs <- evaluate (let ys = [(1, 1), (2, 2), (3, 3), bad, (5, 5)] in foldr seq () ys `seq` ys)
    staging <- newStaging
    r <- try (sendBatched stageValueAt staging sink xs)
    either (\(ErrorCall m) -> m) (const "no exception") r `shouldBe` "element four"
    got <- handed
    -- a pair is two Ints: the logging sink reads them as two values each
    concatMap fst got `shouldBe` [1, 1, 2, 2, 3, 3]

  it "sends every element alone while the window would not take one more" $ do
    xs <- evaluate (let ys = [1 .. 5 :: Int] in sum ys `seq` ys)
    (sink, handed) <- loggingSink 100000 []
    staging <- newStaging
    sendBatched stageValueAt staging sink { sinkOpen = pure False } xs
    got <- handed
    map fst got `shouldBe` map pure [1 .. 5]

  describe "Herd.Task.Evaluated" $ do
    it "tells an evaluated value from one still to be computed, without evaluating it" $ do
      ref <- newIORef (0 :: Int)
      let thunk = unsafePerformIO (modifyIORef' ref (+ 1) >> pure (42 :: Int))
          {-# NOINLINE thunk #-}
      before <- isEvaluated thunk
      readIORef ref `shouldReturn` 0
      _ <- evaluate thunk
      after <- isEvaluated thunk
      (before, after) `shouldBe` (False, True)
      built <- forM [1 .. 3 :: Int] (\i -> evaluate (Just i))
      mapM isEvaluated built `shouldReturn` [True, True, True]
