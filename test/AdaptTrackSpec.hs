-- | The adaptive driver's tracker ("Herd.Core.Adapt.Track") against a
-- model SLURM: random rounds of queue changes, joins, preemptions and
-- refused submissions. It never holds more than the maximum, cancels a
-- job at most once and only once retired, cancels nothing idle while
-- work waits, counts each failure once, and retires jobs before their
-- walltime with a replacement; and its jobs show by phase in
-- @/api/status@ and @/metrics@.
module AdaptTrackSpec (spec) where

import Data.List (foldl')
import qualified Data.Map.Strict as M
import Herd.Core.Adapt
import Herd.Core.Adapt.Slurm (SlurmState (..))
import Herd.Core.Adapt.Track
import Data.List (isInfixOf)
import Herd.Core.Master (emptyCore)
import Herd.Core.Master.Workers (noCounters)
import Herd.Core.Monitor.Status (Inputs (..), buildStatus)
import Herd.Master.Monitor.Render (prometheusText, statusJson)
import Test.Hspec
import Test.QuickCheck

-- One round of the world: what happens before the tracker looks.
data Move = Move
  { mvWaiting :: Int    -- ^ tasks waiting
  , mvStart   :: Bool   -- ^ the oldest queued job starts
  , mvJoin    :: Bool   -- ^ started jobs' agents connect
  , mvPreempt :: Bool   -- ^ SLURM takes away a running job
  , mvRefuse  :: Bool   -- ^ sbatch refuses this round
  , mvBusy    :: Bool   -- ^ the workers have work
  } deriving Show

instance Arbitrary Move where
  arbitrary = Move <$> frequency [(2, pure 0), (3, chooseInt (1, 50))] <*> arbitrary <*> arbitrary
                   <*> frequency [(9, pure False), (1, pure True)] <*> frequency [(8, pure False), (1, pure True)]
                   <*> arbitrary

-- The model: jobs in the queue with their state and whether their agent
-- is connected, the next id, and failures it caused.
data World = World
  { wJobs :: M.Map String (SlurmState, Bool)
  , wNext :: Int
  , wCaused :: Int
  , wLog :: [Action]
  , wTracker :: Tracker
  , wNow :: Double
  , wBad :: [String]
  }

knobs :: Knobs
knobs = Knobs (AdaptLimits 1 3 1 1 4 1) (Just 60) 20 10

-- Step the world and the tracker one round (a second).
stepWorld :: World -> Move -> World
stepWorld w mv =
  let now = wNow w + 1
      jobs0 = wJobs w
      queued = [ i | (i, (Queued, _)) <- M.toList jobs0 ]
      started = case queued of
        (i : _) | mvStart mv -> M.insert i (Started, False) jobs0
        _ -> jobs0
      joined = if mvJoin mv then M.map (\(st, c) -> (st, c || st == Started)) started else started
      victims = [ i | mvPreempt mv, (i, (Started, True)) <- take 1 (M.toList joined) ]
      retiredIds = M.keys (M.filter (\j -> tjRetiring j /= Nothing) (trJobs (wTracker w)))
      -- a job the tracker saw working, taken before it was retired (one it
      -- never saw joined is its own kind of failure, counted apart)
      caused = length [ v | v <- victims, v `notElem` retiredIds
                          , maybe False tjJoined (M.lookup v (trJobs (wTracker w))) ]
      jobs1 = foldr M.delete joined victims
      ob = Observation now (Just (M.map fst jobs1))
             (M.fromList [ (i, JobWorkers 1 (not (mvBusy mv) || mvWaiting mv == 0) 0) | (i, (_, True)) <- M.toList jobs1 ])
             (mvWaiting mv)
      (tr1, acts) = observe knobs ob (wTracker w)
      w1 = w { wJobs = jobs1, wNow = now, wTracker = tr1, wLog = wLog w ++ acts, wCaused = wCaused w + caused }
  in foldl' (carry mv now) w1 acts

-- Carry out one action in the model.
carry :: Move -> Double -> World -> Action -> World
carry mv now w a = case a of
  SubmitJobs n _ -> foldl' (\w' _ -> submitOne w') w [1 .. n]
  CancelJobs ids _ ->
    let notRetired = [ i | i <- ids, maybe True ((== Nothing) . tjRetiring) (M.lookup i (trJobs (wTracker w))) ]
    in w { wJobs = foldr M.delete (wJobs w) ids
         , wBad = wBad w ++ [ "cancelled unretired: " ++ show notRetired | not (null notRetired) ] }
  _ -> w
  where
    submitOne w'
      | mvRefuse mv =
          let (tr, _) = submitted now (Left "refused") (wTracker w') in w' { wTracker = tr, wCaused = wCaused w' + 1 }
      | otherwise =
          let i = show (wNext w')
              (tr, _) = submitted now (Right i) (wTracker w')
          in w' { wTracker = tr, wNext = wNext w' + 1, wJobs = M.insert i (Queued, False) (wJobs w') }

run :: [Move] -> World
run = foldl' check (World M.empty 1 0 [] emptyTracker 0 [])
  where
    check w mv =
      let w' = stepWorld w mv
          tr = wTracker w'
          live = M.size (M.filter ((== Nothing) . tjRetiring) (trJobs tr))
          idleCancels = [ () | mvWaiting mv > 0, CancelJobs _ why <- drop (length (wLog w)) (wLog w'), take 4 why == "idle" ]
      in w' { wBad = wBad w' ++ [ "more than 3 live jobs: " ++ show live | live > 3 ]
                             ++ [ "an idle job cancelled while work waited" | not (null idleCancels) ] }

spec :: Spec
spec = trackerSpec >> renderSpec

trackerSpec :: Spec
trackerSpec = describe "the adaptive tracker" $ do
  it "keeps the maximum, cancels each job once and only when retired, none idle while work waits" $
    property $ \moves ->
      let w = run moves
          cancelled = [ i | CancelJobs js _ <- wLog w, i <- js ]
          twice = M.keys (M.filter (> (1 :: Int)) (M.fromListWith (+) [ (i, 1) | i <- cancelled ]))
          bad = wBad w ++ [ "cancelled twice: " ++ show twice | not (null twice) ]
      in counterexample (unlines bad) (null bad)
  it "counts each refusal and each job lost while working as one failure" $
    property $ \moves ->
      let w = run moves
          neverConnected = length [ () | Say l <- wLog w, "without its agent connecting" `elem'` l ]
          endedEarly = length [ () | Say l <- wLog w, "ended before its agent connected" `elem'` l ]
      in trFailedTotal (wTracker w) === wCaused w + neverConnected + endedEarly
  it "retires a job before its walltime, holds its workers, asks for a replacement, cancels it once idle" $ do
    let start = Observation 0 (Just M.empty) M.empty 10
        (t1, a1) = observe knobs start emptyTracker
        (t2, _) = submitted 0 (Right "7") t1
        joinedAt t busy = Observation t (Just (M.fromList [("7", Started)])) (M.fromList [("7", JobWorkers 1 (not busy) 0)]) 10
        (t3, _) = observe knobs (joinedAt 1 True) t2
        -- started at 1: retires at 1 + (60 - 20), the first job unstaggered
        (t4, a4) = observe knobs (joinedAt 41 True) t3
        (t5, a5) = observe knobs (joinedAt 41.5 False) t4
        (_, a6) = observe knobs (joinedAt 42.6 False) t5
        (_, early) = observe knobs (joinedAt 40.9 True) t3
    [ ids | HoldJobs ids <- early ] `shouldBe` []
    [ n | SubmitJobs n _ <- a1 ] `shouldBe` [1]
    [ ids | HoldJobs ids <- a4 ] `shouldBe` [["7"]]
    [ n | SubmitJobs n _ <- a4 ] `shouldBe` [1]
    [ ids | CancelJobs ids _ <- a5 ] `shouldBe` []
    [ ids | CancelJobs ids _ <- a6 ] `shouldBe` [["7"]]
  it "cancels a job that runs past the start timeout without connecting, as a failure" $ do
    let (t1, _) = submitted 0 (Right "3") emptyTracker
        queue = Just (M.fromList [("3", Started)])
        (t2, _) = observe knobs (Observation 1 queue M.empty 0) t1
        (t3, a3) = observe knobs (Observation 12 queue M.empty 0) t2
    [ ids | CancelJobs ids _ <- a3 ] `shouldBe` [["3"]]
    trFailures t3 `shouldBe` 1
    awaitedWorkers knobs t3 `shouldBe` 1
  where
    elem' needle hay = any (\k -> take (length needle) (drop k hay) == needle) [0 .. length hay]

-- | The jobs as the status page, @/api/status@ and @/metrics@ show them.
renderSpec :: Spec
renderSpec = describe "adaptive jobs in the status" $
  it "are listed by phase in /api/status and counted in /metrics" $ do
    let tracker = (snd' (submitted 0 (Right "11") emptyTracker))
        (t2, _) = observe knobs (Observation 1 (Just (M.fromList [("11", Started)])) (M.fromList [("11", JobWorkers 1 False 0)]) 5) tracker
        (t3, _) = submitted 2 (Right "12") t2
        (t4, _) = submitted 3 (Left "refused") t3
        inputs = Inputs
          { inNow = 10, inStarted = 0, inLoop = "epoll", inCore = emptyCore, inConnected = M.empty
          , inDeparted = M.empty, inLinks = M.empty, inCounters = noCounters, inLog = [], inMemory = M.empty
          , inMemoryLimit = Nothing, inLinksOpen = 0, inShareSends = (0, 0), inRelayed = (0, 0), inHanded = (0, 0), inHosts = []
          , inAdapt = Just (summary t4) }
        st = buildStatus inputs
    summary t4 `shouldBe` AdaptSummary ["12"] ["11"] [] 2 1
    statusJson st `shouldSatisfy` isInfixOf "\"slurm_jobs\":{\"pending\":[\"12\"],\"running\":[\"11\"],\"retiring\":[],\"submitted_total\":2,\"failed_total\":1}"
    let metrics = lines (prometheusText st)
    metrics `shouldSatisfy` elem "herd_slurm_jobs{phase=\"pending\"} 1"
    metrics `shouldSatisfy` elem "herd_slurm_jobs{phase=\"running\"} 1"
    metrics `shouldSatisfy` elem "herd_slurm_job_failures_total 1"
    statusJson (buildStatus inputs { inAdapt = Nothing }) `shouldSatisfy` isInfixOf "\"slurm_jobs\":null"
  where snd' (t, _) = t
