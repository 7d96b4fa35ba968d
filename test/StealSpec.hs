{-# LANGUAGE ScopedTypeVariables #-}
-- | The master's broker of stolen "Herd.Par" children ("Herd.Core.Steal"),
-- driven by a model of workers that hold children, ask for work, answer
-- in any order and die: every child given away comes home exactly once,
-- no worker runs its own child, and no thief is left waiting while
-- another worker holds children. A host agent's broker
-- ("Herd.Core.Agent.Steal") serves its host's thieves from its host's
-- holders and sends the others on to the master.
module StealSpec (spec) where

import qualified Data.ByteString as B
import Data.List (foldl')
import qualified Data.Map.Strict as M
import qualified Data.Set as S
import qualified Data.Text as T
import Data.Word (Word64)
import GHC.Fingerprint (Fingerprint (..))
import Herd.Core.Base (TaskRef (..), WorkerId)
import Herd.Core.Agent.Steal
import Herd.Core.Steal
import Herd.Core.Wire (FromWorker (..))
import Herd.Core.Wire (ToWorker (..))
import Test.Hspec
import Test.QuickCheck

-- What the model does next.
data Act
  = Spawn Int          -- ^ worker i offers a child
  | Want Int           -- ^ worker i asks for work
  | Deliver Int        -- ^ the broker's i-th message in flight (mod their count) arrives
  | Finish Int Bool    -- ^ the i-th stolen child running ends: answered, or dropped
  | Kill Int           -- ^ worker i dies
  | Abandon Int        -- ^ worker i's computation ends: its children away are no longer wanted
  deriving Show

instance Arbitrary Act where
  arbitrary = frequency
    [ (4, Spawn <$> worker), (3, Want <$> worker), (8, Deliver <$> arbitrary)
    , (3, Finish <$> arbitrary <*> frequency [(4, pure True), (1, pure False)]), (1, Kill <$> worker)
    , (1, Abandon <$> worker) ]
    where worker = chooseInt (0, 4)

-- The workers as the model sees them, and what the broker sent.
data World = World
  { wBroker  :: Steals
  , wPools   :: M.Map WorkerId [Word64]          -- ^ children each holds, oldest first
  , wOwner   :: M.Map Word64 WorkerId            -- ^ every child's holder
  , wNext    :: Word64
  , wDead    :: S.Set WorkerId
  , wMail    :: [(WorkerId, ToWorker)]            -- ^ sent by the broker, not yet arrived
  , wRunning :: [(WorkerId, Word64, Word64)]      -- ^ thief, steal, child: stolen children running
  , wGiven   :: M.Map Word64 Int                  -- ^ children given away: times they came home
  , wSteals  :: M.Map Word64 Word64               -- ^ the child each steal carried
  , wAbandoned :: S.Set Word64                    -- ^ children their holder gave up on
  , wBad     :: [String]                          -- ^ broken promises seen
  }

start :: World
start = World emptySteals M.empty M.empty 1 S.empty [] [] M.empty M.empty S.empty []

ref :: TaskRef
ref = TaskRef (Fingerprint 1 1) "child" (Fingerprint 2 2) (Fingerprint 3 3)

alive :: World -> WorkerId -> Bool
alive w i = not (S.member i (wDead w))

-- Feed the broker one transition's result.
broker :: (Steals -> (Steals, [(WorkerId, ToWorker)])) -> World -> World
broker f w = let (st, out) = f (wBroker w) in w { wBroker = st, wMail = wMail w ++ out }

act :: World -> Act -> World
act w a = case a of
  Spawn i' | alive w i -> let c = wNext w
                              was = null (M.findWithDefault [] i (wPools w))
                              w' = w { wPools = M.insertWith (flip (++)) i [c] (wPools w), wOwner = M.insert c i (wOwner w), wNext = c + 1 }
                          in if was then broker (childrenHeld i 1) w' else w'
    where i = fromIntegral i'
  Want i' | alive w (fromIntegral i') -> broker (wantWork (fromIntegral i')) w
  Deliver k | not (null (wMail w)) ->
    let (before, m : after) = splitAt (k `mod` length (wMail w)) (wMail w)
    in arrive m w { wMail = before ++ after }
  Finish k ok | not (null (wRunning w)) ->
    let (before, (t, n, _) : after) = splitAt (k `mod` length (wRunning w)) (wRunning w)
        w' = w { wRunning = before ++ after }
    in if ok then broker (stolenAnswered t n (Right B.empty)) w' else broker (stolenDropped t n) w'
  Kill i' | alive w i, S.size (wDead w) < 3 ->
    broker (stealLost i) w { wDead = S.insert i (wDead w), wPools = M.delete i (wPools w)
                           , wRunning = [ r | r@(t, _, _) <- wRunning w, t /= i ]
                           , wMail = [ m | m@(to, _) <- wMail w, to /= i ] }
    where i = fromIntegral i'
  Abandon i' | alive w i ->
    let away = [ c | (c, k) <- M.toList (wGiven w), k == 0, M.lookup c (wOwner w) == Just i, not (S.member c (wAbandoned w)) ]
    in broker (childrenAbandoned i away) w { wAbandoned = S.union (S.fromList away) (wAbandoned w) }
    where i = fromIntegral i'
  _ -> w

-- A message from the broker reaches its worker, which answers as a worker does.
arrive :: (WorkerId, ToWorker) -> World -> World
arrive (to, msg) w
  | not (alive w to) = w
  | otherwise = case msg of
      StealAsk n -> case M.findWithDefault [] to (wPools w) of
        c : rest -> broker (stealGiven to n c (fromIntegral (length rest)) ref B.empty)
                      w { wPools = M.insert to rest (wPools w), wGiven = M.insert c 0 (wGiven w)
                        , wSteals = M.insert n c (wSteals w) }
        [] -> broker (stealNone to n) w
      StolenRun n _ _ ->
        let c = M.findWithDefault 0 n (wSteals w)
            own = [ "worker " ++ show to ++ " was given its own child " ++ show c | M.lookup c (wOwner w) == Just to ]
        in w { wRunning = wRunning w ++ [(to, n, c)], wBad = own ++ wBad w }
      ChildDone c _ -> home c
      ChildThrew c _ -> home c
      ChildLost c -> home c
      -- stopped if it runs; if it already ended, or comes later (the model
      -- reorders one link's messages, a real link does not), it is ignored
      StolenCancel n -> w { wRunning = [ r | r@(t, m, _) <- wRunning w, not (t == to && m == n) ] }
      _ -> w { wBad = ("unexpected message " ++ show msg) : wBad w }
  where
    home c
      | M.lookup c (wOwner w) /= Just to = w { wBad = ("child " ++ show c ++ " sent to a worker not its holder") : wBad w }
      | otherwise = w { wGiven = M.adjust (+ 1) c (wGiven w) }

-- Deliver everything and finish every stolen child.
drain :: World -> World
drain w
  | not (null (wMail w)) = drain (act w (Deliver 0))
  | not (null (wRunning w)) = drain (act w (Finish 0 True))
  | otherwise = w

spec :: Spec
spec = describe "the broker of stolen Par children" $ do
  it "brings every child given away home exactly once, unless its holder died or gave up on it" $
    property $ \(acts :: [Act]) -> let w = drain (foldl' act start acts) in
      counterexample (unlines (wBad w)) $
        null (wBad w) .&&.
        conjoin [ counterexample ("child " ++ show c ++ " came home " ++ show k ++ " times")
                    (if S.member c (wAbandoned w) then k <= 1 else k == 1)
                | (c, k) <- M.toList (wGiven w), alive w (wOwner w M.! c) ]
  it "never gives a worker its own child, and hands every thief a child someone gave" $
    property $ \(acts :: [Act]) -> let w = drain (foldl' act start acts) in
      counterexample (unlines (wBad w)) (null (wBad w))
  it "leaves no thief waiting while another live worker holds children it said it has" $
    property $ \(acts :: [Act]) ->
      let w = drain (foldl' act start acts)
          holders = [ i | (i, cs) <- M.toList (wPools w), not (null cs), alive w i ]
          waiting = stealsIdle (wBroker w)
      in counterexample (show (waiting, holders)) $ null [ () | t <- waiting, h <- holders, h /= t ]
  it "asks a waiting holder's thief first, when that thief holds children of its own" $ do
    -- 1 holds one child, 2 steals it; 3 holds more children than 2 will;
    -- when 1 waits and asks, it steals from 2 (its own child's subtree)
    let (s1, _) = childrenHeld 1 1 emptySteals
        (s2, asks) = wantWork 2 s1
        n = head [ k | (1, StealAsk k) <- asks ]
        (s3, _) = stealGiven 1 n 100 0 ref B.empty s2
        (s4, _) = childrenHeld 3 5 s3
        (s5, _) = childrenHeld 2 1 s4
        (_, leap) = wantWork 1 s5
        (_, plain) = wantWork 4 s5
    [ w | (w, StealAsk _) <- leap ] `shouldBe` [2]
    [ w | (w, StealAsk _) <- plain ] `shouldBe` [3]
  it "keeps each worker's counts as it last said them" $ do
    let (st, out) = childCounts 2 (StealCounts 5 1 0 0 0) (fst (childCounts 2 (StealCounts 3 0 0 0 0) emptySteals))
    out `shouldBe` []
    M.lookup 2 (stealCounts st) `shouldBe` Just (StealCounts 5 1 0 0 0)
  it "ignores answers for steals it does not know" $ do
    let (st, out) = stolenAnswered 3 99 (Left (T.pack "x")) emptySteals
    (st, out) `shouldBe` (emptySteals, [])
    snd (stealGiven 3 7 1 0 ref B.empty emptySteals) `shouldBe` []
  hostBroker

-- The host agent's broker, step by step.
hostBroker :: Spec
hostBroker = describe "a host agent's broker" $ do
  let said w m h = hostWorkerSaid w m h
      (h1, out1) = said 1 WantWork emptyHostSteals
  it "sends an ask for work on to the master while no worker of its host holds children" $
    out1 `shouldBe` HostStealOut [] [] False
  it "serves a thief from a holder of its host, with a number of its own, and brings the answer home" $ do
    let (h2, held) = said 1 (ChildrenHeld 2) h1
        (h3, asked) = said 2 WantWork h2
    hsConsumed held `shouldBe` False   -- the master hears of holders too
    hsConsumed asked `shouldBe` True
    case hsToWorkers asked of
      [(1, StealAsk n)] -> do
        n `shouldSatisfy` (>= hostStealBase)
        let (h4, given) = said 1 (StealGiven n 7 1 ref B.empty) h3
        hsToWorkers given `shouldBe` [(2, StolenRun n ref B.empty)]
        let (_, done) = said 2 (StolenDone n (B.pack [1])) h4
        hsToWorkers done `shouldBe` [(1, ChildDone 7 (B.pack [1]))]
        hsConsumed done `shouldBe` True
        -- a lost thief's child goes home
        let (_, gone) = hostWorkerGone 2 h4
        hsToWorkers gone `shouldBe` [(1, ChildLost 7)]
      other -> expectationFailure ("expected one ask of worker 1, got " ++ show other)
  it "sends a thief on to the master when its holder had nothing left after all" $ do
    let (h2, _) = said 1 (ChildrenHeld 1) h1
        (h3, asked) = said 2 WantWork h2
    case hsToWorkers asked of
      [(1, StealAsk n)] -> do
        let (_, none) = said 1 (StealNone n) h3
        hsToMaster none `shouldBe` [(2, WantWork)]
      other -> expectationFailure ("expected one ask of worker 1, got " ++ show other)
  it "relays the master's steals untouched" $ do
    let (_, given) = said 1 (StealGiven 5 7 0 ref B.empty) h1
        (_, done) = said 1 (StolenDone 5 B.empty) h1
    (hsConsumed given, hsConsumed done) `shouldBe` (False, False)
    (hsToWorkers given ++ hsToWorkers done) `shouldBe` []

