-- | The host agent's half of two-level evolve ("Herd.Core.Agent.Evolve"),
-- against the workers' real pure machine ("Herd.Core.Worker.Evolve"):
-- messages travel in order per worker and interleave at random, jobs end
-- at random, reports are asked for at random, and workers are lost at
-- random (one always stays). Each state's step is a known pure function,
-- so every reported child is checked against the value it must have.
module HostEvolveSpec (spec) where

import qualified Data.ByteString as B
import Data.List (foldl', sort)
import qualified Data.Map.Strict as M
import qualified Data.Set as S
import qualified Data.Text as T
import Herd.Core.Agent.Evolve
import Herd.Core.Evolve.Hosts
import Herd.Core.Evolve.Registry (Origin (..), Placed (..), Registry (..))
import qualified Herd.Core.Evolve.StateMap as SM
import Herd.Core.Worker.Evolve
import Herd.Core.Wire.HostCall
import HostModel
import Test.Hspec
import Test.QuickCheck

spec :: Spec
spec = describe "the host agent's evolve scheduler (pure, against the workers' real machine)" $ do
  twoLevelSpec
  it "reports every state of a call once, with the right children, and ends once, also when workers are lost" $ property $ checkCoverage $
    forAll (chooseInt (1, 5)) $ \k ->
    forAll (chooseInt (1, 30)) $ \n ->
    forAll (chooseInt (0, 2)) $ \losses -> do
      values <- vectorOf n (chooseInt (0, 999))
      inputs <- vectorOf n (chooseInt (0, 99))
      w <- runCall losses 100000 (evolveCall 2 (zip [1 ..] inputs) (hostWith k values))
      let (reports, ends) = heard w
          truth = M.fromList [ (s, [ childValue v i j | j <- [0 .. childCount v i - 1] ]) | (s, v, i) <- zip3 [1 ..] values inputs ]
          got = M.fromListWith (++) [ (s, [map snd kids]) | (s, kids) <- reports ]
          reg = hostRegistry (wHost w)
          children = S.fromList [ c | (_, kids) <- reports, (c, _) <- kids ]
          live = M.keysSet (wWorkers w)
          recovered = sum [ summaryRecovered c | Right c <- ends ]
          moved = sum [ summaryMoved c | Right c <- ends ]
      pure $ cover 5 (recovered > 0) "a lost worker's states recomputed on the host"
           $ cover 5 (moved > 0) "states moved between the host's workers"
           $ counterexample (show (reports, ends, wDropped w)) $
        length ends === 1
        .&&. (case ends of { [Right _] -> True; _ -> False }) === True
        .&&. M.map (: []) truth === got
        .&&. wDropped w === []
        .&&. S.fromList (SM.keys (regStates reg)) === S.map (SM.StateId . fromIntegral) children
        .&&. all (\p -> S.member (placedOn p) live) (SM.elems (regStates reg))
        .&&. sum [ heldStateCount (wHeld x) | x <- M.elems (wWorkers w) ] === S.size children

  it "runs a second call on the first call's children, recomputing on the host what a lost worker held" $ property $
    forAll (chooseInt (2, 4)) $ \k ->
    forAll (chooseInt (4, 20)) $ \n -> do
      values <- vectorOf n (chooseInt (0, 999))
      let inputs1 = replicate n 1   -- (v + 1) mod 3 children each; some states have none
      w1 <- runCall 0 100000 (evolveCall 2 (zip [1 ..] inputs1) (hostWith k values))
      let (reports1, _) = heard w1
          kids1 = [ (c, v) | (_, kids) <- reports1, (c, v) <- kids ]
      -- a worker holding some children is lost between the calls
      let holders = S.fromList [ placedOn p | p <- SM.elems (regStates (hostRegistry (wHost w1))) ]
          victim = if S.null holders then 1 else S.findMin holders
          w2 = event (LocalLost victim "killed between calls") w1 { wWorkers = M.delete victim (wWorkers w1), wToMaster = [] }
          inputs2 = [ (c, 2) | (c, _) <- kids1 ]
      w3 <- runCall 0 100000 (evolveCall 3 inputs2 w2)
      let (reports2, ends2) = heard w3
          truth2 = sort [ (c, [ childValue v 2 j | j <- [0 .. childCount v 2 - 1] ]) | (c, v) <- kids1 ]
      pure $ counterexample (show (reports1, reports2, ends2)) $
        (case ends2 of { [Right _] -> True; _ -> False }) === True
        .&&. sort [ (s, map snd kids) | (s, kids) <- reports2 ] === truth2

  it "refuses a call naming a state the host does not hold, and gives up a call when the next one comes" $ do
    let w0 = hostWith 2 [5, 6]
        w1 = event (MasterSaid (HostEvolve 7 stepRef 3 [(99, enc 1)])) w0
        w2 = event (MasterSaid (HostEvolve 8 stepRef 3 [(1, enc 1)])) w1 { wToMaster = [] }
        w3 = event (MasterSaid (HostEvolve 9 stepRef 3 [(2, enc 1)])) w2 { wToMaster = [] }
    [ n | HostCallEnded n (Left _) <- wToMaster w1 ] `shouldBe` [7]
    hostCallRunning (wHost w2) `shouldBe` Just 8
    -- call 8's caller gave up: 8 ends, its state is forgotten, 9 runs
    [ n | HostCallEnded n (Left _) <- wToMaster w3 ] `shouldBe` [8]
    hostCallRunning (wHost w3) `shouldBe` Just 9
    SM.member (SM.StateId 1) (regStates (hostRegistry (wHost w3))) `shouldBe` False
    w4 <- generate (runCall 0 100000 w3 { wToMaster = [] })
    [ () | HostCallEnded 9 (Right _) <- wToMaster w4 ] `shouldBe` [()]

  it "encodes and decodes every host-call message" $ property $
    forAll genMessage $ \m -> decodeHostCall (encodeHostCall m) === Right m

  it "names what is wrong with a truncated or padded host-call message" $ property $
    forAll genMessage $ \m ->
      let bytes = encodeHostCall m
      in forAll (chooseInt (0, B.length bytes - 1)) $ \cut ->
           either (const True) (const False) (decodeHostCall (B.take cut bytes))
           .&&. either (const True) (const False) (decodeHostCall (bytes <> B.singleton 0))

-- Two levels: the master's call over hosts, each host an agent with its
-- own workers, everything interleaved at random.
twoLevelSpec :: Spec
twoLevelSpec =
  it "two levels: one message per host from the master, every state answered once and right, children where their host holds them" $
    property $ forAll (chooseInt (1, 4)) $ \hosts ->
    forAll (vectorOf hosts (chooseInt (1, 4))) $ \sizes ->
    forAll (chooseInt (1, 40)) $ \n -> do
      values <- vectorOf n (chooseInt (0, 999))
      inputs <- vectorOf n (chooseInt (0, 99))
      losses <- vectorOf hosts (chooseInt (0, 1))
      let ids = [1 .. n]
          onHost = M.fromList [ (i, h) | (i, h) <- zip ids (cycle [0 .. hosts - 1]) ]
          worlds0 = M.fromList [ (h, uploaded h size) | (h, size) <- zip [0 ..] sizes ]
          uploaded h size = hostWithStates (10 * h) size [ (i, values !! (i - 1)) | i <- ids, onHost M.! i == h ]
          placement = placementOf [ (SM.StateId (fromIntegral i), h) | (i, h) <- M.toList onHost ]
          Right (call0, opening) = startHostCall 5 "step" stepRef 1000 placement
                                     (SM.fromList [ (SM.StateId (fromIntegral i), enc x) | (i, x) <- zip ids inputs ])
          worlds1 = foldl' (\ws (h, m) -> M.adjust (event (MasterSaid m)) h ws) worlds0 opening
      (worlds, result) <- drive (M.fromList (zip [0 ..] losses)) NoHostLoss 200000 worlds1 (Right call0)
      let truth = M.fromList [ (SM.StateId (fromIntegral i), [ childValue v x j | j <- [0 .. childCount v x - 1] ])
                             | (i, v, x) <- zip3 ids values inputs ]
      pure $ counterexample (show (fmap (SM.toList . hostCallOutputs) result)) $ case result of
        Left err -> counterexample (show err) False
        Right call ->
          let after = placementAfter call placement
              agentHeld = [ (s, h) | (h, w) <- M.toList worlds, s <- SM.keys (regStates (hostRegistry (wHost w))) ]
          in hostCallDone call
             .&&. length opening === M.size (M.fromList [ (h, ()) | h <- M.elems onHost ])
             .&&. M.map (map (dec . snd)) (SM.toMap (hostCallOutputs call)) === truth
             .&&. all (\(s, h) -> hostOf after s == Just h) agentHeld
             .&&. length agentHeld === sum (map length (M.elems truth))
genMessage :: Gen HostCallMessage
genMessage = oneof
  [ HostStatesAdd <$> arbitrary <*> listOf pair
  , HostEvolve <$> arbitrary <*> pure stepRef <*> arbitrary <*> listOf pair
  , HostEvolved <$> arbitrary <*> listOf ((,) <$> arbitrary <*> listOf pair)
  , HostStatesGive <$> arbitrary <*> listOf arbitrary
  , HostStatesGiven <$> arbitrary <*> listOf pair
  , HostStatesPut <$> arbitrary <*> listOf pair
  , HostStatesAdopt <$> arbitrary <*> listOf ((,) <$> arbitrary <*> origin) <*> listOf arbitrary
  , HostCallEnded <$> arbitrary <*> oneof
      [ pure (Left (T.pack "a reason"))
      , Right <$> (CallSummary <$> listOf ((,) <$> arbitrary <*> arbitrary) <*> arbitrary <*> arbitrary) ] ]
  where
    pair = (,) <$> arbitrary <*> bytes
    bytes = B.pack <$> listOf arbitrary
    origin = oneof [ Seen <$> bytes
                   , ChildOf <$> (SM.StateId <$> arbitrary) <*> pure stepRef <*> bytes <*> chooseInt (0, 1000000) ]
