-- | The adaptive-scaling policy ("Herd.Core.Adapt") keeps its promises on
-- random views: the maximum, the minimum, no cancellation while work
-- waits, growth and shrinkage only after their waits, the backoff.
module AdaptSpec (spec) where

import Herd.Core.Adapt
import Herd.Core.Adapt.Slurm
import Test.Hspec
import Test.QuickCheck

limitsGen :: Gen AdaptLimits
limitsGen = do
  lo <- chooseInt (0, 4)
  hi <- chooseInt (max 1 lo, 8)
  slots <- chooseInt (1, 4)
  AdaptLimits lo hi slots <$> elements [0, 1, 2] <*> elements [0, 5, 10] <*> elements [1, 5]

viewGen :: Gen AdaptView
viewGen = do
  now <- elements [0, 3, 20, 100]
  n <- chooseInt (0, 10)
  jobs <- mapM job [1 .. n]
  waiting <- oneof [pure 0, chooseInt (1, 40)]
  since <- if waiting == 0 then pure Nothing else Just <$> elements [0, now - 1, now]
  failures <- frequency [(3, pure 0), (1, chooseInt (1, 4))]
  lastFail <- elements [0, now - 2, now]
  pure (AdaptView now waiting since jobs failures lastFail)
  where
    job k = AdaptJob (show (k :: Int)) <$> frequency
      [ (1, pure Pending), (1, pure Retiring), (1, pure (Running Nothing))
      , (2, Running . Just <$> elements [0, 50, 99]) ] <*> chooseInt (0, 3)

liveAfter :: AdaptView -> [Decision] -> Int
liveAfter v ds = length (liveJobs (avJobs v)) + sum [ n | Submit n _ <- ds ] - sum [ length js | Cancel js _ <- ds ]

held :: AdaptLimits -> AdaptView -> Bool
held l v = avFailures v > 0 && avNow v < avLastFailure v + backoffSeconds l (avFailures v)

spec :: Spec
spec = policySpec >> slurmSpec

-- | The policy's promises.
policySpec :: Spec
policySpec = describe "the adaptive-scaling policy" $ do
  it "never submits past the maximum, and never cancels below the minimum" $
    property $ forAll limitsGen $ \l -> forAll viewGen $ \v ->
      let ds = decide l v; live = length (liveJobs (avJobs v))
      in counterexample (show ds) $
           (liveAfter v ds <= max live (adaptMax l))
           .&&. (null [ () | Cancel _ _ <- ds ] || liveAfter v ds >= adaptMin l)
  it "always requests the minimum, unless a failure's backoff holds" $
    property $ forAll limitsGen $ \l -> forAll viewGen $ \v ->
      held l v || liveAfter v (decide l v) >= adaptMin l
  it "cancels nothing while work waits, and only jobs idle long enough" $
    property $ forAll limitsGen $ \l -> forAll viewGen $ \v ->
      let cancelled = concat [ js | Cancel js _ <- decide l v ]
          idleLong j = case ajPhase j of
            Running (Just t) -> avNow v - t >= adaptIdleAfter l
            _ -> False
      in (avWaiting v == 0 || null cancelled)
         && all (\i -> any (\j -> ajId j == i && idleLong j) (avJobs v)) cancelled
  it "grows only once work has waited long enough, counting pending jobs as on their way" $
    property $ forAll limitsGen $ \l -> forAll viewGen $ \v ->
      let live = length (liveJobs (avJobs v))
          grown = sum [ n | Submit n _ <- decide l v ]
          waitedEnough = maybe False (\t -> avNow v - t >= adaptGrowAfter l) (avWaitingSince v)
      in counterexample (show (decide l v)) $
           live < adaptMin l || grown == 0 || (waitedEnough && avWaiting v > 0)
  it "grows to the maximum under a large backlog and falls to the minimum when idle" $ do
    let l = AdaptLimits 1 3 1 1 5 1
        running t = AdaptJob t (Running Nothing) 0
        busy = AdaptView 10 2000 (Just 0) [running "a"] 0 0
    decide l busy `shouldBe` [Submit 2 "2000 tasks waited 10.0 s"]
    let idle = AdaptView 100 0 Nothing [ AdaptJob t (Running (Just 50)) 0 | t <- ["a", "b", "c"] ] 0 0
    [ js | Cancel js _ <- decide l idle ] `shouldBe` [["a", "b"]]
  it "cancels the idle jobs holding the fewest values first" $ do
    let l = AdaptLimits 1 3 1 1 5 1
        idle = AdaptView 100 0 Nothing [ AdaptJob t (Running (Just 50)) h | (t, h) <- [("a", 9), ("b", 0), ("c", 2)] ] 0 0
    [ js | Cancel js _ <- decide l idle ] `shouldBe` [["b", "c"]]
  it "holds after a failure, doubling per failure in a row" $ do
    let l = defaultAdaptLimits { adaptBackoff = 2 }
    map (backoffSeconds l) [0, 1, 2, 3] `shouldBe` [0, 2, 4, 8]
    decide l (AdaptView 3 0 Nothing [] 1 2) `shouldBe` []
    length (decide l (AdaptView 5 0 Nothing [] 1 2)) `shouldBe` 1
  it "names what is wrong with bad limits" $ do
    validAdaptLimits defaultAdaptLimits { adaptMin = 5, adaptMax = 2 }
      `shouldBe` Left "the minimum of jobs (5) exceeds the maximum (2)"
    validAdaptLimits defaultAdaptLimits `shouldBe` Right defaultAdaptLimits

-- | The SLURM-facing parsers ("Herd.Core.Adapt.Slurm").
slurmSpec :: Spec
slurmSpec = describe "adaptive scaling's SLURM text" $ do
  it "reads job ranges and names bad ones" $ do
    parseAdaptRange "1..4" `shouldBe` Right (1, 4)
    parseAdaptRange "3" `shouldBe` Right (3, 3)
    parseAdaptRange "5..2" `shouldBe` Left "the fewest jobs exceed the most in \"5..2\""
    either (const True) (const False) (parseAdaptRange "1..x") `shouldBe` True
    either (const True) (const False) (parseAdaptRange "0..0") `shouldBe` True
  it "reads sbatch's job id, with or without a cluster" $ do
    parseSubmitted "1234\n" `shouldBe` Right "1234"
    parseSubmitted "77;herdtest\n" `shouldBe` Right "77"
    either (const True) (const False) (parseSubmitted "sbatch: error: invalid partition\n") `shouldBe` True
  it "reads squeue's states and names lines it cannot read" $
    parseQueue "12 PENDING\n13 RUNNING\n\n14 COMPLETING\nnonsense\n"
      `shouldBe` [ Right ("12", Queued), Right ("13", Started), Right ("14", Ending)
                 , Left "squeue printed a line herd cannot read: \"nonsense\"" ]
