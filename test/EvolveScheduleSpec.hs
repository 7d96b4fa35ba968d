-- | Properties of the evolve API's pure scheduler, run against a model of
-- the workers: each holds states, evolves the ones it is asked for in
-- order, one at a time, and answers requests to give states back the way
-- "Herd.Node.Worker.Evolve" does. Messages travel in order per worker but
-- interleave across workers at random.
module EvolveScheduleSpec (spec) where

import Control.Monad (foldM)
import qualified Data.ByteString as B
import Data.List (foldl', sort)
import qualified Data.Map.Strict as M
import qualified Data.Set as S
import GHC.Fingerprint (Fingerprint (..))
import Herd.Core.Base (TaskRef (..))
import Herd.Core.Evolve.Schedule
import Herd.Core.Evolve.Plan (heldFromList, heldInsert, heldSize, heldTake, heldToList, longestFirst)
import Herd.Core.Evolve.Checkpoint
import Data.Bits (shiftL, (.|.))
import Herd.Core.Evolve.Call (callBusy, callMachine)
import Herd.Core.Evolve.Registry (Placed (..), lineageDepth, keepOrigins, placedAt)
import Herd.Core.Evolve.Start (CallStart (..), estimateFrom, registryAfter, startCall)
import qualified Herd.Core.Evolve.StateMap as SM
import Herd.Core.Session (Machine (..))
import Herd.Core.Worker.Evolve (Held, heldMessage, heldStateCount, newHeld)
import Herd.Core.Master (emptyCore, step)
import qualified Herd.Core.Master.Events as Ev
import Herd.Core.Packet.Policy (Urgency (..))
import Herd.Core.Session (Out (..))
import qualified Data.Text as T
import Herd.Core.Wire (FromWorker (..), ToWorker (..))
import Test.Hspec
import Test.QuickCheck

-- One worker as the model sees it.
data ModelWorker = ModelWorker
  { mwStore   :: S.Set StateId
  , mwQueue   :: [StateId]         -- asked, not started
  , mwRunning :: Maybe StateId
  , mwInbox   :: [Command]         -- from the master, oldest first
  , mwOutbox  :: [PlanEvent]       -- to the master, oldest first
  } deriving Show

data World = World
  { wPlan     :: Plan
  , wWorkers  :: M.Map WorkerId ModelWorker
  , wEvolved  :: M.Map StateId Int
  , wReleased :: M.Map StateId Int
  , wPlaced   :: M.Map StateId Int
  , wLost     :: S.Set StateId
  , wGone     :: S.Set WorkerId
  , wBad      :: [String]          -- broken promises seen
  }

-- Held states (distinct ids, costs with ties), one more not among them,
-- and a count to take (sometimes out of range).
genHeld :: Gen ([(Double, StateId)], (Double, StateId), Int)
genHeld = do
  n <- chooseInt (0, 40)
  ids <- shuffle [1 .. n + 1]
  costs <- vectorOf (n + 1) (elements [0.5, 1, 2, 3, 10, 0.001])
  let pairs = zip costs (map (StateId . fromIntegral) ids)
  k <- chooseInt (-2, n + 3)
  pure (take n pairs, last pairs, k)

-- A population: per worker, its states with estimated costs (0: unknown).
genHoldings :: Gen (M.Map WorkerId [(StateId, Double)])
genHoldings = do
  n <- chooseInt (1, 6)
  counts <- vectorOf n (frequency [(1, pure 0), (4, chooseInt (1, 9))])
  let ids = scanl (+) 0 counts
  costs <- vectorOf (sum counts) (frequency [(1, pure 0), (3, elements [0.5, 1, 2, 3, 10])])
  let states = zip (map (StateId . fromIntegral) [1 :: Int ..]) costs
  pure (M.fromList [ (w, take c (drop start states)) | (w, c, start) <- zip3 [1 ..] counts ids ])

deliver :: WorkerId -> [Command] -> M.Map WorkerId ModelWorker -> M.Map WorkerId ModelWorker
deliver _ cmds ws = foldl' route ws cmds
  where
    route m cmd = M.adjust (\mw -> mw { mwInbox = mwInbox mw ++ [cmd] }) (target cmd) m
    target cmd = case cmd of
      Ask w _ -> w
      Release w _ -> w
      Place w _ _ -> w
      Lose _ -> -1

-- The master takes commands out of a step; Lose is noted, the rest go to workers.
applyStep :: Either String (Plan, [Command]) -> World -> World
applyStep r world = case r of
  Left why -> world { wBad = why : wBad world }
  Right (plan, cmds) ->
    let lost = S.fromList (concat [ ss | Lose ss <- cmds ])
        placed = foldl' (\m s -> M.insertWith (+) s 1 m) (wPlaced world) [ s | Place _ s _ <- cmds ]
    in world { wPlan = plan, wWorkers = deliver 0 cmds (wWorkers world)
             , wLost = S.union lost (wLost world), wPlaced = placed }

-- Actions the world can take now.
data Action = Receive WorkerId | Start WorkerId | Finish WorkerId | Answer WorkerId | Kill WorkerId | Come
  deriving Show

actions :: World -> Bool -> [Action]
actions world mayKill =
  concat [ [ Receive w | not (null (mwInbox mw)) ]
        ++ [ Start w | mwRunning mw == Nothing, not (null (mwQueue mw)) ]
        ++ [ Finish w | mwRunning mw /= Nothing ]
        ++ [ Answer w | not (null (mwOutbox mw)) ]
        ++ [ Kill w | mayKill, M.size (wWorkers world) > 1 ]
         | (w, mw) <- M.toList (wWorkers world) ]
  -- a new worker joins the call (a lost one's replacement, say)
  ++ [ Come | M.size (wWorkers world) < 6 ]

act :: Action -> World -> World
act a world = case a of
  Receive w -> let mw = wWorkers world M.! w
                   (cmd : rest) = mwInbox mw
               in setW w (receive cmd mw { mwInbox = rest })
  Start w -> let mw = wWorkers world M.! w
                 (s : rest) = mwQueue mw
             in setW w mw { mwQueue = rest, mwRunning = Just s }
  Finish w -> let mw = wWorkers world M.! w
                  Just s = mwRunning mw
              in setW w mw { mwRunning = Nothing, mwStore = S.delete s (mwStore mw)
                           , mwOutbox = mwOutbox mw ++ [Evolved w s 1] }
  Answer w -> let mw = wWorkers world M.! w
                  (ev : rest) = mwOutbox mw
                  world' = setW w mw { mwOutbox = rest }
                  released = case ev of
                    Released _ s _ -> M.insertWith (+) s 1 (wReleased world')
                    _ -> wReleased world'
                  -- an evolution counts when the master hears of it (a lost
                  -- worker's last answers are lost with it)
                  evolvedNow = case ev of
                    Evolved _ s _ -> M.insertWith (+) s 1 (wEvolved world')
                    _ -> wEvolved world'
              in applyStep (stepPlan 0 ev (wPlan world')) world' { wReleased = released, wEvolved = evolvedNow }
  Come -> let w = 1 + maximum (0 : M.keys (wWorkers world) ++ S.toList (wGone world))
              world' = world { wWorkers = M.insert w (ModelWorker S.empty [] Nothing [] []) (wWorkers world) }
          in applyStep (stepPlan 0 (WorkerCame w) (wPlan world')) world'
  Kill w -> let world' = world { wWorkers = M.delete w (wWorkers world), wGone = S.insert w (wGone world) }
                world'' = applyStep (stepPlan 0 (WorkerGone w) (wPlan world')) world'
                -- the driver recomputes lost states on a live worker, which adopts them
                lostNow = S.toList (S.difference (wLost world'') (wLost world))
                heir = fst (M.findMin (wWorkers world''))
                withHeir = world'' { wWorkers = M.adjust (\mw -> mw { mwStore = S.union (S.fromList lostNow) (mwStore mw) })
                                                         heir (wWorkers world'') }
            in if null lostNow then world''
               else applyStep (stepPlan 0 (Adopted heir [ (s, 1) | s <- lostNow ]) (wPlan withHeir)) withHeir
  where
    setW w mw = world { wWorkers = M.insert w mw (wWorkers world) }
    receive cmd mw = case cmd of
      Ask _ ss -> mw { mwQueue = mwQueue mw ++ ss
                     , mwOutbox = mwOutbox mw }  -- a state not held would be a broken promise
      Place _ s _ -> mw { mwStore = S.insert s (mwStore mw) }
      Release w s
        | mwRunning mw == Just s -> mw { mwOutbox = mwOutbox mw ++ [Kept w s] }
        | S.member s (mwStore mw) ->
            mw { mwStore = S.delete s (mwStore mw), mwQueue = filter (/= s) (mwQueue mw)
               , mwOutbox = mwOutbox mw ++ [Released w s B.empty] }
        | otherwise -> mw { mwOutbox = mwOutbox mw ++ [Kept w s] }   -- already evolved
      Lose _ -> mw

-- Run a random interleaving to the end, checking the invariant after each step.
data Outcome = Outcome { outWorld :: World, outSteps :: Int, outIdleViolations :: [String], outMissing :: [String] }

instance Show Outcome where
  show o = "a run of " ++ show (outSteps o) ++ " steps, evolving " ++ show (M.size (wEvolved (outWorld o)))
           ++ " states, moving " ++ show (M.size (wPlaced (outWorld o)))

runWorld :: M.Map WorkerId [(StateId, Double)] -> Bool -> Gen Outcome
runWorld holdings mayKill = go (0 :: Int) world0 [] []
  where
    (plan0, cmds0) = startPlan 0 defaultPlanSettings holdings
    workers0 = M.map (\ss -> ModelWorker (S.fromList (map fst ss)) [] Nothing [] []) holdings
    world0 = applyStep (Right (plan0, cmds0))
               (World plan0 workers0 M.empty M.empty M.empty S.empty S.empty [])
    go k world idleBad missing
      | k > 20000 = pure (Outcome world k idleBad missing)
      | otherwise = case actions world (mayKill && S.null (wGone world)) of
          [] -> pure (Outcome world k idleBad missing)
          as -> do
            a <- frequency [ (case x of { Kill _ -> 1; Come -> 1; _ -> 20 }, pure x) | x <- as ]
            let world' = act a world
                plan = wPlan world'
                idle = filter (`M.member` wWorkers world') (planIdleWorkers plan)
                crowded = [ (w, n) | (w, n) <- M.toList (planUnstarted plan), n >= 2 ]
                -- the same rule seen from the model's workers, whenever no
                -- message is in flight (the master has heard everything and
                -- answered): none idle while one has two or more queued
                live = M.elems (wWorkers world')
                quiet = all (\mw -> null (mwInbox mw) && null (mwOutbox mw)) live
                modelIdle = [ w | (w, mw) <- M.toList (wWorkers world'), mwRunning mw == Nothing, null (mwQueue mw) ]
                modelCrowded = [ (w, length (mwQueue mw)) | (w, mw) <- M.toList (wWorkers world'), length (mwQueue mw) >= 2 ]
                idleBad' = [ "idle " ++ show idle ++ " while " ++ show crowded | not (null idle), not (null crowded) ]
                        ++ [ "model workers idle " ++ show modelIdle ++ " while " ++ show modelCrowded
                           | quiet, not (null modelIdle), not (null modelCrowded) ]
                missing' = case a of
                  Receive w | (Ask _ ss : _) <- mwInbox (wWorkers world M.! w)
                            , let mw = wWorkers world M.! w
                            , let bad = filter (`S.notMember` mwStore mw) ss
                            , not (null bad) -> ["asked " ++ show bad ++ " of a worker not holding it"]
                  _ -> []
            go (k + 1) world' (idleBad' ++ idleBad) (missing' ++ missing)

allStates :: M.Map WorkerId [(StateId, Double)] -> [StateId]
allStates = sort . concatMap (map fst) . M.elems

spec :: Spec
spec = describe "the evolve scheduler (pure, against a model of the workers)" $ do
  checkpointSpec
  callCostSpec
  failedCallSpec
  stateMapSpec
  it "keeps a worker's held states as a list sorted costliest first would (insert, take, size)" $ property $
    forAll genHeld $ \(xs, (c, s), n) ->
      let held = heldFromList xs
          (taken, rest) = heldTake n held
      in heldToList held === longestFirst xs
         .&&. heldSize held === length xs
         .&&. heldToList (heldInsert c s held) === longestFirst ((c, s) : xs)
         .&&. (taken, heldToList rest) === splitAt (max 0 n) (longestFirst xs)
  it "evolves every state exactly once and finishes" $ property $
    forAll genHoldings $ \holdings -> forAll (runWorld holdings False) $ \o ->
      let w = outWorld o in
      counterexample (show (wBad w, outMissing o)) $
        null (wBad w) .&&. null (outMissing o)
        .&&. planDone (wPlan w)
        .&&. M.keys (wEvolved w) === allStates holdings
        .&&. all (== 1) (M.elems (wEvolved w))

  it "places each state given back exactly once per move, and no other" $ property $
    forAll genHoldings $ \holdings -> forAll (runWorld holdings False) $ \o ->
      let w = outWorld o in
      counterexample (show (wPlaced w, wReleased w)) $
        -- a state may move more than once; each time it was given back it
        -- is placed exactly once
        wPlaced w === wReleased w

  it "leaves no worker idle while another holds two or more unstarted states" $ property $
    forAll genHoldings $ \holdings -> forAll (runWorld holdings False) $ \o ->
      checkCoverage $
      cover 30 (M.size (wPlaced (outWorld o)) > 0) "states moved" $
      counterexample (unlines (take 3 (outIdleViolations o))) (null (outIdleViolations o))

  it "with a worker lost, reports its states, and evolves each once after they are adopted" $ property $
    forAll genHoldings $ \holdings -> forAll (runWorld holdings True) $ \o ->
      let w = outWorld o
      in counterexample (show (wBad w, outMissing o)) $
         -- the runs must include kills, and kills that lost states (checked, not hoped)
         checkCoverage $
         cover 40 (not (S.null (wGone w))) "a worker killed" $
         cover 15 (not (S.null (wLost w))) "states lost and adopted" $
           null (wBad w) .&&. null (outMissing o) .&&. planDone (wPlan w)
           .&&. M.keys (wEvolved w) === allStates holdings
           .&&. all (== 1) (M.elems (wEvolved w))
           -- every answer heard took 1 s, lost workers' answers included
           .&&. sum (M.elems (planBusy (wPlan w))) === fromIntegral (sum (M.elems (wEvolved w)))

  it "balances from measured costs: the skew case ends at the optimum" $ do
    -- nine 1 s states and one 10 s state; the slow one's worker also holds two short ones
    let holdings = M.fromList [ (1, [ (StateId k, 1) | k <- [1 .. 7] ])
                              , (2, [(StateId 8, 10), (StateId 9, 1), (StateId 10, 1)]) ]
        (plan, cmds) = startPlan 0 defaultPlanSettings holdings
    planLeft plan `shouldBe` 10
    -- run to the end in time: every state evolved once, the last done at 10 s
    -- (the optimum: the slow state alone on one worker, the nine others on
    -- the other; first come first served would end at 12 s)
    let costs = M.fromList ((StateId 8, 10) : [ (StateId k, 1) | k <- [1 .. 7] ++ [9, 10] ])
    case timedRun (M.map (map fst) holdings) costs plan cmds of
      Left why -> expectationFailure why
      Right (end, evolved, _) -> do
        sort evolved `shouldBe` sort (M.keys costs)
        end `shouldBe` 10
    -- the two short states move to worker 1 before anything starts
    [ s | Release 2 s <- cmds ] `shouldBe` [StateId 9, StateId 10]

  it "keeps exactly the origins live states' lineages need" $ property $
    -- a forest of states: ids 1..n, each uploaded or a child of a lower id,
    -- with ids above 2^40 as workers make them
    forAll (choose (1, 60 :: Int)) $ \n ->
    forAll (vectorOf n (choose (0, 1 :: Double))) $ \coins ->
    forAll (sublistOf [1 .. n]) $ \liveIx ->
      let sid k = StateId (fromIntegral k * 1099511627776 + fromIntegral k)
          ref = TaskRef (Fingerprint 1 2) "step" (Fingerprint 3 4) (Fingerprint 5 6)
          origin k c | k == 1 || c < 0.3 = Seen (B.pack [fromIntegral k])
                     | otherwise = ChildOf (sid (1 + floor (c * fromIntegral (k - 1)) `min` (k - 1))) ref B.empty k
          origins = SM.fromList [ (sid k, origin k c) | (k, c) <- zip [1 ..] coins ]
          live = map sid liveIx
          pruned = pruneOrigins live origins
          ancestors s = case SM.lookup s origins of
            Just (ChildOf p _ _ _) -> s : ancestors p
            Just (Seen _) -> [s]
            Nothing -> []
      in [ lineage pruned s | s <- live ] === [ lineage origins s | s <- live ]
         .&&. S.fromList (SM.keys pruned) === S.fromList (concatMap ancestors live)

  it "prunes origins only once they have doubled, and never loses a live lineage" $ property $
    forAll (choose (1, 60 :: Int)) $ \n ->
    forAll (vectorOf n (choose (0, 1 :: Double))) $ \coins ->
    forAll (sublistOf [1 .. n]) $ \liveIx ->
    forAll (choose (0, 80)) $ \before ->
      let sid k = StateId (fromIntegral k * 1099511627776 + fromIntegral k)
          ref = TaskRef (Fingerprint 1 2) "step" (Fingerprint 3 4) (Fingerprint 5 6)
          origin k c | k == 1 || c < 0.3 = Seen (B.pack [fromIntegral k])
                     | otherwise = ChildOf (sid (1 + floor (c * fromIntegral (k - 1)) `min` (k - 1))) ref B.empty k
          origins = SM.fromList [ (sid k, origin k c) | (k, c) <- zip [1 ..] coins ]
          live = SM.fromList [ (sid k, 1 :: Int) | k <- liveIx ]
          reg = keepOrigins live origins emptyRegistry { regPruned = before }
          due = SM.size origins > 2 * max (SM.size live) before
      in [ lineage (regOrigin reg) s | s <- SM.keys live ] === [ lineage origins s | s <- SM.keys live ]
         .&&. (if due then regOrigin reg === pruneOrigins (SM.keys live) origins .&&. regPruned reg === SM.size (regOrigin reg)
               else regOrigin reg === origins .&&. regPruned reg === before)

  it "groups the states to evolve by their holder, every worker listed, absent holders left out" $ property $
    forAll (sublistOf [1 .. 12 :: WorkerId]) $ \workers ->
    forAll (listOf ((,) <$> choose (1, 400 :: Int) <*> choose (1, 16 :: WorkerId))) $ \placed ->
    forAll (sublistOf [1 .. 400 :: Int]) $ \chosen ->
      let whereAt = SM.fromList [ (StateId (fromIntegral k), w) | (k, w) <- placed ]
          toEvolve = map (StateId . fromIntegral) chosen
          cost (StateId k) = fromIntegral k / 100
          grouped = holdingsOf workers (`SM.lookup` whereAt) toEvolve cost
          expected = M.fromList [ (w, sort [ (s, cost s) | s <- toEvolve, SM.lookup s whereAt == Just w ]) | w <- workers ]
      in M.map sort grouped === expected

  it "moves nothing when every worker has the same work" $ do
    -- four workers with six 1 s states each, and a queue of four: a worker
    -- whose queue shrinks as it works must not take states from the others,
    -- which are just as far along (each such move would cross the network
    -- twice and shorten nothing)
    let holdings = M.fromList [ (w, [ (StateId (fromIntegral w * 100 + k), 1) | k <- [1 .. 6] ]) | w <- [1 .. 4 :: Int] ]
        settings = defaultPlanSettings { settingsLead = 3, settingsMeanCost = Just 1 }
        (plan, cmds) = startPlan 0 settings holdings
        costs = M.fromList [ (s, 1) | ss <- M.elems holdings, (s, _) <- ss ]
    case timedRun (M.map (map fst) holdings) costs plan cmds of
      Left why -> expectationFailure why
      Right (end, evolved, moved) -> do
        length evolved `shouldBe` 24
        moved `shouldBe` 0
        end `shouldBe` 6

  it "takes no state the victim would start before a move could deliver it, judged by the round trips measured" $ do
    -- two workers with three 1 s states each, all asked at once; worker 2
    -- answers its states while worker 1 answers none. Worker 2 may take
    -- the last of worker 1's two unstarted states, which worker 1 would
    -- start about 1.5 s from now: worth it if a move takes less than that
    -- (one and a half round trips), pointless if it takes more
    let holdings = M.fromList [ (w, [ (StateId (fromIntegral w * 10 + k), 1) | k <- [1 .. 3] ]) | w <- [1, 2 :: WorkerId] ]
        settings rtt = defaultPlanSettings { settingsLead = 3, settingsMeanCost = Just 1, settingsRoundTrip = rtt }
        answerAll rtt = foldM (\(p, cmds) s -> fmap (<> cmds) <$> stepPlan 1 (Evolved 2 s 1) p)
                              (fst (startPlan 0 (settings rtt) holdings), []) (map StateId [21, 22, 23])
        releases = fmap (\(_, cmds) -> [ (w, s) | Release w s <- cmds ]) . answerAll
    releases Nothing `shouldBe` Right [(1, StateId 13)]
    releases (Just 0.5) `shouldBe` Right [(1, StateId 13)]
    releases (Just 2) `shouldBe` Right []
    -- the round trip is measured: the state asked back at 1 s comes at 5 s
    let measured = do
          (p, _) <- answerAll Nothing
          (p', _) <- stepPlan 5 (Released 1 (StateId 13) B.empty) p
          pure (moveRoundTrip p')
    measured `shouldBe` Right (Just 4)

  it "takes nothing from a worker that has probably started its states since it last answered" $ do
    -- two workers with four 1 s states each, all asked at 0. Worker 2
    -- answers two of them while worker 1's answers are not read: on paper
    -- worker 1 still has three unstarted states against worker 2's one, so
    -- worker 2 would take one. Read at 0.5 s that is right; read at 2 s,
    -- worker 1 has been working for two step times and has probably
    -- started two of the three, and the move would shorten nothing (a
    -- master that falls behind reads answers late: at 2048 simulated
    -- workers, 1,199 asks back in a first call that started balanced)
    let holdings = M.fromList [ (w, [ (StateId (fromIntegral w * 10 + k), 1) | k <- [1 .. 4] ]) | w <- [1, 2 :: WorkerId] ]
        settings = defaultPlanSettings { settingsLead = 3, settingsMeanCost = Just 1 }
        (plan0, cmds0) = startPlan 0 settings holdings
        answerTwoAt t = foldM (\(p, cmds) s -> fmap (<> cmds) <$> stepPlan t (Evolved 2 s 1) p)
                              (plan0, []) (map StateId [21, 22])
        releases t = fmap (\(_, cmds) -> [ (w, s) | Release w s <- cmds ]) (answerTwoAt t)
    [ length ss | Ask _ ss <- cmds0 ] `shouldBe` [4, 4]
    releases 0.5 `shouldBe` Right [(1, StateId 14)]
    releases 2 `shouldBe` Right []

  it "asks a worker for no state again once it kept one: those before it are started too" $ do
    -- worker 1 is asked for three 1 s states; worker 2 joins idle, asks
    -- for the last back, and worker 1 answers that it kept it (it had
    -- started it). Asking again would hear "kept" again: on a host whose
    -- workers answer at once that ping-pong ran for seconds at 2048
    -- workers a host
    let holdings = M.fromList [(1 :: WorkerId, [ (StateId k, 1) | k <- [1 .. 3] ])]
        settings = defaultPlanSettings { settingsLead = 4, settingsMeanCost = Just 1 }
        (plan00, cmds0) = startPlan 0 settings holdings
        Right (plan0, cmdsCame) = stepPlan 0 (WorkerCame 2) plan00
    [ (w, ss) | Ask w ss <- cmds0 ] `shouldBe` [(1, map StateId [1, 2, 3])]
    [ (w, s) | Release w s <- cmdsCame ] `shouldBe` [(1, StateId 3)]
    case stepPlan 0.1 (Kept 1 (StateId 3)) plan0 of
      Left why -> expectationFailure why
      Right (plan1, cmds1) -> do
        [ c | c@Release {} <- cmds1 ] `shouldBe` []
        -- and the three are answered where they are
        let answer p s = either error fst (stepPlan 1 (Evolved 1 (StateId s) 1) p)
        planDone (foldl' answer plan1 [1, 2, 3]) `shouldBe` True

  it "fills a worker's queue again only once it is down to half, in one ask" $ do
    -- one worker, twenty 1 s states, 4 s of lead: a queue of five (the
    -- running state and four behind it), filled again at two. Asking for
    -- one state per answer cost a message, and a system call on each
    -- side, per state
    let holdings = M.fromList [ (1 :: WorkerId, [ (StateId k, 1) | k <- [1 .. 20] ]) ]
        settings = defaultPlanSettings { settingsLead = 4, settingsMeanCost = Just 1 }
        (plan0, cmds0) = startPlan 0 settings holdings
        asksIn cmds = [ ss | Ask _ ss <- cmds ]
        answer (plan, queue, sizes) _ = case queue of
          [] -> error "an answer with nothing asked"
          st : rest -> case stepPlan 0 (Evolved 1 st 1) plan of
            Left why -> error why
            Right (plan', cmds) -> (plan', rest ++ concat (asksIn cmds), sizes ++ [ length ss | ss <- asksIn cmds ])
        firstAsks = asksIn cmds0
        (end, left, sizes) = foldl' answer (plan0, concat firstAsks, []) [1 .. 20 :: Int]
    map length firstAsks `shouldBe` [5]
    sizes `shouldBe` [3, 3, 3, 3, 3]
    left `shouldBe` []
    planDone end `shouldBe` True

-- Run a plan to its end with workers that take each state's cost in time
-- and messages that arrive at once, as "Herd.Node.Worker.Evolve" answers: the
-- time the last state is done, the states evolved, in order, and how many
-- states were given back to move.
timedRun :: M.Map WorkerId [StateId] -> M.Map StateId Double -> Plan -> [Command] -> Either String (Double, [StateId], Int)
timedRun holdings costs plan0 cmds0 =
  let ws00 = M.map (\ss -> (S.fromList ss, [], Nothing)) holdings
      (ws0, q0) = commands cmds0 ws00 []
  in go (0 :: Int) 0 plan0 ws0 q0 [] q0
  where
    -- per worker: the states it holds and has not started, those of them
    -- it was asked to evolve (in order), and the one running with its end
    commands [] ws q = (ws, q)
    commands (c : cs) ws q = case c of
      Ask w ss -> commands cs (M.adjust (\(held, asked, r) -> (held, asked ++ ss, r)) w ws) q
      Release w st -> case M.lookup w ws of
        Just (held, asked, r) | S.member st held ->
          commands cs (M.insert w (S.delete st held, filter (/= st) asked, r) ws) (q ++ [Released w st B.empty])
        _ -> commands cs ws (q ++ [Kept w st])
      Place w st _ -> commands cs (M.adjust (\(held, asked, r) -> (S.insert st held, asked, r)) w ws) q
      Lose _ -> commands cs ws q
    -- idle workers start the first state they were asked for
    start t = M.map (\(held, asked, running) -> case (asked, running) of
                        (st : rest, Nothing) -> (S.delete st held, rest, Just (st, t + costs M.! st))
                        _ -> (held, asked, running))
    go n t plan ws queued done given
      | n > 10000 = Left "the plan did not finish"
      | (ev : rest) <- queued = case stepPlan t ev plan of
          Left why -> Left why
          Right (plan', cmds) -> let (ws', more) = commands cmds ws [] in go (n + 1) t plan' ws' (rest ++ more) done (more ++ given)
      | planDone plan = Right (t, reverse done, length [ () | Released {} <- given ])
      | otherwise =
          let ws1 = start t ws
          in case sort [ (end, w, st) | (w, (_, _, Just (st, end))) <- M.toList ws1 ] of
               [] -> Left ("nothing runs and the plan is not done: " ++ show (planLeft plan) ++ " left")
               (end, w, st) : _ ->
                 go (n + 1) end plan (M.adjust (\(held, asked, _) -> (held, asked, Nothing)) w ws1)
                    [Evolved w st (costs M.! st)] (st : done) given

-- The maps keyed by state id ("Herd.Core.Evolve.StateMap") against Data.Map:
-- ids with the top bit set, as workers numbered 2^23 and up make them,
-- sort last, as Word64's order has them.
stateMapSpec :: Spec
stateMapSpec =
  it "keeps maps by state id in the ids' order, as a Data.Map of them would" $ property $
    forAll (listOf ((,) <$> genId <*> arbitrary)) $ \pairs ->
    forAll genId $ \probe ->
      let sm = SM.fromList pairs :: SM.StateMap Int
          m = M.fromList pairs
      in SM.toList sm === M.toList m
         .&&. SM.keys (SM.delete probe sm) === M.keys (M.delete probe m)
         .&&. SM.toList (SM.insertWith (+) probe 7 sm) === M.toList (M.insertWith (+) probe 7 m)
         .&&. SM.lookup probe sm === M.lookup probe m
         .&&. SM.toMap sm === m .&&. SM.toList (SM.fromMap m) === M.toList m
         .&&. SM.size sm === M.size m
         .&&. SM.foldlWithKey' (\acc k _ -> k : acc) [] sm === reverse (M.keys m)
  where
    genId = StateId <$> oneof [ choose (0, 2 ^ (41 :: Int)), choose (2 ^ (63 :: Int) - 4, 2 ^ (63 :: Int) + 4)
                              , choose (maxBound - 8, maxBound), arbitrary ]

-- Checkpoints of a population ("Herd.Core.Evolve.Checkpoint").
checkpointSpec :: Spec
checkpointSpec =
  it "checkpoints: takes a state's bytes only from its own worker, hands them back, and leaves a lost worker's states deep" $ do
    let chainOf k s = ((StateId (s * 100), Seen (B.pack [fromIntegral s]))
                                   : [ (StateId (s * 100 + j), ChildOf (StateId (s * 100 + j - 1)) ref B.empty 0) | j <- [1 .. k] ])
        ref = TaskRef (Fingerprint 1 2) "step" (Fingerprint 3 4) (Fingerprint 5 6)
        reg = emptyRegistry { regStates = placedAt [ (StateId 105, 1), (StateId 205, 2) ]
                            , regOrigin = SM.fromList (chainOf 5 1 ++ chainOf 5 2), regDepth = 5 }
        deep = deepStates 4 reg
        (machine, cp0, outs) = checkpointStart [1, 2] deep
        (cp1, o1) = machineMessage machine 0 2 (StateReleased 105 (B.pack [9])) cp0   -- not its worker
        (cp2, o2) = machineMessage machine 0 1 (StateReleased 105 (B.pack [7])) cp1
        (cp3, _) = machineLost machine 0 2 "gone" cp2
        reg' = applyCheckpoint cp3 reg
    length outs `shouldBe` 2
    (length o1, length o2) `shouldBe` (0, 1)
    machineDone machine cp3 `shouldBe` True
    lineageDepth (regOrigin reg') (StateId 105) `shouldBe` 0
    lineageDepth (regOrigin reg') (StateId 205) `shouldBe` 5
    regDepth reg' `shouldBe` 5

-- A call through its session and back to the registry: each child is
-- placed where it was made, with the time its parent's step took, which
-- the next call's plan starts from ("a child costs what its parent cost").
callCostSpec :: Spec
callCostSpec =
  it "records where each child lives and what its parent's step took, for the next call's estimates" $ do
    let ref = TaskRef (Fingerprint 1 2) "step" (Fingerprint 3 4) (Fingerprint 5 6)
        reg0 = emptyRegistry { regStates = placedAt [ (StateId 1, 1), (StateId 2, 2) ] }
        start = CallStart ref reg0 [StateId 1, StateId 2] (SM.fromList [ (StateId 1, B.empty), (StateId 2, B.empty) ])
                          (estimateFrom reg0) 0.1 3 0
        kid w = (fromIntegral (w :: Int) `shiftL` SM.stateIdBits) .|. 1
        machine = callMachine "step"
    case startCall start [1, 2] of
      Left e -> expectationFailure ("the call did not start: " ++ show e)
      Right (call0, _) -> do
        let (call1, _) = machineMessage machine 1 1 (StateEvolved 1 1000000000 [(kid 1, B.empty)]) call0
            (call2, _) = machineMessage machine 3 2 (StateEvolved 2 3000000000 [(kid 2, B.empty)]) call1
            reg1 = registryAfter ref call2 reg0
        machineDone machine call2 `shouldBe` True
        SM.toList (regStates reg1) `shouldBe` [ (StateId (kid 1), Placed 1 1), (StateId (kid 2), Placed 2 3) ]
        map (estimateFrom reg1 . StateId) [kid 1, kid 2] `shouldBe` [1, 3]
        regMeanCost reg1 `shouldBe` Just 2
        callBusy call2 `shouldBe` M.fromList [ (1, 1), (2, 3) ]

-- A failed call leaves nothing of its own on the workers: the states it
-- was given and the children it made are dropped where they are held, a
-- state still being evolved has its children dropped when it reports,
-- even after the call ended, and a worker drops what it is told to.
failedCallSpec :: Spec
failedCallSpec = describe "a failed evolve call" $ do
  let ref = TaskRef (Fingerprint 1 2) "step" (Fingerprint 3 4) (Fingerprint 5 6)
      kid w = (fromIntegral (w :: Int) `shiftL` SM.stateIdBits) .|. 1
  it "tells each worker to drop the states it was given and the children it made" $ do
    let reg0 = emptyRegistry { regStates = placedAt [ (StateId 1, 1), (StateId 2, 2), (StateId 3, 1), (StateId 9, 2) ] }
        inputs = SM.fromList [ (StateId s, B.empty) | s <- [1, 2, 3] ]
        start = CallStart ref reg0 [StateId 1, StateId 2, StateId 3] inputs (estimateFrom reg0) 0.1 3 0
        machine = callMachine "step"
    case startCall start [1, 2] of
      Left e -> expectationFailure ("the call did not start: " ++ show e)
      Right (call0, _) -> do
        let (call1, _) = machineMessage machine 1 1 (StateEvolved 1 1000 [(kid 1, B.empty)]) call0
            (_, outs) = machineMessage machine 2 2 (EvolveThrew 2 (T.pack "boom")) call1
            drops = M.fromList [ (w, sort ss) | SendTo w (StatesDrop ss) <- outs ]
        -- 9 was not the call's: it stays
        drops `shouldBe` M.fromList [ (1, sort [3, kid 1]), (2, [2]) ]
        length [ () | Fail _ <- outs ] `shouldBe` 1
  it "drops the children a worker reports of a call that ended" $ do
    let (core1, _) = step 0 (Ev.LinkUp 1) emptyCore
        (_, cmds) = step 1 (Ev.Received 1 (StateEvolved 5 1000 [(kid 1, B.empty)])) core1
    [ m | Ev.Send 1 Urgent m <- cmds ] `shouldBe` [StatesDrop [kid 1]]
  it "is forgotten by a worker told to drop its states" $ do
    let h0 = newHeld 1 :: Held ()
        (h1, _) = heldMessage (StateAdd 7 B.empty) Nothing h0
        (h2, _) = heldMessage (StateAdd 8 B.empty) Nothing h1
        (h3, answers) = heldMessage (StatesDrop [7, 99]) Nothing h2
    (heldStateCount h3, answers) `shouldBe` (1, [])
