-- | The balance between hosts under two-level evolve: the pure plan
-- ("Herd.Core.Evolve.HostBalance") keeps its promises, and states given
-- by one host's agent and put on another's (against the model of
-- "HostModel") evolve there to the values a single process computes.
module HostBalanceSpec (spec) where

import Data.List (foldl', nub, sort)
import qualified Data.Map.Strict as M
import Herd.Core.Agent.Evolve
import Herd.Core.Evolve.HostBalance
import Herd.Core.Evolve.Hosts
import Herd.Core.Evolve.Registry (Registry (..))
import qualified Herd.Core.Evolve.StateMap as SM
import Herd.Core.Wire.HostCall
import HostModel
import Test.Hspec
import Test.QuickCheck

spec :: Spec
spec = describe "the balance between hosts (two-level evolve)" $ do
  it "moves only the call's states, once each, to hosts with workers, and leaves no host beyond the best by more than the slack while others have room" $
    property $ forAll (chooseInt (1, 6)) $ \hosts ->
    forAll (vectorOf hosts (chooseInt (0, 5))) $ \workers ->
    forAll (vectorOf hosts (chooseInt (0, 60))) $ \counts ->
    forAll (elements [0, 1, 3]) $ \slack ->
      let loads = [ HostLoad h w [ SM.StateId (fromIntegral (1000 * h + k)) | k <- [1 .. c] ] | (h, w, c) <- zip3 [0 ..] workers counts ]
          moves = hostMoves slack loads
          hostOfState = M.fromList [ (s, loadHost l) | l <- loads, s <- loadStates l ]
          workersOf = M.fromList [ (loadHost l, loadWorkers l) | l <- loads ]
          after = foldl' (\m (s, _, to) -> M.insert s to m) hostOfState moves
          countOn h = length [ () | h' <- M.elems after, h' == h ]
          countBefore h = length [ () | h' <- M.elems hostOfState, h' == h ]
          total = sum counts
          allWorkers = sum workers
          best = (total + allWorkers - 1) `div` allWorkers
          stepsOf n h = (n + workersOf M.! h - 1) `div` (workersOf M.! h)
          withWorkers = [ h | h <- M.keys workersOf, workersOf M.! h > 0 ]
          within h = stepsOf (countOn h) h <= best + slack
          full h = countOn h >= best * workersOf M.! h
      in counterexample (show moves) $
           all (\(s, from, to) -> M.lookup s hostOfState == Just from && from /= to && workersOf M.! to > 0) moves
           .&&. length (nub [ s | (s, _, _) <- moves ]) === length moves
           .&&. (allWorkers == 0 || all (\h -> stepsOf (countOn h) h <= max (stepsOf (countBefore h) h) (best + slack)) withWorkers)
           .&&. (allWorkers == 0 || all (\h -> countOn h == 0 || workersOf M.! h > 0) (M.keys workersOf))
           .&&. (allWorkers == 0 || and [ countOn to <= best * workersOf M.! to | (_, _, to) <- moves ])
           .&&. (allWorkers == 0 || all within withWorkers || all full withWorkers)
           .&&. (allWorkers == 0 || not (all (\h -> stepsOf (countBefore h) h <= best + slack) withWorkers
                                         && all (\h -> workersOf M.! h > 0 || countBefore h == 0) (M.keys workersOf))
                                 || null moves)

  it "moves nothing while every host is within the slack of the best, and a host a step over its share gives the rest" $ do
    let ids :: Int -> Int -> [SM.StateId]
        ids h k = [ SM.StateId (fromIntegral (10000 * h + i)) | i <- [1 .. k] ]
    hostMoves 0 [ HostLoad 0 2 (ids 0 20), HostLoad 1 2 (ids 1 18) ] `shouldBe` []
    length (hostMoves 0 [ HostLoad 0 2 (ids 0 30), HostLoad 1 2 (ids 1 10) ]) `shouldBe` 10
    -- 512 workers on four hosts after a resampling: one host 12 states
    -- over its 16 steps would run a 17th; it gives those 12
    let resampled = [ HostLoad h 128 (ids h n) | (h, n) <- zip [0 ..] [2060, 2040, 2048, 2044] ]
    [ (from, to) | (_, from, to) <- hostMoves 0 resampled ] `shouldBe` replicate 8 (0, 1) ++ replicate 4 (0, 3)
    hostMoves 1 resampled `shouldBe` []
    moveSlack (Just 0.4) (Just 0.1) `shouldBe` 4
    moveSlack (Just 0.004) (Just 0.03) `shouldBe` 0
    moveSlack Nothing (Just 0.1) `shouldBe` 0

  it "a host gives states back and another holds them: the next call's answers are exact" $
    property $ forAll (chooseInt (1, 3)) $ \sizeA ->
    forAll (chooseInt (1, 3)) $ \sizeB ->
    forAll (chooseInt (2, 30)) $ \n -> do
      values <- vectorOf n (chooseInt (0, 999))
      inputs <- vectorOf n (chooseInt (0, 99))
      given <- sublistOf [1 .. n]
      let a = hostWithStates 0 sizeA (zip [1 ..] values)
          b = hostWithStates 10 sizeB []
          -- host 0 gives some of its states; the master puts them on host 1
          a1 = event (MasterSaid (HostStatesGive 3 (map fromIntegral given))) a
      a2 <- settle a1
      let got = concat [ states | HostStatesGiven 3 states <- wToMaster a2 ]
          ended = [ () | HostCallEnded 3 (Right _) <- wToMaster a2 ]
          b1 = (event (MasterSaid (HostStatesPut 4 got)) b) { wToMaster = [] }
          worlds = M.fromList [ (0, a2 { wToMaster = [] }), (1, b1) ]
          placement = placementOf ([ (SM.StateId (fromIntegral i), if i `elem` given then 1 else 0) | i <- [1 .. n] ])
          callInputs = SM.fromList [ (SM.StateId (fromIntegral i), enc x) | (i, x) <- zip [1 :: Int ..] inputs ]
          Right (call0, opening) = startHostCall 5 "step" stepRef 1000 placement callInputs
          worlds1 = foldl' (\ws (h, m) -> M.adjust (event (MasterSaid m)) h ws) worlds opening
      (ws, result) <- drive M.empty NoHostLoss 200000 worlds1 (Right call0)
      let truth = M.fromList [ (SM.StateId (fromIntegral i), [ childValue v x j | j <- [0 .. childCount v x - 1] ])
                             | (i, v, x) <- zip3 [1 :: Int ..] values inputs ]
          keysOf w = sort (SM.keys (regStates (hostRegistry (wHost w))))
      pure $ counterexample (show (map fst got, given)) $
        sort (map fst got) === sort (map fromIntegral given)
        .&&. keysOf b1 === [ SM.StateId (fromIntegral i) | i <- sort given ]
        .&&. keysOf a2 === [ SM.StateId (fromIntegral i) | i <- [1 .. n], i `notElem` given ]
        .&&. length ended === 1
        .&&. (case result of
                Right call -> M.map (map (dec . snd)) (SM.toMap (hostCallOutputs call)) === truth
                              .&&. M.size ws === 2
                Left err -> counterexample (show err) False)
  where
    -- run a host until it has said its last word to the master
    settle w
      | any isEnd (wToMaster w) = pure w
      | otherwise = do
      next <- tick 0 w
      case next of
        Nothing -> pure w
        Just w' -> settle w'
    isEnd m = case m of { HostCallEnded {} -> True; _ -> False }
