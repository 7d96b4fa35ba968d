-- | The start-of-call balancing ("Herd.Core.Evolve.Balance") against a plain
-- model of its rule: the least loaded other worker is found by a scan,
-- loads kept in a map. The heap inside 'balance' must give the same moves
-- in the same order.
module BalanceSpec (spec) where

import Data.List (sortBy)
import qualified Data.Map.Strict as M
import Data.Ord (Down (..), comparing)
import Herd.Core.Evolve.Balance (balance)
import Herd.Core.Evolve.Registry (StateId (..))
import Test.Hspec
import Test.QuickCheck

-- The rule as written, in O(workers) a move.
modelBalance :: M.Map Int [(Double, StateId)] -> [(StateId, Int, Int, Double)]
modelBalance held
  | M.size held < 2 = []
  | otherwise = go loads0 donors
  where
    loads0 = M.map (sum . map fst) held
    target = sum (M.elems loads0) / fromIntegral (M.size held)
    donors = [ (w, drop 1 ss) | (w, ss) <- sortBy (comparing (Down . (loads0 M.!) . fst)) (M.toList held)
                              , loads0 M.! w > target ]
    go _ [] = []
    go loads ((w, cands) : rest) = let (loads', moves) = give loads w cands in moves ++ go loads' rest
    give loads _ [] = (loads, [])
    give loads w ((c, s) : more)
      | load > target + c / 2
      , (lt, t) : _ <- [ minimum [ (l, v) | (v, l) <- M.toList loads, v /= w ] ]
      , lt + c < load =
          let (loads', moves) = give (M.insert t (lt + c) (M.insert w (load - c) loads)) w more
          in (loads', (s, w, t, c) : moves)
      | otherwise = give loads w more
      where load = loads M.! w

-- Workers with a few states each, costs from a small set so that ties
-- between loads happen often.
genHeld :: Gen (M.Map Int [(Double, StateId)])
genHeld = do
  n <- choose (0, 40)
  ws <- mapM (\w -> do
                k <- frequency [(3, choose (0, 3)), (1, choose (4, 30))]
                cs <- vectorOf k (elements [0.01, 0.02, 0.03, 0.05, 0.1])
                pure (w, zip cs (map (\i -> StateId (fromIntegral (w * 1000 + i))) [1 :: Int ..])))
             [1 .. n]
  pure (M.fromList [ (w, sortBy (comparing (\(c, s) -> (Down c, s))) ss) | (w, ss) <- ws ])

spec :: Spec
spec = describe "balancing a call's start" $ do
  it "moves exactly what the rule says, in its order" $ property $
    forAll genHeld $ \held -> balance held === modelBalance held
  it "never raises the most loaded worker's load, and moves each state at most once" $ property $
    forAll genHeld $ \held ->
      let moves = balance held
          loads0 = M.map (sum . map fst) held
          loads = foldl (\m (_, from, to, c) -> M.adjust (+ c) to (M.adjust (subtract c) from m)) loads0 moves
          states = [ s | (s, _, _, _) <- moves ]
      in conjoin [ property (M.null held || maximum (M.elems loads) <= maximum (M.elems loads0) + 1e-9)
                 , length states === M.size (M.fromList [ (s, ()) | s <- states ]) ]
