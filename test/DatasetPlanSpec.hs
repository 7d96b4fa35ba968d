-- | The datasets' pure plan: placements ("Herd.Core.Dataset.Place")
-- spread evenly and moved only for lost workers; recovery plans, run in
-- a model over random lineages and random kills, make every partition
-- asked for with each step's inputs in place; a narrow step
-- ("Herd.Core.Dataset.Stage") and a shuffle of held partitions
-- ("Herd.Core.Exchange") end once, and a loss ends them with
-- 'PartitionsLost'.
module DatasetPlanSpec (spec) where

import Data.List (foldl')
import qualified Data.ByteString.Char8 as BC
import qualified Data.Map.Strict as M
import qualified Data.Set as S
import GHC.Fingerprint (Fingerprint (..))
import Herd.Core.Base (TaskRef (..), WorkerId)
import Herd.Core.Dataset.Place
import Herd.Core.Dataset.Stage
import Herd.Core.Error (HerdError (..))
import Herd.Core.Exchange
import Herd.Core.Wire (FromWorker (..), ToWorker (..))
import Test.Hspec
import Test.QuickCheck

ref :: TaskRef
ref = TaskRef (Fingerprint 1 2) "step" (Fingerprint 3 4) (Fingerprint 5 6)

workersOf :: [Int] -> [WorkerId]
workersOf = map (fromIntegral . (`mod` 9)) 

loads :: M.Map Int WorkerId -> [WorkerId] -> [Int]
loads placed ws = [ length [ () | w' <- M.elems placed, w' == w ] | w <- S.toList (S.fromList ws) ]

-- A random lineage: sources, narrow steps over earlier datasets of the
-- same partition count, shuffles of earlier datasets; partitions held on
-- random workers of 0..5.
genLineage :: Gen Lineage
genLineage = do
  n <- choose (1, 8)
  foldl' (\g d -> g >>= \l -> addOne l d) (pure M.empty) [1 .. n]
  where
    addOne l d = do
      let earlier = M.toList l
      kind <- choose (0 :: Int, 2)
      (origin, parts) <- case (kind, earlier) of
        (1, _ : _) -> do
          (i, node) <- elements earlier
          let same = [ j | (j, m) <- earlier, nodeParts m == nodeParts node ]
          extra <- sublistOf same
          pure (Narrow (S.toList (S.fromList (i : extra))), nodeParts node)
        (2, _ : _) -> do
          (i, _) <- elements earlier
          p <- choose (1, 5)
          pure (Shuffled i, p)
        _ -> (,) Source <$> choose (1, 5)
      held <- M.fromList . concat <$> mapM (\j -> frequency [(4, (\w -> [(j, w)]) <$> choose (0, 5)), (1, pure [])]) [0 .. parts - 1]
      pure (M.insert (fromIntegral (d :: Int)) (Node origin parts held) l)

spec :: Spec
spec = describe "the datasets' plan" $ do
  it "places partitions evenly, on the given workers only" $
    property $ \(NonEmpty ws0) (Positive n0) ->
      let ws = workersOf ws0; n = n0 `mod` 64 + 1; placed = placeNew ws n
          ls = loads placed ws
      in M.keys placed === [0 .. n - 1] .&&. all (`elem` ws) (M.elems placed) .&&. maximum ls - minimum ls <= 1

  it "moves only a lost worker's partitions, to the live workers holding fewest" $
    property $ \(NonEmpty ws0) (Positive n0) lost0 ->
      let ws = S.toList (S.fromList (workersOf ws0)); n = n0 `mod` 64 + 1
          placed = placeNew ws n
          live = case filter (`notElem` workersOf lost0) ws of
            [] -> take 1 ws
            l -> l
          repaired = repairPlacement live placed
          ls = loads repaired live
      in conjoin [ M.keys repaired === [0 .. n - 1]
                 , property (all (`elem` live) (M.elems repaired))
                 , property (and [ repaired M.! j == w | (j, w) <- M.toList placed, w `elem` live ])
                 , counterexample (show ls) (maximum ls - minimum ls <= 1) ]

  it "plans recovery so every partition asked for is made, each step's inputs in place before it" $
    forAll genLineage $ \lineage -> forAll (sublistOf [0 .. 5 :: WorkerId]) $ \killed ->
      let live w = w `notElem` killed
          target = fst (M.findMax lineage)
          wanted = [0 .. nodeParts (lineage M.! target) - 1]
          plan = recoveryPlan live lineage target wanted
          present0 = M.map (\node -> S.difference (S.fromList [0 .. nodeParts node - 1]) (missingOf live node)) lineage
          runOne (ok, present) (Redo d ps) =
            let node = lineage M.! d
                has i qs = S.fromList qs `S.isSubsetOf` M.findWithDefault S.empty i present
                inputsThere = case nodeOrigin node of
                  Source -> True
                  Narrow ins -> all (\i -> has i ps) ins
                  Shuffled i -> has i [0 .. nodeParts (lineage M.! i) - 1]
            in (ok && inputsThere, M.insertWith S.union d (S.fromList ps) present)
          (allOk, present) = foldl' runOne (True, present0) plan
          datasets = map redoDataset plan
      in counterexample (show plan) $ conjoin
           [ counterexample "a step ran before its inputs were in place" allOk
           , counterexample "the target is not whole" (S.fromList wanted `S.isSubsetOf` M.findWithDefault S.empty target present)
           , counterexample "a dataset was planned twice" (length datasets == S.size (S.fromList datasets))
           , counterexample "a whole target was made again" (not (S.null (missingOf live (lineage M.! target))) || null plan) ]

  it "ends a narrow step once, with every partition's answer in order" $
    property $ \(NonEmpty js0) ->
      let js = S.toList (S.fromList (map (`mod` 20) js0 :: [Int]))
          job = StageJob ref [ StageRun j (fromIntegral (j `mod` 3)) [1] 2 BC.empty | j <- js ]
          (Just st0, outs0) = stageStart 7 job [0, 1, 2]
          answer st j = stageMessage (fromIntegral (j `mod` 3)) (PartRan 7 (fromIntegral j) (BC.pack (show j))) st
          go (Just st) (j : rest) = let (st', outs) = answer st j in outs ++ go st' rest
          go _ _ = []
          ends = [ r | SEnded r <- go (Just st0) (reverse js) ]
      in length [ () | SSend _ (PartRun {}) <- outs0 ] === length js
         .&&. ends === [Right [ BC.pack (show j) | j <- js ]]

  it "ends a narrow step whose worker is lost with PartitionsLost naming its partitions" $ do
    let job = StageJob ref [ StageRun j (fromIntegral (j `mod` 2)) [1] 2 BC.empty | j <- [0 .. 3] ]
        (Just st, _) = stageStart 7 job [0, 1]
    case stageLost 1 "killed" st of
      (Nothing, [SEnded (Left (PartitionsLost _ ps _))]) -> ps `shouldBe` [1, 3]
      other -> expectationFailure (show other)
    -- a worker that was never asked changes nothing
    fst (stageLost 5 "killed" st) `shouldBe` Just st

  it "runs a shuffle of held partitions where they are held and keeps its output there" $ do
    let held = HeldShuffle 4 (M.fromList [(0, 1), (1, 2)]) (M.fromList [(0, 2), (1, 1), (2, 1)]) 5
        job = ExchangeJob ref [BC.empty, BC.empty] 3 Nothing False (Just held)
        Right (x0, outs0) = exchangeStart 9 job [1, 2, 3]
    [ (w, g) | XSend w (GroupRunHeld _ g _ 3 _ 4) <- outs0 ] `shouldBe` [(1, 0), (2, 1)]
    let deliver x (g, j, o) = fst (exchangeMessage o (PartHeld 9 g j) x)
        Just x1 = foldl' (\mx d -> mx >>= \x -> deliver x d) (Just x0) [ (g, j, o) | g <- [0, 1], (j, o) <- [(0, 2), (1, 1)] ]
    -- the third partition's parts: once both are in, its owner keeps it
    let (Just x2, _) = exchangeMessage 1 (PartHeld 9 0 2) x1
        (Just _, outs3) = exchangeMessage 1 (PartHeld 9 1 2) x2
    [ (w, j, d) | XSend w (PartitionKeep _ j _ 2 d) <- outs3 ] `shouldBe` [(1, 2, 5)]

  it "ends a shuffle of held partitions when a worker holding one is lost" $ do
    let held = HeldShuffle 4 (M.fromList [(0, 1), (1, 2)]) (M.fromList [(0, 2), (1, 1)]) 5
        job = ExchangeJob ref [BC.empty, BC.empty] 3 Nothing False (Just held)
        Right (x0, _) = exchangeStart 9 job [1, 2, 3]
    case exchangeLost 2 True "killed" x0 of
      (Nothing, outs) -> [ ps | XEnded (Left (PartitionsLost _ ps _)) <- outs ] `shouldBe` [[0, 1]]
      other -> expectationFailure (show other)
    -- a worker holding nothing of it may go
    fst (exchangeLost 3 True "killed" x0) `shouldSatisfy` maybe False (const True)
    -- and it refuses to start when one is gone already
    either (\e -> case e of PartitionsLost {} -> True; _ -> False) (const False) (exchangeStart 9 job [1, 3]) `shouldBe` True
