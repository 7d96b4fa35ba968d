-- | A whole host lost under two-level evolve, pure: the master's half
-- ("Herd.Core.Evolve.Hosts") keeps each call's lineage, gives the lost
-- host's states to the live hosts ('rehome', one adoption message each),
-- and evolves the states the lost host had not answered there; the
-- adopting agents remake the states from their lineage at their next
-- call. Checked against the model of "HostModel": the answers of the call
-- that lost the host, and of the next call over every live state, are
-- the ones a single process computes.
module HostLossSpec (spec) where

import Data.List (foldl')
import qualified Data.Map.Strict as M
import Herd.Core.Agent.Evolve
import Herd.Core.Evolve.Hosts
import Herd.Core.Evolve.Registry (Origin (..), Registry (..))
import qualified Herd.Core.Evolve.StateMap as SM
import Herd.Core.Wire.HostCall
import HostModel
import Test.Hspec
import Test.QuickCheck

spec :: Spec
spec = describe "two-level evolve when a whole host is lost (pure)" $ do
  it "remakes the lost host's states on the others from the master's lineage; this call's and the next call's answers are exact" $
    property $ checkCoverage $
    forAll (chooseInt (2, 4)) $ \hosts ->
    forAll (vectorOf hosts (chooseInt (1, 3))) $ \sizes ->
    forAll (chooseInt (1, 30)) $ \n ->
    forAll (chooseInt (0, hosts - 1)) $ \victim ->
    forAll (chooseInt (0, 80)) $ \lossStep -> do
      values <- vectorOf n (chooseInt (0, 999))
      inputs <- vectorOf n (chooseInt (0, 99))
      nextInput <- chooseInt (0, 99)
      let ids = [1 .. n]
          onHost = M.fromList [ (i, h) | (i, h) <- zip ids (cycle [0 .. hosts - 1]) ]
          worlds0 = M.fromList [ (h, hostWithStates (10 * h) size [ (i, values !! (i - 1)) | i <- ids, onHost M.! i == h ])
                               | (h, size) <- zip [0 ..] sizes ]
          placement0 = placementOf [ (SM.StateId (fromIntegral i), h) | (i, h) <- M.toList onHost ]
          origins0 = SM.fromList [ (SM.StateId (fromIntegral i), Seen (enc v)) | (i, v) <- zip ids values ]
          inputs1 = [ (SM.StateId (fromIntegral i), enc x) | (i, x) <- zip ids inputs ]
      -- the first call: the victim is lost at some step (or after the call)
      (worlds1, call1) <- callOn 5 (HostLostAfter victim lossStep) worlds0 placement0 inputs1
      let lostDuring = any ((== victim) . fst) (hostCallLosses call1)
          worlds1' = M.delete victim worlds1
          placement1 = placementAfter call1 placement0
          origins1 = originsAfter call1 origins0
          unanswered = hostCallUnanswered call1
      -- the lost host's states go to the others, then its unanswered states are evolved there
      (worlds2, placement2) <- either (error . show) pure (adopt 6 worlds1' placement1 origins1)
      (worlds3, call2) <- callOn 7 NoHostLoss worlds2 placement2
                                 [ (s, enc (inputs !! (fromIntegral k - 1))) | (s@(SM.StateId k), _) <- unanswered ]
      let outputs1 = M.union (SM.toMap (hostCallOutputs call1)) (SM.toMap (hostCallOutputs call2))
          truth1 = M.fromList [ (SM.StateId (fromIntegral i), [ childValue v x j | j <- [0 .. childCount v x - 1] ])
                              | (i, v, x) <- zip3 ids values inputs ]
          placement3 = placementAfter call2 placement2
          children = [ (c, dec o) | kids <- M.elems outputs1, (c, o) <- kids ]
      -- the next call evolves every live state, the remade ones included
      (worlds4, call3) <- callOn 8 NoHostLoss worlds3 placement3 [ (c, enc nextInput) | (c, _) <- children ]
      let truth2 = M.fromList [ (c, [ childValue v nextInput j | j <- [0 .. childCount v nextInput - 1] ]) | (c, v) <- children ]
          recovered = sum [ summaryRecovered s | (_, s) <- hostCallSummaries call3 ]
          held = [ (s, h) | (h, w) <- M.toList worlds4, s <- SM.keys (regStates (hostRegistry (wHost w))) ]
          after = placementAfter call3 placement3
      pure $ cover 20 lostDuring "the host was lost mid-call"
           $ cover 10 (not (null unanswered)) "the lost host left states unanswered"
           $ cover 10 (recovered > 0) "children the lost host made were remade elsewhere"
           $ counterexample (show (hostCallLosses call1, unanswered)) $
        M.map (map (dec . snd)) outputs1 === truth1
        .&&. M.map (map (dec . snd)) (SM.toMap (hostCallOutputs call3)) === truth2
        .&&. all (\(s, h) -> hostOf after s == Just h) held
        .&&. length held === sum (map length (M.elems truth2))
        .&&. all (\(_, h) -> h /= victim) held

  it "refuses to rehome states no live host can take or whose lineage is unknown" $ do
    let placement = placementOf [ (SM.StateId 1, 0), (SM.StateId 2, 1) ]
        origins = SM.fromList [ (SM.StateId 1, Seen (enc 3)) ]
    fmap snd (rehome [(1, 2)] placement origins)
      `shouldBe` Right [Adoption 1 [SM.StateId 1] [(SM.StateId 1, Seen (enc 3))]]
    either (const True) (const False) (rehome [(1, 0)] placement origins) `shouldBe` True
    either (const True) (const False) (rehome [(1, 2)] (placementOf [(SM.StateId 3, 0)]) origins) `shouldBe` True
    fmap snd (rehome [(0, 1), (1, 1)] placement origins) `shouldBe` Right []
  where
    -- one call of the master over the hosts, driven to its end
    callOn k loss worlds placement inputs
      | null inputs = pure (worlds, emptyCall k)
      | otherwise = case startHostCall k "step" stepRef 1000 placement (SM.fromList inputs) of
          Left unknown -> error ("unknown states " ++ show unknown)
          Right (call0, opening) -> do
            let worlds' = foldl' (\ws (h, m) -> M.adjust (event (MasterSaid m)) h ws) worlds opening
            (ws, r) <- drive M.empty loss 200000 worlds' (Right call0)
            case r of
              Right call | hostCallDone call -> pure (ws, call)
              Right _ -> error "the call did not end"
              Left err -> error (show err)
    emptyCall k = either (error "no call") fst (startHostCall k "step" stepRef 1000 (placementOf []) SM.empty)
    -- the adoption messages the master sends, each answered by its host
    adopt k worlds placement origins =
      case rehome [ (h, M.size (wWorkers w)) | (h, w) <- M.toList worlds ] placement origins of
        Left err -> Left err
        Right (placement', adoptions) ->
          let message a = HostStatesAdopt k [ (i, o) | (SM.StateId i, o) <- adoptOrigins a ] [ i | SM.StateId i <- adoptStates a ]
              worlds' = foldl' (\ws a -> M.adjust (\w -> (event (MasterSaid (message a)) w) { wToMaster = [] }) (adoptHost a) ws)
                               worlds adoptions
          in Right (worlds', placement')
