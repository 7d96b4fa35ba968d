-- | Properties of the pure scheduler, driven by simulated workers: every
-- task's result is accepted exactly once, with and without workers failing
-- (the order results land in is the farm's, checked by the cluster tests); no worker is idle while tasks are unassigned;
-- batch sizes follow measured task times.
module SchedulerSpec (spec) where

import Data.List (foldl', sort)
import qualified Data.Map.Strict as M
import qualified Data.Set as S
import Herd.Settings (Batching (..))
import Herd.Core.Farm
import Herd.Core.Farm.State (Sched (..), Worker (..), Batch (..), Job (..))
import qualified Data.Sequence as Seq
import Test.Hspec
import Test.QuickCheck

-- | A simulation's state.
data Sim = Sim
  { simSched    :: Sched
  , simTime     :: Double
  , simAccepted :: M.Map Int Int     -- task index -> its result (index squared)
  , simDup      :: Bool              -- a task was accepted twice
  , simIdleBad  :: Bool              -- INV-BUSY was broken at some step
  , simEnd      :: Maybe Command     -- FinishJob or AbortJob
  , simNextW    :: WorkerId
  , simBatchSizes :: [Int]
  , simFailed   :: M.Map Int Int     -- task index -> times reported failed (a job that keeps going)
  , simCancelled :: [(WorkerId, BatchId)]  -- batches the scheduler told their workers to stop, newest first
  }

apply :: Event -> Sim -> Sim
apply ev sim =
  let t = simTime sim + 0.001
      (s', cmds) = step t ev (simSched sim)
      sim1 = foldl' command sim { simSched = s', simTime = t } cmds
      idle = jobActive s' && pendingTasks s' > 0
             && any (\w -> null (outstandingFor w s')) (liveWorkers s')
      -- the set 'assign' feeds from is exactly the workers with fewer
      -- than two batches outstanding
      hungryWrong = schedHungry s' /= S.fromList [ w | w <- liveWorkers s', length (outstandingFor w s') < 2 ]
                    || schedIdle s' /= S.fromList [ w | w <- liveWorkers s', null (outstandingFor w s') ]
  in sim1 { simIdleBad = simIdleBad sim1 || idle || hungryWrong }
  where
    command s c = case c of
      AcceptResults _ _ ranges ->
        foldl' (\acc i -> if M.member i (simAccepted acc) then acc { simDup = True }
                          else acc { simAccepted = M.insert i (i * i) (simAccepted acc) })
               s (rangeIndices ranges)
      SendBatch _ _ ranges -> s { simBatchSizes = sum (map rangeSize ranges) : simBatchSizes s }
      FinishJob _ _ -> s { simEnd = Just c }
      AbortJob {} -> s { simEnd = Just c }
      DropResults _ -> s
      CancelBatch w b -> s { simCancelled = (w, b) : simCancelled s }
      SlowBatch {} -> s
      TaskFailedAt _ i _ -> s { simFailed = M.insertWith (+) i 1 (simFailed s) }

-- | Start a simulation with some workers and a job.
start :: Int -> Int -> Batching -> Sim
start workers tasks batching =
  let s0 = Sim emptySched 0 M.empty False False Nothing (workers + 1) [] M.empty []
      s1 = foldl' (flip apply) s0 [ WorkerJoined w | w <- [1 .. workers] ]
  in apply (JobSubmitted 1 tasks batching 0.02 1000 1000000 False True) s1

-- | The outstanding batches, in a fixed order.
outstanding :: Sim -> [(WorkerId, BatchId, Int)]
outstanding sim = [ (w, b, sum (map rangeSize rs))
                  | w <- liveWorkers (simSched sim), (b, rs) <- outstandingFor w (simSched sim) ]

-- | A worker dies: the tasks from its oldest batch on are charged.
kill :: WorkerId -> Sim -> Sim
kill w sim = apply (WorkerLost w (case outstandingFor w (simSched sim) of
                                    (b, _) : _ -> Just (Death b 0 "killed")
                                    [] -> Nothing)) sim

-- | One random happening, chosen by a number.
data Move = Finish Int | Kill Int | Join | Wait
  deriving (Show)

instance Arbitrary Move where
  arbitrary = frequency [(8, Finish <$> arbitrary), (1, Kill <$> arbitrary), (1, pure Join), (1, pure Wait)]

-- | A second passes and the scheduler looks for stragglers.
wait :: Sim -> Sim
wait sim = apply Tick sim { simTime = simTime sim + 1 }

-- | Play moves, then finish every outstanding batch until the job ends.
play :: Double -> Bool -> [Move] -> Sim -> Sim
play cost killLast moves sim0 = drain (playOnly cost killLast moves sim0) (10000 :: Int)
  where
    done sim = simEnd sim /= Nothing
    drain sim fuel
      | done sim || fuel == 0 = sim
      | otherwise = drain (finishOne cost 0 sim) (fuel - 1)

-- | Finish the k-th outstanding batch (modulo their number).
finishOne :: Double -> Int -> Sim -> Sim
finishOne cost k sim = case outstanding sim of
  [] -> sim
  obs -> let (w, b, n) = obs !! (abs k `mod` length obs)
         in apply (BatchCompleted w b (cost * fromIntegral n) Nothing) sim

-- | Play moves only.
playOnly :: Double -> Bool -> [Move] -> Sim -> Sim
playOnly cost killLast moves sim0 = foldl' move sim0 moves
  where
    done sim = simEnd sim /= Nothing
    move sim m
      | done sim = sim
      | otherwise = case m of
          Finish k -> finishOne cost k sim
          Kill k -> let live = liveWorkers (simSched sim)
                    in if length live > 1 || (killLast && not (null live))
                         then kill (live !! (abs k `mod` length live)) sim
                         else sim
          Join -> apply (WorkerJoined (simNextW sim)) sim { simNextW = simNextW sim + 1 }
          Wait -> wait sim

complete :: Int -> Sim -> Property
complete n sim =
  counterexample ("end: " ++ show (simEnd sim)) $
    conjoin
      [ isFinish (simEnd sim) === True
      , simDup sim === False
      , M.elems (simAccepted sim) === map (\i -> i * i) [0 .. n - 1]
      , simIdleBad sim === False ]
  where isFinish (Just (FinishJob _ _)) = True
        isFinish _ = False

spec :: Spec
spec = describe "Herd.Core.Farm" $ do
  it "passes over a worker near its memory limit while another can work, feeds all when all are held, and feeds it again once released" $ do
    let run evs = foldl (\(st, out) e -> let (st', o) = step 0 e st in (st', out ++ o)) (emptySched, []) evs
        sentTo cmds = [ w | SendBatch w _ _ <- cmds ]
        joined = [WorkerJoined 1, WorkerJoined 2]
        job = JobSubmitted 1 10 (FixedBatch 1) 0.02 3 1000000 False True
        (_, oneHeld) = run (joined ++ [WorkerHeld 1 True, job])
        (_, bothHeld) = run (joined ++ [WorkerHeld 1 True, WorkerHeld 2 True, job])
        (_, released) = run (joined ++ [WorkerHeld 1 True, job, WorkerHeld 1 False])
    sentTo oneHeld `shouldSatisfy` (\ws -> not (null ws) && all (== 2) ws)
    sentTo bothHeld `shouldSatisfy` (\ws -> 1 `elem` ws && 2 `elem` ws)
    sentTo released `shouldSatisfy` (1 `elem`)
  it "accepts every task's own result exactly once, with no failures" $
    property $ \(Positive w0) (NonNegative n) moves ->
      let w = 1 + w0 `mod` 16
          sim = play 1e-4 False [ m | m@(Finish _) <- moves ] (start w n Adaptive)
      in complete n sim

  it "accepts every result exactly once when workers die and join mid-job" $
    property $ \(Positive w0) (NonNegative n) moves ->
      let w = 2 + w0 `mod` 8
      in complete n (play 1e-3 False moves (start w n Adaptive))

  it "does the same with fixed batches" $
    property $ \(Positive w0) (NonNegative n) (Positive b) moves ->
      let w = 1 + w0 `mod` 8
      in complete n (play 1e-3 False moves (start w n (FixedBatch (1 + b `mod` 50))))

  it "aborts with NoWorkersLeft, never hangs, when every worker dies, whenever and in whatever order" $
    property $ \(Positive n) (Positive w0) finished (order :: [Int]) ->
      let w = 1 + w0 `mod` 8
          sim0 = playOnly 1e-3 False (map Finish (take 20 finished)) (start w (n + 10 * w) Adaptive)
          -- kill the live workers one by one, each chosen by the next number
          killAll ks sim = case liveWorkers (simSched sim) of
            [] -> sim
            live -> let (k, rest) = case ks of { x : xs -> (x, xs); [] -> (0, []) }
                    in killAll rest (kill (live !! (abs k `mod` length live)) sim)
          sim = killAll order sim0
      in classify (M.size (simAccepted sim0) > 0) "some results were in" $
         case simEnd sim of
           Just (AbortJob _ NoWorkersLeft _) -> property True
           Just (FinishJob _ _) -> property (M.size (simAccepted sim0) == n + 10 * w)
           other -> counterexample (show other) False

  it "gives a worker no results of a batch it does not hold" $ do
    let sim0 = start 2 10 Adaptive
        sim = apply (BatchCompleted 1 999 0.1 Nothing) sim0
    M.size (simAccepted sim) `shouldBe` 0

  it "reports the first failed task by its index in the job" $ do
    let sim0 = start 1 5 (FixedBatch 5)
        [(w, b, _)] = outstanding sim0
        sim = apply (BatchCompleted w b 0.1 (Just (3, "boom"))) sim0
    case simEnd sim of
      Just (AbortJob _ (TaskError 3 "boom") _) -> pure ()
      other -> expectationFailure (show other)

  it "sizes batches of a million 1-microsecond tasks in the thousands" $ do
    let sim = play 1e-6 False (replicate 40 (Finish 0)) (start 2 1000000 Adaptive)
    maximum (simBatchSizes sim) `shouldSatisfy` (>= 5000)
    M.size (simAccepted sim) `shouldBe` 1000000
    simDup sim `shouldBe` False

  it "gives forty 5-second tasks out one at a time" $ do
    let sim = play 5 False [] (start 2 40 Adaptive)
    maximum (simBatchSizes sim) `shouldBe` 1
    length (simBatchSizes sim) `shouldBe` 40

  it "prefetches a second batch for short tasks only" $ do
    let short = playOnly 1e-6 False (replicate 4 (Finish 0)) (start 1 100000 Adaptive)
        long = playOnly 5 False (replicate 4 (Finish 0)) (start 1 40 Adaptive)
    length (outstanding short) `shouldBe` 2
    length (outstanding long) `shouldBe` 1

  describe "a task that kills its workers (INV-POISON)" $ do
    it "is named after exactly the job's limit of deaths, and no other task's result is lost or doubled" $
      property $ \(Positive w0) (Positive n0) (NonNegative k0) (Positive m0) picks ->
        let w = 2 + w0 `mod` 5
            n = 1 + n0 `mod` 300
            killer = k0 `mod` n
            limit = 1 + m0 `mod` 4
            (sim, deaths) = runKiller killer picks (startWith limit w n Adaptive)
        in counterexample ("end: " ++ show (simEnd sim) ++ ", deaths " ++ show deaths) $
             conjoin
               [ case simEnd sim of
                   Just (AbortJob _ (TaskKilledWorkers i d _) _) -> i === killer .&&. d === deaths
                   other -> counterexample (show other) False
               -- a first death shared with other tasks cannot name one
               , counterexample "deaths" (deaths == limit || (limit == 1 && deaths == 2))
               , simDup sim === False
               , M.member killer (simAccepted sim) === False
               , simIdleBad sim === False ]

    it "is charged with every death also when its batch is copied as a straggler, and not copied once charged" $
      property $ \(Positive w0) (Positive n0) (NonNegative k0) (Positive m0) picks ->
        let w = 2 + w0 `mod` 5
            n = 1 + n0 `mod` 300
            killer = k0 `mod` n
            limit = 1 + m0 `mod` 4
            -- time passes every third move, so overdue batches are copied to idle workers
            go sim (p : ps) deaths copies fuel
              | simEnd sim == Nothing && fuel > (0 :: Int) =
                  if p `mod` 3 == 0
                    then let sim' = wait sim in go sim' ps deaths (copies + copiesMade (simSched sim') - copiesMade (simSched sim)) (fuel - 1)
                    else let (sim', died) = runStep killer p sim in go sim' ps (if died then deaths + 1 else deaths) copies (fuel - 1)
            go sim _ deaths copies _ = (sim, deaths, copies)
            (final, deaths, copies) = go (startWith limit w n Adaptive) (cycle (0 : 1 : picks)) (0 :: Int) (0 :: Int) 100000
        in classify (copies > 0) "copied" $ counterexample ("end: " ++ show (simEnd final) ++ ", deaths " ++ show deaths ++ ", copies " ++ show copies) $
             conjoin
               [ case simEnd final of
                   Just (AbortJob _ (TaskKilledWorkers i d _) _) -> i === killer .&&. d === deaths
                   other -> counterexample (show other) False
               -- a shared first death, and one shared with a copy's batch, cannot name one
               , counterexample "deaths" (deaths >= limit && deaths <= limit + 2)
               , simDup final === False
               , M.member killer (simAccepted final) === False ]

    it "stops a job whose every task kills its worker after exactly its bound of deaths" $
      property $ \(Positive w0) (Positive n0) (Positive b0) picks ->
        let w = 2 + w0 `mod` 4
            n = 1 + n0 `mod` 300
            bound = 1 + b0 `mod` 30
            s0 = Sim emptySched 0 M.empty False False Nothing (w + 1) [] M.empty []
            sim0 = apply (JobSubmitted 1 n Adaptive 0.02 1000 bound False True)
                         (foldl' (flip apply) s0 [ WorkerJoined x | x <- [1 .. w] ])
            -- a worker chosen by the pick dies running its oldest batch; another joins
            go sim (p : ps) deaths
              | simEnd sim == Nothing, busy@(_ : _) <- [ (x, b) | x <- liveWorkers (simSched sim), (b, _) : _ <- [outstandingFor x (simSched sim)] ] =
                  let (x, b) = busy !! (abs p `mod` length busy)
                      sim1 = apply (WorkerLost x (Just (Death b 0 "killed"))) sim
                  in go (apply (WorkerJoined (simNextW sim1)) sim1 { simNextW = simNextW sim1 + 1 }) ps (deaths + 1)
            go sim _ deaths = (sim, deaths)
            (final, deaths) = go sim0 (cycle (0 : picks)) (0 :: Int)
        in counterexample ("end: " ++ show (simEnd final) ++ ", deaths " ++ show deaths) $
             case simEnd final of
               Just (AbortJob _ (JobKilledWorkers d _) _) -> d === bound .&&. deaths === bound
               other -> counterexample (show other) False

    it "never fails a job for fewer deaths than its limit" $
      property $ \(Positive w0) (NonNegative n) (Positive m0) moves ->
        let w = 2 + w0 `mod` 6
            limit = 1 + m0 `mod` 4
            -- at most limit - 1 workers die, whenever they do
            few = take (limit - 1) [ m | m@(Kill _) <- moves ]
            rest = [ m | m <- moves, not (isKill m) ]
            isKill m = case m of { Kill _ -> True; _ -> False }
        in complete n (play 1e-3 False (interleave rest few) (startWith limit w n Adaptive))

    it "gives no worker a second batch while suspects wait (they would wait behind every other task)" $
      property $ \(Positive w0) (Positive n0) (NonNegative k0) picks ->
        let n = 20 + n0 `mod` 300
            killer = k0 `mod` n
            waiting s = any (not . Seq.null . jobSuspects) (M.elems (schedJobs s))
            doubled s = [ w | (w, wk) <- M.toList (schedWorkers s), M.size (workerOutstanding wk) >= 2 ]
            go _ [] = property True
            go sim (p : ps)
              | simEnd sim /= Nothing = property True
              | otherwise =
                  let (sim', _) = runStep killer p sim
                      before = doubled (simSched sim)
                      now = doubled (simSched sim')
                      fresh = filter (`notElem` before) now
                  in if waiting (simSched sim') && not (null fresh)
                       then counterexample ("workers " ++ show fresh ++ " got a prefetch while suspects wait") False
                       else go sim' ps
        in go (startWith 1000 (2 + w0 `mod` 4) n Adaptive) (take 400 (cycle (0 : picks)))

    it "runs a suspect alone on its worker" $
      property $ \(Positive w0) (Positive n0) picks ->
        let n = 10 + n0 `mod` 200
            alone s = and [ M.size (workerOutstanding wk) == 1
                          | wk <- M.elems (schedWorkers s), any batchSuspect (workerOutstanding wk) ]
            go _ [] = property True
            go sim (p : ps)
              | simEnd sim /= Nothing = property True
              | not (alone (simSched sim)) = counterexample (show (schedWorkers (simSched sim))) False
              | otherwise = go (fst (runStep (n `div` 2) p sim)) ps
        in go (startWith 1000 (2 + w0 `mod` 4) n Adaptive) (take 200 (picks :: [Int]))

  describe "a job that keeps going past failed tasks" $ do
    it "reports each throwing or killing task once, accepts every other once, and finishes" $
      property $ \(Positive w0) (Positive n0) throwers0 (NonNegative k0) picks ->
        let n = 1 + n0 `mod` 200
            w = 2 + w0 `mod` 4
            throwers = [ t `mod` n | t <- take 5 (throwers0 :: [NonNegative Int]) >>= \(NonNegative t) -> [t] ]
            killer = k0 `mod` n
            sim0 = let s0 = Sim emptySched 0 M.empty False False Nothing (w + 1) [] M.empty []
                       s1 = foldl' (flip apply) s0 [ WorkerJoined x | x <- [1 .. w] ]
                   in apply (JobSubmitted 1 n Adaptive 0.02 3 1000000 True True) s1
            -- a worker runs its oldest batch: the killer kills it; else the
            -- first thrower ends the batch, the tasks before it answered
            stepOne sim p = case [ (x, b, rs) | x <- liveWorkers (simSched sim), (b, rs) : _ <- [outstandingFor x (simSched sim)] ] of
              [] -> sim
              busy ->
                let (x, b, rs) = busy !! (abs p `mod` length busy)
                    tasks = rangeIndices rs
                    bad = [ (pos, t) | (pos, t) <- zip [0 ..] tasks, t == killer || t `elem` throwers ]
                in case bad of
                     (pos, t) : _ | t == killer ->
                       let sim1 = apply (WorkerLost x (Just (Death b (abs p `mod` (pos + 1)) "killed"))) sim
                       in apply (WorkerJoined (simNextW sim1)) sim1 { simNextW = simNextW sim1 + 1 }
                     (pos, _) : _ -> apply (BatchCompleted x b 1e-3 (Just (pos, "boom"))) sim
                     [] -> apply (BatchCompleted x b 1e-3 Nothing) sim
            go sim (p : ps) fuel | simEnd sim == Nothing && fuel > (0 :: Int) = go (stepOne sim p) ps (fuel - 1)
            go sim _ _ = sim
            final = go sim0 (cycle (0 : picks)) 100000
            failing = killer : throwers
        in counterexample ("end " ++ show (simEnd final) ++ ", failed " ++ show (simFailed final)) $ conjoin
             [ fmap isFinished (simEnd final) === Just True
             , simDup final === False
             , M.keys (simFailed final) === M.keys (M.fromList [ (t, ()) | t <- failing ])
             , all (== 1) (M.elems (simFailed final)) === True
             , sort (M.keys (simAccepted final) ++ M.keys (simFailed final)) === [0 .. n - 1] ]

  describe "stragglers (INV-TWIN)" $ do
    it "tells a stopped worker to stop a batch whose copy was accepted, and frees it when it answers" $
      property $ \(Positive n0) (Positive w0) ->
        let n = 10 + n0 `mod` 200
            w = 2 + w0 `mod` 4
            others sim = [ (x, b) | x <- liveWorkers (simSched sim), x /= 1, (b, _) : _ <- [outstandingFor x (simSched sim)] ]
            -- a batch whose copy was accepted is cancelled in the same step
            stale sim = [ bid | wk <- M.elems (schedWorkers (simSched sim)), (bid, b) <- M.toList (workerOutstanding wk)
                              , batchSuperseded b, not (batchCancelled b) ]
            go sim fuel
              | not (null (stale sim)) = sim { simDup = True }
              | simEnd sim /= Nothing || fuel == (0 :: Int) = sim
              | otherwise = case others sim of
                  (x, b) : _ -> go (apply (BatchCompleted x b 1e-3 Nothing) sim) (fuel - 1)
                  [] -> go (wait sim) (fuel - 1)
            final = go (start w n Adaptive) 100000
            toOne = [ b | (1, b) <- simCancelled final ]
            held = map fst (outstandingFor 1 (simSched final))
            answered = foldl' (\sim b -> apply (BatchStopped 1 b) sim) final toOne
        in counterexample ("cancelled " ++ show (simCancelled final) ++ ", worker 1 holds " ++ show held) $ conjoin
             [ complete n final
             -- every batch worker 1 still holds was cancelled (its copies won), once each
             , sort toOne === sort held
             , length (simCancelled final) === length (M.fromList [ (c, ()) | c <- simCancelled final ])
             , outstandingFor 1 (simSched answered) === [] ]

    it "cancels each outstanding batch of a job its caller gave up on, once" $
      property $ \(Positive n0) (Positive w0) ->
        let sim0 = start (1 + w0 `mod` 5) (1 + n0 `mod` 300) Adaptive
            before = [ (x, b) | x <- liveWorkers (simSched sim0), (b, _) <- outstandingFor x (simSched sim0) ]
            sim1 = apply (JobCancelled 1) sim0
            sim2 = apply (JobCancelled 1) sim1
            answered = foldl' (\sim (x, b) -> apply (BatchStopped x b) sim) sim2 before
        in conjoin
             [ sort (simCancelled sim1) === sort before
             , simCancelled sim2 === simCancelled sim1
             , concat [ outstandingFor x (simSched answered) | x <- liveWorkers (simSched answered) ] === [] ]

    it "runs a copy of a stopped worker's batches on an idle one, and the job ends without it" $
      property $ \(Positive n0) (Positive w0) ->
        let n = 10 + n0 `mod` 200
            w = 2 + w0 `mod` 4
            -- worker 1 never answers; the others answer their oldest batch, and time passes
            others sim = [ (x, b) | x <- liveWorkers (simSched sim), x /= 1, (b, _) : _ <- [outstandingFor x (simSched sim)] ]
            go sim fuel
              | simEnd sim /= Nothing || fuel == (0 :: Int) = sim
              | otherwise = case others sim of
                  (x, b) : _ -> go (apply (BatchCompleted x b 1e-3 Nothing) sim) (fuel - 1)
                  [] -> go (wait sim) (fuel - 1)
        in complete n (go (start w n Adaptive) 100000)

    it "accepts each task once whichever copy ends first, and drops the other's results" $
      property $ \(Positive n0) order ->
        let n = 20 + n0 `mod` 100
            sim0 = foldl' (\s _ -> wait s) (playOnly 1e-3 False (replicate 6 (Finish 0)) (start 3 n (FixedBatch 4))) [1 .. 3 :: Int]
        in complete n (play 1e-3 False (map Finish order) sim0)

  describe "workers being restarted (INV-AWAIT)" $ do
    it "keeps a job waiting for them when every worker is lost, and fails it once none is awaited" $ do
      let sim0 = apply (WorkersAwaited 1) (start 2 50 Adaptive)
          sim1 = foldl' (flip kill) sim0 [1, 2]
      simEnd sim1 `shouldBe` Nothing
      let back = play 1e-3 False [] (apply (WorkerJoined 9) sim1)
      fmap isFinished (simEnd back) `shouldBe` Just True
      M.size (simAccepted back) `shouldBe` 50
      case simEnd (apply (WorkersAwaited 0) sim1) of
        Just (AbortJob _ NoWorkersLeft _) -> pure ()
        other -> expectationFailure (show other)
    it "takes a job submitted while none is live but some are awaited" $ do
      let s0 = Sim emptySched 0 M.empty False False Nothing 10 [] M.empty []
          sim = apply (JobSubmitted 1 5 Adaptive 0.02 3 1000000 False True) (apply (WorkersAwaited 1) s0)
      simEnd sim `shouldBe` Nothing
      M.size (simAccepted (play 1e-3 False [] (apply (WorkerJoined 3) sim))) `shouldBe` 5

isFinished :: Command -> Bool
isFinished c = case c of { FinishJob _ _ -> True; _ -> False }

-- | Start a simulation whose job allows this many deaths per task.
startWith :: Int -> Int -> Int -> Batching -> Sim
startWith limit workers tasks batching =
  let s0 = Sim emptySched 0 M.empty False False Nothing (workers + 1) [] M.empty []
      s1 = foldl' (flip apply) s0 [ WorkerJoined w | w <- [1 .. workers] ]
  in apply (JobSubmitted 1 tasks batching 0.02 limit 1000000 False True) s1

-- | Spread some moves among others.
interleave :: [a] -> [a] -> [a]
interleave xs ys = case (xs, ys) of
  (x : xs', y : ys') -> x : y : interleave xs' ys'
  _ -> xs ++ ys

-- | One worker, chosen by a number, runs its oldest batch: a batch holding
-- the killer kills it (after sending the results of some of the tasks
-- before the killer, chosen by the number), and a new worker joins in its
-- place; any other batch completes. Returns whether a worker died.
runStep :: Int -> Int -> Sim -> (Sim, Bool)
runStep killer p sim = case [ (w, b, rs) | w <- liveWorkers (simSched sim), (b, rs) : _ <- [outstandingFor w (simSched sim)] ] of
  [] -> (sim, False)
  busy ->
    let (w, b, rs) = busy !! (abs p `mod` length busy)
        tasks = rangeIndices rs
        before = length (takeWhile (/= killer) tasks)
    in if killer `elem` tasks
         then let got = abs p `mod` (before + 1)
                  sim1 = apply (WorkerLost w (Just (Death b got "killed"))) sim
              in (apply (WorkerJoined (simNextW sim1)) sim1 { simNextW = simNextW sim1 + 1 }, True)
         else (apply (BatchCompleted w b (1e-3 * fromIntegral (length tasks)) Nothing) sim, False)

-- | Run workers until the job ends; count the deaths.
runKiller :: Int -> [Int] -> Sim -> (Sim, Int)
runKiller killer picks sim0 = go sim0 (cycle (0 : picks)) (0 :: Int) (100000 :: Int)
  where
    go sim (p : ps) deaths fuel
      | simEnd sim /= Nothing || fuel == 0 = (sim, deaths)
      | otherwise = let (sim', died) = runStep killer p sim
                    in go sim' ps (if died then deaths + 1 else deaths) (fuel - 1)
    go sim [] deaths _ = (sim, deaths)
