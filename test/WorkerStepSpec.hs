-- | Properties of the worker's pure farm step ("Herd.Core.Worker.Step"): for
-- any batches, their arguments in runs of any length, with functions
-- found or not and each call computing,
-- throwing or failing to decode its argument, every batch is answered
-- exactly once, with the results before its first failure, and the right
-- end; a protocol break is named.
module WorkerStepSpec (spec) where

import Data.List (foldl')
import Herd.Core.Packet.Policy (Urgency (..))
import Herd.Core.Wire (FromWorker (..))
import Herd.Core.Worker.Step
import Test.Hspec
import Test.QuickCheck

data Call = Ok | Bad | Throws
  deriving (Eq, Show)

-- A batch: whether its function is found, and its calls in the runs of
-- arguments they arrive in.
data BatchCase = BatchCase { caseFound :: Bool, caseRuns :: [[Call]] }
  deriving (Show)

instance Arbitrary BatchCase where
  arbitrary = BatchCase <$> frequency [(5, pure True), (1, pure False)]
                        <*> resize 5 (listOf (resize 4 (listOf1 (frequency [(8, pure Ok), (1, pure Bad), (1, pure Throws)]))))

caseCalls :: BatchCase -> [Call]
caseCalls = concat . caseRuns

-- Drive one batch: what the worker sent, with a 'Results' for the calls
-- of each run that computed before a failure (the loop sends them), and
-- whether anything broke.
runBatch :: (Batches (), [FromWorker], [String]) -> (Int, BatchCase) -> (Batches (), [FromWorker], [String])
runBatch (b0, sent0, broken0) (bid, bc) =
  let (b1, v1) = startBatch 0 (fromIntegral bid) (if caseFound bc then Right () else Left "unknown") (length (caseCalls bc)) "f" b0
      go (b, out) run =
        let (b', vs) = arguments 1 (length run) b
        in foldl' (\(bb, oo) v -> case v of
                     Apply () _ k | k == length run ->
                       let (ok, rest) = span (== Ok) run
                           outcome = case rest of
                             [] -> Computed
                             Bad : _ -> Undecodable (length ok) "garbage"
                             _ -> Threw (length ok) "boom"
                           (bb', vs') = applied 2 outcome bb
                       in (bb', oo ++ [ Reply Bulk (Results (fromIntegral (length ok)) mempty) | not (null ok) ] ++ vs')
                     Apply {} -> (bb, oo ++ [Broken "a run applied with the wrong count"])
                     _ -> (bb, oo ++ [v])) (b', out) vs
      (b2, v2) = foldl' go (b1, v1) (caseRuns bc)
      replies = [ m | Reply _ m <- v2 ]
      broken = [ why | Broken why <- v2 ]
  in (b2, sent0 ++ replies, broken0 ++ broken)

-- What one batch's answer must be.
expected :: Int -> BatchCase -> [FromWorker]
expected bid bc
  | not (caseFound bc) = [BatchRejected (fromIntegral bid) mempty]
  | otherwise =
      let (ok, rest) = span (== Ok) (caseCalls bc)
      in [ Results (fromIntegral (length ok)) mempty | not (null ok) ] ++ case rest of
           [] -> [BatchDone (fromIntegral bid) 0]
           Throws : _ -> [TaskThrew (fromIntegral bid) (fromIntegral (length ok)) mempty]
           _ -> [BatchRejected (fromIntegral bid) mempty]

-- Compare answers, ignoring the texts and busy times, and counting
-- results rather than runs.
shape :: [FromWorker] -> [FromWorker]
shape ms = case ms of
  Results a _ : Results b _ : rest -> shape (Results (a + b) mempty : rest)
  m : rest -> one m : shape rest
  [] -> []
  where
    one m = case m of
      BatchDone b _ -> BatchDone b 0
      TaskThrew b p _ -> TaskThrew b p mempty
      BatchRejected b _ -> BatchRejected b mempty
      Results k _ -> Results k mempty
      other -> other

spec :: Spec
spec = describe "Herd.Core.Worker.Step" $ do
  it "answers every batch once: its results before the first failure, then the right end" $
    property $ \cases ->
      let (_, sent, broken) = foldl' runBatch (noBatch, [], []) (zip [1 ..] cases)
      in counterexample (show sent) $
           classify (any ((> 1) . length) (concatMap caseRuns cases)) "runs of several arguments" $
           null broken && shape sent == concatMap (shape . uncurry expected) (zip [1 ..] cases)

  it "answers a batch cancelled before any run, between runs or during one as stopped, once, unless it had ended" $
    property $ \bc (NonNegative k0) during ->
      let runs = caseRuns bc
          k = k0 `mod` (length runs + 1)
          n = length (caseCalls bc)
          (b1, v1) = startBatch 0 9 (if caseFound bc then Right () else Left "unknown") n "f" noBatch
          feed (b, out) run =
            let (b', vs) = arguments 1 (length run) b
            in foldl' (\(bb, oo) v -> case v of
                         Apply () _ _ ->
                           let (ok, rest) = span (== Ok) run
                               outcome = case rest of
                                 [] -> Computed
                                 Bad : _ -> Undecodable (length ok) "garbage"
                                 _ -> Threw (length ok) "boom"
                           in let (bb', vs') = applied 2 outcome bb
                              in (bb', oo ++ [ Reply Bulk (Results (fromIntegral (length ok)) mempty) | not (null ok) ] ++ vs')
                         _ -> (bb, oo ++ [v])) (b', out) vs
          (b2, v2) = foldl' feed (b1, v1) (take k runs)
          -- the k-th run stopped as it computed, or the cancel between runs
          (b3, v3) = case drop k runs of
            run : _ | during, Apply {} : _ <- snd (arguments 1 (length run) b2) ->
              let (bb, _) = arguments 1 (length run) b2 in applied 2 Stopped bb
            _ -> cancel 9 b2
          (_, v4) = foldl' feed (b3, []) (drop (k + 1) runs)
          ended = [ m | Reply _ m <- v2, isEnd m ]
          isEnd m = case m of { BatchDone {} -> True; TaskThrew {} -> True; BatchRejected {} -> True; _ -> False }
          stops = [ () | Reply _ (BatchStopped 9) <- v3 ++ v4 ]
      in counterexample (show [ [ m | Reply _ m <- vs ] | vs <- [v2, v3, v4] ]) $ conjoin
           [ length stops === (if null ended then 1 else 0)
           , [ () | Reply _ m <- v3 ++ v4, isEnd m ] === []
           , [ () | Apply {} <- v4 ] === [] ]

  it "measures a batch from its first run of arguments to its last" $ do
    let (b1, _) = startBatch 0 7 (Right ()) 3 "f" noBatch
        (b2, _) = arguments 1.5 2 b1
        (b3, _) = applied 1.6 Computed b2
        (b4, _) = arguments 1.7 1 b3
        (_, out) = applied 2.0 Computed b4
    [ busy | Reply _ (BatchDone 7 busy) <- out ] `shouldBe` [500000000]

  it "names arguments outside any batch, too many arguments, and a batch started before the last one's arguments came" $ do
    let broken vs = [ why | Broken why <- vs ]
        (_, v1) = arguments 0 1 (noBatch :: Batches ())
        (b, _) = startBatch 0 1 (Right ()) 3 "f" noBatch
        (_, v2) = startBatch 0 2 (Right ()) 1 "f" b
        (_, v3) = arguments 0 4 b
    broken v1 `shouldBe` ["master sent arguments outside any batch"]
    broken v2 `shouldBe` ["master started batch 2 while batch 1 still had arguments to come"]
    broken v3 `shouldBe` ["master sent 4 arguments for batch 1, which has 3 to come"]

  it "names the failed task by its position in the batch, not in the run" $ do
    let (b1, _) = startBatch 0 5 (Right ()) 6 "f" noBatch
        (b2, _) = arguments 0 4 b1
        (b3, _) = applied 0 Computed b2
        (b4, _) = arguments 0 2 b3
        (_, out) = applied 0 (Threw 1 "boom") b4
    [ pos | Reply _ (TaskThrew 5 pos _) <- out ] `shouldBe` [5]

  it "sends urgent ends for failures and a bulk end for a batch done" $ do
    let (b, _) = startBatch 0 1 (Right ()) 1 "f" noBatch
        (b', _) = arguments 0 1 b
        urgencies o = [ u | Reply u _ <- snd (applied 0 o b') ]
    urgencies Computed `shouldBe` [Bulk]
    urgencies (Threw 0 "x") `shouldBe` [Urgent]
