-- | Properties of the worker's pure farm step ("Herd.Worker.Step"): for
-- any batches, with functions found or not and each call computing,
-- throwing or failing to decode its argument, every batch is answered
-- exactly once, with the results before its first failure, and the right
-- end; a protocol break is named.
module WorkerStepSpec (spec) where

import Data.List (foldl')
import Herd.Packet.Policy (Urgency (..))
import Herd.Wire (FromWorker (..))
import Herd.Worker.Step
import Test.Hspec
import Test.QuickCheck

data Call = Ok | Bad | Throws
  deriving (Eq, Show)

data BatchCase = BatchCase { caseFound :: Bool, caseCalls :: [Call] }
  deriving (Show)

instance Arbitrary BatchCase where
  arbitrary = BatchCase <$> frequency [(5, pure True), (1, pure False)]
                        <*> resize 8 (listOf (frequency [(8, pure Ok), (1, pure Bad), (1, pure Throws)]))

-- Drive one batch: what the worker sent, with a 'Result' for each call
-- that computed (the loop sends it), and whether anything broke.
runBatch :: (Batches (), [FromWorker], [String]) -> (Int, BatchCase) -> (Batches (), [FromWorker], [String])
runBatch (b0, sent0, broken0) (bid, BatchCase found calls) =
  let (b1, v1) = startBatch 0 (fromIntegral bid) (if found then Right () else Left "unknown") (length calls) "f" b0
      go (b, out) call =
        let (b', vs) = argument 1 b
        in foldl' (\(bb, oo) v -> case v of
                     Apply () _ -> let outcome = case call of
                                         Ok -> Computed
                                         Bad -> Undecodable "garbage"
                                         Throws -> Threw "boom"
                                       (bb', vs') = applied 2 outcome bb
                                   in (bb', oo ++ [ Reply Bulk (Result mempty) | call == Ok ] ++ vs')
                     _ -> (bb, oo ++ [v])) (b', out) vs
      (b2, v2) = foldl' go (b1, v1) calls
      replies = [ m | Reply _ m <- v2 ]
      broken = [ why | Broken why <- v2 ]
  in (b2, sent0 ++ replies, broken0 ++ broken)

-- What one batch's answer must be.
expected :: Int -> BatchCase -> [FromWorker]
expected bid (BatchCase found calls)
  | not found = [BatchRejected (fromIntegral bid) mempty]
  | otherwise =
      let (ok, rest) = span (== Ok) calls
      in replicate (length ok) (Result mempty) ++ case rest of
           [] -> [BatchDone (fromIntegral bid) 0]
           Throws : _ -> [TaskThrew (fromIntegral bid) (fromIntegral (length ok)) mempty]
           _ -> [BatchRejected (fromIntegral bid) mempty]

-- Compare answers, ignoring the texts and busy times.
shape :: FromWorker -> FromWorker
shape m = case m of
  BatchDone b _ -> BatchDone b 0
  TaskThrew b p _ -> TaskThrew b p mempty
  BatchRejected b _ -> BatchRejected b mempty
  Result _ -> Result mempty
  other -> other

spec :: Spec
spec = describe "Herd.Worker.Step" $ do
  it "answers every batch once: its results before the first failure, then the right end" $
    property $ \cases ->
      let (_, sent, broken) = foldl' runBatch (noBatch, [], []) (zip [1 ..] cases)
      in counterexample (show sent) $
           null broken && map shape sent == concat (zipWith expected [1 ..] cases)

  it "measures a batch from its first argument to its last" $ do
    let (b1, _) = startBatch 0 7 (Right ()) 2 "f" noBatch
        (b2, _) = argument 1.5 b1
        (b3, _) = applied 1.6 Computed b2
        (b4, _) = argument 1.7 b3
        (_, out) = applied 2.0 Computed b4
    [ busy | Reply _ (BatchDone 7 busy) <- out ] `shouldBe` [500000000]

  it "names an argument outside any batch, and a batch started before the last one's arguments came" $ do
    let broken vs = [ why | Broken why <- vs ]
        (_, v1) = argument 0 (noBatch :: Batches ())
        (b, _) = startBatch 0 1 (Right ()) 3 "f" noBatch
        (_, v2) = startBatch 0 2 (Right ()) 1 "f" b
    broken v1 `shouldBe` ["master sent an argument outside any batch"]
    broken v2 `shouldBe` ["master started batch 2 while batch 1 still had arguments to come"]

  it "sends urgent ends for failures and a bulk end for a batch done" $ do
    let (b, _) = startBatch 0 1 (Right ()) 1 "f" noBatch
        (b', _) = argument 0 b
        urgencies o = [ u | Reply u _ <- snd (applied 0 o b') ]
    urgencies Computed `shouldBe` [Bulk]
    urgencies (Threw "x") `shouldBe` [Urgent]
