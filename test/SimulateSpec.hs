{-# LANGUAGE ScopedTypeVariables #-}
-- | Simulated hosts and the pieces they stand on: the timer wheel's
-- promises, the evolve holder's pure machine, a master's epoll reader that
-- stops when cancelled even in the middle of a link and whose start-up
-- reads do not grow with the square of the links, and simulated workers
-- that join a normal cluster beside real ones and give exactly the
-- one-core results.
module SimulateSpec (spec) where

import Control.Concurrent (threadDelay)
import Control.Concurrent.Async (async, cancel, concurrently, withAsync)
import Control.Exception (bracket, displayException, evaluate, finally)
import Control.Monad (forM, unless)
import Data.IORef
import qualified Data.Map.Strict as M
import Data.Bits (shiftR)
import Data.List (foldl', nub, sort)
import qualified Data.ByteString.Char8 as BC
import Herd
import Herd.Config
import Herd.Core.Base (TaskRef (..))
import Herd.Sys.Clock (monotonicSeconds)
import Herd.Core.Worker.Evolve
import qualified Data.Text as T
import GHC.Fingerprint (Fingerprint (..))
import Herd.Core.Evolve.Registry (stateIdBits)
import Herd.Examples.ParticleFilter
import Herd.Examples.Steal (treeStealTask)
import Herd.Monitor (StealCounts (..), Status (..), WorkerRow (..), clusterStatus)
import Herd.Reader.Epoll (newEpollReader)
import Herd.Reader (Reader (..))
import Herd.Simulate.Wheel
import Herd.Transport (closeConnection, sendFrameStrict)
import Herd.Transport.Tcp (acceptTcp, connectTcp, listenPort, listenTcp)
import Network.Socket (close)
import Herd.Core.Wire (FromWorker (..), ToWorker (..))
import ClusterSpec (withTestClusterConfig)
import ConformanceSpec (withPair)
import System.Posix.Signals (sigKILL, signalProcess)
import System.Timeout (timeout)
import Test.Hspec
import Test.QuickCheck
import TestTasks

spec :: Spec
spec = describe "simulated hosts" $ do
  describe "the timer wheel" $ do
    it "fires every timer once, never before its deadline, and at the first look-up a tick after it" $
      property $ \(deadlinesUs :: [Positive Int]) (stepsUs :: [Positive Int]) ->
        let tick = 1e-4
            deadlines = [ fromIntegral (getPositive d `mod` 100000) / 1e6 | d <- deadlinesUs ]
            wheel0 = foldl' (\w (k, d) -> setTimer d (k, d) w) (newWheel tick) (zip [0 :: Int ..] deadlines)
            times = scanl (+) 0 [ fromIntegral (getPositive s `mod` 5000) / 1e6 | s <- stepsUs ] ++ [1]
            look (w, acc) t = let (due, w') = expire t w in (w', acc ++ [ (t, x) | x <- due ])
            (final, fired) = foldl' look (wheel0, []) times
        in conjoin
             [ sort (map (fst . snd) fired) === [0 .. length deadlines - 1]
             , wheelSize final === 0
             , conjoin [ counterexample (show (t, d)) (t >= d - 1e-9) | (t, (_, d)) <- fired ]
             , conjoin [ counterexample ("late: " ++ show (t, d)) (not (any (\x -> x >= d + tick && x < t) times))
                       | (t, (_, d)) <- fired ] ]

    it "fires timers in deadline order, up to a tick" $
      property $ \(deadlinesUs :: [Positive Int]) ->
        let deadlines = [ fromIntegral (getPositive d `mod` 100000) / 1e6 | d <- deadlinesUs ]
            w = foldl' (flip (\d -> setTimer d d)) (newWheel 1e-4) deadlines
            (due, _) = expire 1 w
        in and (zipWith (\a b -> a <= b + 1e-4) due (drop 1 due))

  describe "the evolve holder's machine" $ do
    it "answers each release at once, each reset once, each evolution at most once (exactly once without releases)" $
      property $ \(ops :: [HeldOp]) ->
        let (h, tally) = foldl' applyOp (seeded, noTally) ops
            (_, drained) = drain h
            evolveAnswers = tEvolved tally + length [ () | a <- drained, isEvolveAnswer a ]
            cleared = tCleared tally + length [ () | StatesCleared <- drained ]
            released = any (\o -> case o of { ReleaseOp _ -> True; ResetOp -> True; _ -> False }) ops
        in conjoin
             [ counterexample "a release not answered once, at once" (tReleaseOk tally)
             , counterexample "reset answers" (cleared === length [ () | ResetOp <- ops ])
             , counterexample "evolve answers" (if released then property (evolveAnswers <= tAsked tally)
                                                else evolveAnswers === tAsked tally) ]

    it "names children with the worker's number and never twice" $
      property $ \(ks :: [Small Int]) ->
        let counts = [ getSmall k `mod` 4 | k <- ks ]
            start = foldl' (\h s -> fst (heldMessage (StateAdd s (BC.pack "x")) Nothing h)) (newHeld 7 :: Held ()) [1 .. 50]
            withFn = fst (heldMessage (EvolveWith someRef) (Just (Right ())) start)
            go (h, acc) (s, n) =
              let (h1, _) = heldMessage (EvolveState s (BC.pack "in")) Nothing h
              in case heldTake h1 of
                   Just (Right _, h2) -> let (h3, out) = heldFinish (Children 1 (replicate n (BC.pack "c", BC.pack "o"))) h2
                                         in (h3, acc ++ concat [ map fst cs | StateEvolved _ _ cs <- out ])
                   _ -> (h1, acc)
            (_, ids) = foldl' go (withFn, []) (zip [1 .. 50] counts)
        in ids === nub ids .&&. all (\c -> c `shiftR` stateIdBits == 7) ids

  it "the epoll reader stops when cancelled while it is inside a link's handler" $
    withPair TcpTransport $ \(a, b) -> bracket (newEpollReader (1024 * 1024) (pure ())) snd $ \(reader, _) -> do
      -- the handler of the link's first packet takes long: the cancel lands in it
      readerAdd reader 1 b (\_ -> threadDelay 20000000 >> pure (Right ())) (\_ -> pure ())
      running <- async (readerRun reader)
      sendFrameStrict a (BC.pack "a packet")
      threadDelay 200000
      -- cancel waits for the thread to end: it must, within a few seconds
      ended <- timeout 3000000 (cancel running)
      ended `shouldBe` Just ()

  it "the epoll reader reads a link once when it is added, not every link" $
    -- bytes may wait in a new link's buffer, unseen by epoll: the reader
    -- must look at that link; looking at all of them made a start of
    -- thousands of workers quadratic
    bracket (listenTcp "127.0.0.1" 0) close $ \l -> do
      port <- listenPort l
      opened <- newIORef []
      bracket (newEpollReader (1024 * 1024) (pure ())) snd $ \(reader, _) ->
        withAsync (readerRun reader) $ \_ -> flip finally (readIORef opened >>= mapM_ closeConnection) $ do
          let links = 40
          waited <- forM [1 .. links] $ \k -> do
            (a, b) <- concurrently (connectTcp "127.0.0.1" port) (acceptTcp l)
            modifyIORef' opened ([a, b] ++)
            before <- readerVisits reader
            readerAdd reader k b (\_ -> pure (Right ())) (\_ -> pure ())
            -- one add at a time, each seen by the reader before the next
            timeout 5000000 (untilM ((> before) <$> readerVisits reader))
          waited `shouldBe` replicate links (Just ())
          visits <- readerVisits reader
          visits `shouldSatisfy` (<= 2 * links)

  it "joins a cluster beside real workers and gives the one-core results" $ do
    let tweak c = c { configSimulatedWorkers = 3, configSimulatedHosts = 2 }
    withTestClusterConfig 2 tweak $ \_ cluster -> do
      infos <- clusterWorkerInfo cluster
      length infos `shouldBe` 5
      length [ () | i <- infos, infoGroup i == "simulated" ] `shouldBe` 3
      -- three simulated workers, one link each, in two processes
      length (nub [ infoPid i | i <- infos, infoGroup i == "simulated" ]) `shouldBe` 2
      farm cluster squareTask [1 .. 500] `shouldReturn` map (\x -> x * x) [1 .. 500]
      let setup = defaultSetup { setupParticles = 200, setupSteps = 3, setupWork = 2000 }
      ids <- resetStates cluster particleStep (initialParticles setup)
      run <- runFilter setup (evolveMany cluster particleStep) ids
      run `shouldBe` runSequential setup

  it "two levels: each simulated host's agent schedules its workers, and the filter gives the one-core results" $ do
    let tweak c = c { configSimulatedWorkers = 6, configSimulatedHosts = 2, configHostScheduling = True }
        setup = defaultSetup { setupParticles = 300, setupSteps = 4, setupWork = 500 }
    withTestClusterConfig 0 tweak $ \_ cluster -> do
      ids <- resetStates cluster particleStep (initialParticles setup)
      stats <- newIORef []
      let evolveAll inputs = do
            (out, s) <- evolveManyWith defaultEvolveOptions cluster particleStep inputs
            modifyIORef' stats (s :)
            pure out
      run <- runFilter setup evolveAll ids
      run `shouldBe` runSequential setup
      calls <- readIORef stats
      -- every call's states were evolved by the hosts' workers, all six taking part
      map esEvolved calls `shouldBe` reverse (runEvolved run)
      maximum (map esWorkers calls) `shouldBe` 6
      -- one message per host and call (two more when a host gives states
      -- to the other before it), none per state
      map esHostMessages calls `shouldSatisfy` all (\m -> m >= 2 && m <= 4)
      -- Refs run beside the hosted population, their calls the master's own
      held <- putRefs cluster [1 .. 40 :: Int]
      squares <- mapRefs cluster refSquare held
      fetchMany cluster squares `shouldReturn` map (\x -> x * x) [1 .. 40]
      queryRefs cluster refPlus [ (r, 7) | r <- held ] `shouldReturn` map (+ 7) [1 .. 40]
      run' <- runFilter setup evolveAll =<< resetStates cluster particleStep (initialParticles setup)
      run' `shouldBe` runSequential setup
      -- the population is the hosts': states unknown to it are refused
      evolveMany cluster particleStep (M.fromList [ (i, FilterInput 1 0 0 0 0) | i <- take 1 ids ])
        `shouldThrow` (\(e :: HerdError) -> case e of { UnknownStates _ -> True; _ -> False })

  it "two levels: a call whose caller gives up is given up by the hosts, and the next calls are exact" $ do
    let tweak c = c { configSimulatedWorkers = 4, configSimulatedHosts = 2, configHostScheduling = True }
        slow = defaultSetup { setupParticles = 40, setupSteps = 2, setupSimulate = 2 }
        setup = defaultSetup { setupParticles = 100, setupSteps = 3, setupWork = 200 }
    withTestClusterConfig 0 tweak $ \_ cluster -> do
      ids <- resetStates cluster particleStep (initialParticles slow)
      -- 40 particles of 2 s on 4 workers: interrupted long before the end
      timeout 300000 (runFilter slow (evolveMany cluster particleStep) ids) `shouldReturn` Nothing
      -- the interrupted call's states are forgotten at once
      evolveMany cluster particleStep (M.fromList [ (i, FilterInput 1 0 0 0 0) | i <- take 1 ids ])
        `shouldThrow` (\(e :: HerdError) -> case e of { UnknownStates _ -> True; _ -> False })
      ids' <- resetStates cluster particleStep (initialParticles setup)
      run <- runFilter setup (evolveMany cluster particleStep) ids'
      run `shouldBe` runSequential setup

  it "two levels: a simulated host killed mid-call is one loss; the other host remakes its states and the filter is exact" $ do
    let tweak c = c { configSimulatedWorkers = 6, configSimulatedHosts = 3, configHostScheduling = True }
        -- 60 particles of 50 ms on 6 workers: each call lasts half a second
        setup = defaultSetup { setupParticles = 60, setupSteps = 3, setupSimulate = 0.05 }
    withTestClusterConfig 0 tweak $ \_ cluster -> do
      infos <- clusterWorkerInfo cluster
      let victim = minimum [ infoPid i | i <- infos, infoGroup i == "simulated" ]
      ids <- resetStates cluster particleStep (initialParticles setup)
      stats <- newIORef []
      let evolveAll inputs = do
            (out, s) <- evolveManyWith defaultEvolveOptions cluster particleStep inputs
            modifyIORef' stats (s :)
            pure out
      run <- withAsync (threadDelay 250000 >> signalProcess sigKILL (fromIntegral victim)) $ \_ ->
        runFilter setup evolveAll ids
      run `shouldBe` runSequential setup
      calls <- readIORef stats
      -- the surviving hosts remade the lost one's states from the master's lineage
      sum (map esRecovered calls) `shouldSatisfy` (> 0)
      sum (map esRehomed calls) `shouldSatisfy` (> 0)
      length (nub [ infoPid i | i <- infos, infoGroup i == "simulated" ]) `shouldBe` 3
      after <- clusterWorkerInfo cluster
      length (nub [ infoPid i | i <- after, infoGroup i == "simulated" ]) `shouldBe` 2

  it "two levels: a host left holding every state gives some to the other before the next call, with exact answers" $ do
    let tweak c = c { configSimulatedWorkers = 6, configSimulatedHosts = 2, configHostScheduling = True }
        start = initialParticles defaultSetup { setupParticles = 36 }
        -- the states go round robin, three to a host (one per worker) in
        -- turn: those of one host get two children, the other's none
        copies i = if even ((i - 1) `div` 3) then 2 else 0
        input c = FilterInput c 0.5 1 0 10
    withTestClusterConfig 0 tweak $ \_ cluster -> do
      ids <- resetStates cluster particleStep start
      (out1, s1) <- evolveManyWith defaultEvolveOptions cluster particleStep
                      (M.fromList [ (sid, input (copies i)) | (i, sid) <- zip [1 :: Int ..] ids ])
      let expected1 = [ (sid, stepParticle p (input (copies i))) | (i, sid, p) <- zip3 [1 :: Int ..] ids start ]
          children = [ (c, child) | (sid, kids) <- expected1, ((c, _), (child, _)) <- zip (M.findWithDefault [] sid out1) kids ]
      M.map (map snd) out1 `shouldBe` M.fromList [ (sid, map snd kids) | (sid, kids) <- expected1 ]
      esHostMoved s1 `shouldBe` 0
      (out2, s2) <- evolveManyWith defaultEvolveOptions cluster particleStep (M.fromList [ (c, input 1) | (c, _) <- children ])
      M.map (map snd) out2 `shouldBe` M.fromList [ (c, map snd (stepParticle p (input 1))) | (c, p) <- children ]
      -- about half of the 36 children moved to the host that had none
      esHostMoved s2 `shouldSatisfy` (>= 12)
      esWorkers s2 `shouldBe` 6

  it "steals Par children between simulated workers, on their hosts first, and the tree is exact" $ do
    let tweak c = c { configSimulatedWorkers = 16, configSimulatedHosts = 2 }
    withTestClusterConfig 0 tweak $ \_ cluster -> do
      -- 2000 leaves of 2 ms on 16 workers: a quarter of a second
      farm cluster treeStealTask [(2000, 0.002, 4)] `shouldReturn` [2000]
      st <- clusterStatus cluster
      let stolen = sum (map (countStolen . rowSteals) (statusWorkers st))
      length [ () | r <- statusWorkers st, countRan (rowSteals r) > 0 ] `shouldSatisfy` (>= 8)
      sum (map (countRan . rowSteals) (statusWorkers st)) `shouldBe` stolen
      -- the hosts' brokers served most thieves: the master brokered the rest
      statusStealsBrokered st `shouldSatisfy` (< stolen `div` 2)

  it "the simulated host of a tree's first worker killed mid-tree: the tree is exact" $ do
    let tweak c = c { configSimulatedWorkers = 12, configSimulatedHosts = 3 }
    withTestClusterConfig 0 tweak $ \_ cluster -> do
      -- 3000 leaves of 2 ms on 12 workers: half a second; the kill comes
      -- once the worker running the farm's one task has been stolen from:
      -- the host loses that task, the children it holds and runs, and its
      -- other workers with what they stole
      let rootHost = do
            rows <- statusWorkers <$> clusterStatus cluster
            pure [ infoPid i | r <- rows, rowInFlight r > 0, countStolen (rowSteals r) > 0, Just i <- [rowInfo r] ]
          killRoot k = rootHost >>= \ps -> case ps of
            p : _ -> signalProcess sigKILL (fromIntegral p)
            [] | k > (250 :: Int) -> expectationFailure "no worker was stolen from"
               | otherwise -> threadDelay 20000 >> killRoot (k + 1)
      got <- withAsync (killRoot 0) $ \_ -> farm cluster treeStealTask [(3000, 0.002, 4)]
      got `shouldBe` [3000]
      after <- clusterWorkerInfo cluster
      length (nub [ infoPid i | i <- after, infoGroup i == "simulated" ]) `shouldBe` 2

  it "answers after the simulated time, and refuses stream processes" $ do
    let tweak c = c { configSimulatedWorkers = 2, configSimulatedHosts = 1 }
        setup = defaultSetup { setupParticles = 8, setupSteps = 2, setupSimulate = 0.05 }
    withTestClusterConfig 0 tweak $ \_ cluster -> do
      ids <- resetStates cluster particleStep (initialParticles setup)
      (secs, run) <- timedRun (runFilter setup (evolveMany cluster particleStep) ids)
      run `shouldBe` runSequential setup
      -- 8 particles a step on 2 workers, 50 ms each: at least 4 in turn, twice
      secs `shouldSatisfy` (>= 0.4)
      r <- timeout 10000000 (withStream cluster runningSumProcess [1 .. 10 :: Int] (evaluate . length))
      case r of
        Nothing -> expectationFailure "the stream on a simulated worker hung"
        Just _ -> expectationFailure "a simulated worker ran a stream process"
      `shouldThrow` (\(e :: HerdError) -> "simulated workers do not run stream processes" `isIn` displayException e)
  where
    seeded = foldl' (\h s -> fst (heldMessage (StateAdd s (BC.pack "x")) Nothing h))
                    (fst (heldMessage (EvolveWith someRef) (Just (Right ())) (newHeld 1))) [1 .. 6]
    isIn needle hay = needle `elem` [ take (length needle) (drop k hay) | k <- [0 .. length hay] ]
    timedRun act = do
      t0 <- monotonicSeconds
      r <- act
      t1 <- monotonicSeconds
      pure (t1 - t0, r)

-- A step of the holder's world: the master's messages, and the driver
-- starting and finishing jobs.
data HeldOp = EvolveOp Int | ReleaseOp Int | ResetOp | TakeOp | FinishOp Bool
  deriving (Show)

instance Arbitrary HeldOp where
  arbitrary = frequency
    [ (4, EvolveOp <$> choose (1, 6)), (1, ReleaseOp <$> choose (1, 6)), (1, pure ResetOp)
    , (3, pure TakeOp), (3, FinishOp <$> arbitrary) ]

-- What the steps so far were answered.
data Tally = Tally
  { tAsked     :: !Int   -- ^ evolutions asked for
  , tEvolved   :: !Int   -- ^ evolutions answered
  , tCleared   :: !Int   -- ^ resets answered
  , tReleaseOk :: !Bool  -- ^ every release answered once, at once
  }

noTally :: Tally
noTally = Tally 0 0 0 True

-- Apply one step to the machine, counting its answers.
applyOp :: (Held (), Tally) -> HeldOp -> (Held (), Tally)
applyOp (h, t) op = case op of
  EvolveOp s -> count (heldMessage (EvolveState (fromIntegral s) (BC.pack "in")) Nothing h) t { tAsked = tAsked t + 1 }
  ReleaseOp s ->
    let (h', a) = heldMessage (StateRelease (fromIntegral s)) Nothing h
        once = length [ () | x <- a, isReleaseAnswer x ] == 1
    in (h', t { tReleaseOk = tReleaseOk t && once })
  ResetOp -> count (heldMessage StatesReset Nothing h) t
  TakeOp -> case heldTake h of
    Just (Left a, h') -> (h', tallied [a] t)
    Just (Right _, h') -> (h', t)
    Nothing -> (h, t)
  FinishOp ok -> count (heldFinish (if ok then Children 5 [(BC.pack "s", BC.pack "o")] else Failed (T.pack "boom")) h) t
  where
    count (h', a) t' = (h', tallied a t')
    tallied a t' = t' { tEvolved = tEvolved t' + length [ () | x <- a, isEvolveAnswer x ]
                      , tCleared = tCleared t' + length [ () | StatesCleared <- a ] }

-- Run every job left to the end.
drain :: Held () -> (Held (), [FromWorker])
drain h = case heldTake h of
  Just (Left a, h') -> let (h'', more) = drain h' in (h'', a : more)
  Just (Right _, h') -> let (h'', a) = heldFinish (Children 1 []) h'
                            (h''', more) = drain h''
                        in (h''', a ++ more)
  Nothing -> case heldFinish (Children 1 []) h of
    (h', []) -> (h', [])
    (h', a) -> let (h'', more) = drain h' in (h'', a ++ more)

-- Answers to evolutions (a release's 'StateMissing' is counted as the
-- release's: these tests release only states that were added).
isEvolveAnswer :: FromWorker -> Bool
isEvolveAnswer a = case a of
  StateEvolved {} -> True
  EvolveThrew {} -> True
  StateMissing _ -> True
  _ -> False

isReleaseAnswer :: FromWorker -> Bool
isReleaseAnswer a = case a of
  StateReleased {} -> True
  StateKept _ -> True
  StateMissing _ -> True
  _ -> False


-- A function reference for the machine, which never looks inside it.
someRef :: TaskRef
someRef = TaskRef (Fingerprint 1 2) "step" (Fingerprint 3 4) (Fingerprint 5 6)

-- Poll until the condition holds.
untilM :: IO Bool -> IO ()
untilM cond = do
  ok <- cond
  unless ok (threadDelay 1000 >> untilM cond)
