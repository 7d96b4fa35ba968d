-- | Properties of the master's pure core ("Herd.Core.Master"), driven by
-- simulated workers and callers with no socket: random interleavings of
-- worker messages, joins, losses, protocol-breaking peers, and concurrent
-- farm jobs, stream processes and evolve sessions. At every step no worker
-- is idle while a job has unassigned tasks; at the end every caller was
-- answered exactly once, every task of a finished job was accepted exactly
-- once with its own result, and every stream that finished returned its
-- input in order.
module CoreSpec (spec) where

import Control.Monad (foldM)
import qualified Data.ByteString as B
import qualified Data.ByteString.Char8 as BC
import Data.Word (Word64)
import Data.List (isPrefixOf)
import qualified Data.Map.Strict as M
import qualified Data.Set as S
import qualified Data.Text as T
import Data.Sequence (Seq, ViewL (..), (|>))
import qualified Data.Sequence as Seq
import Herd.Settings (Batching (..))
import Herd.Core.Error (HerdError (..))
import Herd.Core.Fault (LinkFault (..), StreamBreak)
import Herd.Core.Master
import Herd.Core.Master.Events
import Herd.Core.Session
import Herd.Core.Packet.Policy (Urgency (..))
import Herd.Core.Farm (WorkerId, liveWorkers, outstandingFor, pendingTasks, rangeIndices)
import Herd.Task (taskRef)
import Herd.Core.Base (TaskRef (..))
import Herd.Core.Wire (FromWorker (..), ToWorker (..))
import Test.Hspec
import Test.QuickCheck hiding (Args)
import TestTasks (squareTask)

-- What a simulated worker has been sent and not yet handled, and what it
-- has answered that the master has not yet read.
data WorkerModel = WorkerModel
  { wmInbox   :: Seq Item
  , wmOutbox  :: Seq FromWorker
  , wmStreams :: M.Map Word (Int, [B.ByteString], Bool)  -- credit, outputs waiting for credit, input ended
  }

data Item = Msg ToWorker | Batch Word Word [Int] | Input Word B.ByteString

data FarmModel = FarmModel
  { fmTasks    :: Int
  , fmPoison   :: Maybe Int              -- a task that throws
  , fmKiller   :: Maybe Int              -- a task that kills the worker running it
  , fmStaged   :: M.Map Int B.ByteString
  , fmAccepted :: M.Map Int Int        -- times each task was accepted
  , fmAnswers  :: [Either HerdError ()]
  , fmCancelled :: Bool
  }

data StreamModel = StreamModel
  { smInput    :: [B.ByteString]       -- not yet sent
  , smCredit   :: Int
  , smEnded    :: Bool                 -- input end sent
  , smOutput   :: [B.ByteString]       -- received, in order
  , smUnread   :: Int                  -- received, not yet reported consumed
  , smOpened   :: [Either HerdError WorkerId]
  , smEnds     :: [Maybe StreamBreak]
  , smSent     :: [B.ByteString]
  }

data World = World
  { wCore      :: Core
  , wTime      :: Double
  , wWorkers   :: M.Map WorkerId WorkerModel
  , wNextW     :: WorkerId
  , wNextId    :: Word
  , wFarms     :: M.Map Word FarmModel
  , wStreams   :: M.Map Word StreamModel
  , wSessions  :: M.Map Word64 [Either HerdError ()]  -- ^ each session's answers, by its number
  , wProblems  :: [String]
  , wKills     :: Int                     -- workers killed from outside
  , wTrace     :: [(Event, [Command])]    -- ^ the core's steps, newest first (printed when a property fails)
  , wHeld      :: S.Set WorkerId          -- ^ workers held near their memory limit
  }

-- | One happening, chosen by numbers.
data Action
  = Join | Kill Int | Handle Int | Deliver Int | Garbage Int
  | Submit Int (Maybe Int) (Maybe Int) Bool | Cancel Int
  | Open Int | Caller Int | Session (Maybe Int) | Wait | Hold Int Bool
  deriving (Show)

genAction :: Gen Action
genAction = frequency
  [ (2, pure Join), (1, Kill <$> arbitrary), (12, Handle <$> arbitrary), (12, Deliver <$> arbitrary)
  , (1, Garbage <$> arbitrary)
  , (3, Submit <$> choose (0, 25) <*> frequency [(4, pure Nothing), (1, Just <$> choose (0, 25))]
                <*> frequency [(5, pure Nothing), (1, Just <$> choose (0, 25))] <*> arbitrary)
  , (1, Cancel <$> arbitrary), (2, Open <$> choose (0, 12)), (6, Caller <$> arbitrary)
  , (1, Session <$> elements [Nothing, Just 1, Just 2]), (1, pure Wait)
  , (1, Hold <$> arbitrary <*> arbitrary) ]

ref :: TaskRef
ref = taskRef squareTask

resultOf :: Word -> Int -> B.ByteString
resultOf jid i = BC.pack (show (jid, i))

window :: Int
window = 3

-- Stream elements have one width, so a run's bytes split back into them.
elementBytes :: Int
elementBytes = 12

element :: String -> B.ByteString
element str = BC.pack (take elementBytes (str ++ repeat '.'))

elementsOf :: B.ByteString -> [B.ByteString]
elementsOf v
  | B.null v = []
  | otherwise = let (a, b) = B.splitAt elementBytes v in a : elementsOf b

pick :: Int -> [a] -> Maybe a
pick _ [] = Nothing
pick k xs = Just (xs !! (k `mod` length xs))

-- Step the core and carry out its commands on the models.
feed :: Event -> World -> IO World
feed ev w = do
  let t = wTime w + 0.001
      (core', cmds) = step t ev (wCore w)
  w1 <- foldM command w { wCore = core', wTime = t, wTrace = (ev, cmds) : wTrace w } cmds
  -- INV-BUSY, seen through the core: no live worker without work while a
  -- job has tasks no worker was given (a worker held near its memory
  -- limit may wait while another can work)
  let s = coreSched core'
      live = liveWorkers s
      free = [ x | x <- live, not (S.member x (wHeld w1)) ]
      feedable = if null free then live else free
      idle = [ x | x <- feedable, null (outstandingFor x s) ]
  pure $ if pendingTasks s > 0 && not (null idle)
           then w1 { wProblems = ("workers " ++ show idle ++ " idle with tasks pending") : wProblems w1 }
           else w1

command :: World -> Command -> IO World
command w cmd = case cmd of
  Send x _ msg -> pure (toWorker x (Msg msg))
  SendAll x msgs -> pure (foldl (\w' msg -> deliverTo x (Msg msg) w') w msgs)
  SendBatch x jid bid _ tasks -> pure (toWorker x (Batch (fromIntegral jid) (fromIntegral bid) (rangeIndices tasks)))
  Stage jid tasks bytes -> farmDo jid $ \f ->
    let is = rangeIndices tasks
    in if bytes /= B.concat (map (resultOf (fromIntegral jid)) is) then Left ("wrong results staged for tasks " ++ show is)
       else Right f { fmStaged = foldr (\i -> M.insert i (resultOf (fromIntegral jid) i)) (fmStaged f) is }
  Accept jid ranges -> farmDo jid $ \f ->
    let is = rangeIndices ranges
        unstaged = [ i | i <- is, not (M.member i (fmStaged f)) ]
    in if not (null unstaged) then Left ("accepted unstaged tasks " ++ show unstaged)
       else Right f { fmAccepted = M.unionWith (+) (fmAccepted f) (M.fromList [ (i, 1) | i <- is ]) }
  FailTask jid i _ -> problem ("job " ++ show jid ++ ", which stops at its first failure, reported task " ++ show i ++ " alone")
  JobDone jid r -> farmDo jid $ \f -> Right f { fmAnswers = (() <$ r) : fmAnswers f }
  StreamOpened sid r -> streamDo sid $ \m -> m { smOpened = r : smOpened m }
  StreamOutput sid k v
    | B.length v /= k * elementBytes -> problem ("a run of " ++ show k ++ " elements in " ++ show (B.length v) ++ " bytes")
    | otherwise -> streamDo sid $ \m -> m { smOutput = smOutput m ++ elementsOf v, smUnread = smUnread m + k }
  StreamGrant sid n -> streamDo sid $ \m -> m { smCredit = smCredit m + n }
  StreamEnded sid why -> streamDo sid $ \m -> m { smEnds = why : smEnds m }
  SessionEnded sid r
    | M.member sid (wSessions w) -> pure w { wSessions = M.adjust ((() <$ r) :) sid (wSessions w) }
    | otherwise -> problem ("an answer to unknown session " ++ show sid)
  Drop x _ -> pure w { wWorkers = M.delete x (wWorkers w) }
  Note _ -> pure w
  ShareTo x n _ -> problem ("worker " ++ show x ++ " was sent shared value " ++ show n ++ ", which nobody shared")
  Unshared n -> problem ("shared value " ++ show n ++ " was unshared, which nobody shared")
  ExchangeEnded x _ -> problem ("keyed reduction " ++ show x ++ " ended, which nobody started")
  where
    toWorker x item = deliverTo x item w
    problem p = pure w { wProblems = p : wProblems w }
    farmDo jid change = case M.lookup (fromIntegral jid) (wFarms w) of
      Nothing -> problem ("a command for unknown job " ++ show jid)
      Just f -> either problem (\f' -> pure w { wFarms = M.insert (fromIntegral jid) f' (wFarms w) }) (change f)
    streamDo sid f = pure w { wStreams = M.adjust f (fromIntegral sid) (wStreams w) }

-- Put an item in a worker's inbox (if it is still there).
deliverTo :: WorkerId -> Item -> World -> World
deliverTo x item w = w { wWorkers = M.adjust (\m -> m { wmInbox = wmInbox m |> item }) x (wWorkers w) }

pairs :: [a] -> [[a]]
pairs xs = case xs of
  a : b : rest -> [a, b] : pairs rest
  [a] -> [[a]]
  [] -> []

-- A worker handles the oldest thing it was sent.
handle :: WorkerId -> WorkerModel -> World -> WorkerModel
handle _ m w = case Seq.viewl (wmInbox m) of
  EmptyL -> m
  item :< rest -> let m1 = m { wmInbox = rest } in case item of
    Batch jid bid tasks ->
      let poison = M.lookup jid (wFarms w) >>= fmPoison
          (good, bad) = break ((== poison) . Just) tasks
          -- results go in runs of one or two, as a worker's packets split them
          answers = [ Results (fromIntegral (length run)) (B.concat (map (resultOf jid) run)) | run <- pairs good ]
                    ++ [ if null bad then BatchDone (fromIntegral bid) 1000
                         else TaskThrew (fromIntegral bid) (fromIntegral (length good)) (T.pack "boom") ]
      in say m1 answers
    Msg (StreamOpen sid _) -> m1 { wmStreams = M.insert (fromIntegral sid) (window, [], False) (wmStreams m1) }
    Input sid v -> case M.lookup sid (wmStreams m1) of
      Just (credit, waiting, ended) -> release sid (credit, waiting ++ [v], ended) (say m1 [StreamTaken (fromIntegral sid) 1])
      Nothing -> m1
    Msg (StreamEnd sid) -> case M.lookup (fromIntegral sid) (wmStreams m1) of
      Just (credit, waiting, _) -> release (fromIntegral sid) (credit, waiting, True) m1
      Nothing -> m1
    Msg (StreamCredit sid k) -> case M.lookup (fromIntegral sid) (wmStreams m1) of
      Just (credit, waiting, ended) -> release (fromIntegral sid) (credit + fromIntegral k, waiting, ended) m1
      Nothing -> m1
    Msg (StreamClose sid) -> m1 { wmStreams = M.delete (fromIntegral sid) (wmStreams m1) }
    Msg StatesReset -> say m1 [StatesCleared]
    Msg _ -> m1
  where
    say x replies = x { wmOutbox = foldl (|>) (wmOutbox x) replies }
    -- send the outputs the credit allows; end the stream when its input
    -- ended and nothing waits
    release sid (credit, waiting, ended) x =
      let (now, later) = splitAt credit waiting
          -- output goes in runs of one or two, as a worker's packets cut them
          x1 = say x [ StreamOut (fromIntegral sid) (fromIntegral (length run)) (B.concat run) | run <- pairs now ]
          left = (credit - length now, later, ended)
      in if ended && null later
           then (say x1 [StreamDone (fromIntegral sid)]) { wmStreams = M.delete sid (wmStreams x1) }
           else x1 { wmStreams = M.insert sid left (wmStreams x1) }

act :: World -> Action -> IO World
act w a = case a of
  -- a second passes: batches that ran long are copied to idle workers
  Wait -> feed Tick w { wTime = wTime w + 1 }
  Hold k held -> onWorker k $ \x _ ->
    feed (WorkerHeld x held) w { wHeld = (if held then S.insert else S.delete) x (wHeld w) }
  Join -> feed (LinkUp (wNextW w)) w { wNextW = wNextW w + 1
                                     , wWorkers = M.insert (wNextW w) (WorkerModel Seq.empty Seq.empty M.empty) (wWorkers w) }
  Kill k -> onWorker k $ \x _ -> feed (LinkDown x (PeerLost "killed")) w { wWorkers = M.delete x (wWorkers w), wKills = wKills w + 1
                                                                         , wHeld = S.delete x (wHeld w) }
  Handle k -> onWorker k $ \x m -> case Seq.viewl (wmInbox m) of
    -- a batch that reaches its killer kills the worker: what it had not
    -- sent yet (all of its outbox, at worst) is lost with it
    Batch jid _ tasks :< _
      | Just f <- M.lookup jid (wFarms w), Just k' <- fmKiller f
      , k' `elem` takeWhile ((/= fmPoison f) . Just) tasks ->
          feed (LinkDown x (PeerLost "killed by its task")) w { wWorkers = M.delete x (wWorkers w), wHeld = S.delete x (wHeld w) }
    _ -> pure w { wWorkers = M.insert x (handle x m w) (wWorkers w) }
  Deliver k -> onWorker k $ \x m -> case Seq.viewl (wmOutbox m) of
    EmptyL -> pure w
    msg :< rest -> feed (Received x msg) w { wWorkers = M.insert x m { wmOutbox = rest } (wWorkers w) }
  Garbage k -> onWorker k $ \x _ -> feed (Received x (BatchDone 999999 0)) w
  Submit n poison killer fixed -> do
    let jid = wNextId w
        job = FarmJob ref n (if fixed then FixedBatch 3 else Adaptive) 0.02 3 1000000 False True
    feed (FarmSubmit (fromIntegral jid) job)
         w { wNextId = jid + 1, wFarms = M.insert jid (FarmModel n poison killer M.empty M.empty [] False) (wFarms w) }
  Cancel k -> case pick k [ j | (j, f) <- M.toList (wFarms w), null (fmAnswers f), not (fmCancelled f) ] of
    Nothing -> pure w
    Just j -> feed (FarmCancel (fromIntegral j)) w { wFarms = M.adjust (\f -> f { fmCancelled = True }) j (wFarms w) }
  Open n -> do
    let sid = wNextId w
        input = [ element (show (sid, i)) | i <- [1 .. n] ]
    feed (OpenStream (fromIntegral sid) ref window)
         w { wNextId = sid + 1, wStreams = M.insert sid (StreamModel input window False [] 0 [] [] []) (wStreams w) }
  Caller k -> case pick k [ (s, m) | (s, m) <- M.toList (wStreams w), null (smEnds m), Right _ <- take 1 (smOpened m) ] of
    Nothing -> pure w
    Just (sid, m)
      | smUnread m > 0 -> feed (ConsumedStream (fromIntegral sid) (smUnread m)) (setStream sid m { smUnread = 0 })
      | (x : rest) <- smInput m, smCredit m > 0, Right worker : _ <- smOpened m ->
          -- the caller's feeder writes input straight to the stream's worker
          pure $ deliverTo worker (Input (fromIntegral sid) x)
            w { wStreams = M.insert sid m { smInput = rest, smCredit = smCredit m - 1, smSent = smSent m ++ [x] } (wStreams w) }
      | null (smInput m), not (smEnded m) -> feed (EndStreamInput (fromIntegral sid)) (setStream sid m { smEnded = True })
      | otherwise -> pure w
  Session limit -> do
    let start ws = if null ws then Left NoWorkers
                   else Right (resetMachine, M.fromList [ (x, ()) | x <- ws ], [ SendTo x StatesReset | x <- ws ])
        sid = fromIntegral (wNextId w)
    feed (SessionStart sid (SessionRequest "reset" limit Nothing start))
         w { wSessions = M.insert sid [] (wSessions w), wNextId = wNextId w + 1 }
  where
    onWorker k f = case pick k (M.toList (wWorkers w)) of
      Nothing -> pure w
      Just (x, m) -> f x m
    setStream sid m = w { wStreams = M.insert sid m (wStreams w) }
    resetMachine = Machine
      { machineMessage = \_ x msg pending -> case msg of { StatesCleared -> (M.delete x pending, []); _ -> (pending, []) }
      , machineLost = \_ x _ pending -> (M.delete x pending, [])
      , machineJoined = \_ _ st -> (st, []), machineStarved = \st -> (st, [])
      , machineDone = M.null, machineView = const Nothing, machineClaims = claimsNothing }

-- Let everything in flight run to its end: workers handle and answer all
-- they were sent, callers feed and read their streams.
settle :: Int -> World -> IO World
settle 0 w = pure w { wProblems = "the world did not settle" : wProblems w }
settle k w = do
  let ws = M.toList (wWorkers w)
      busy = [ i | (i, (_, m)) <- zip [0 ..] ws, not (Seq.null (wmInbox m)) ]
      talking = [ i | (i, (_, m)) <- zip [0 ..] ws, not (Seq.null (wmOutbox m)) ]
      callers = [ i | (i, (_, m)) <- zip [0 ..] (M.toList (wStreams w)), null (smEnds m)
                    , Right _ <- take 1 (smOpened m)
                    , smUnread m > 0 || (not (null (smInput m)) && smCredit m > 0) || (null (smInput m) && not (smEnded m)) ]
  case (talking, busy, callers) of
    (i : _, _, _) -> act w (Deliver i) >>= settle (k - 1)
    (_, i : _, _) -> act w (Handle i) >>= settle (k - 1)
    (_, _, i : _) -> act w (Caller i) >>= settle (k - 1)
    _ -> pure w

-- Everything a settled world must show.
verdict :: World -> IO [String]
verdict w = do
  let sessions = M.elems (wSessions w)
  let farms = concat
        [ [ "job " ++ show j ++ " answered " ++ show (length (fmAnswers f)) ++ " times"
          | not (fmCancelled f), length (fmAnswers f) /= 1 ]
          ++ [ "job " ++ show j ++ " answered after its caller cancelled it" | fmCancelled f, not (null (fmAnswers f)) ]
          ++ [ "job " ++ show j ++ " finished without task " ++ show i ++ " accepted once"
             | [Right ()] <- [fmAnswers f], i <- [0 .. fmTasks f - 1], M.lookup i (fmAccepted f) /= Just 1 ]
          ++ [ "job " ++ show j ++ " finished though task " ++ show p ++ " throws"
             | [Right ()] <- [fmAnswers f], Just p <- [fmPoison f], p < fmTasks f ]
          ++ [ "job " ++ show j ++ " finished though task " ++ show k ++ " kills its workers"
             | [Right ()] <- [fmAnswers f], Just k <- [fmKiller f], k < fmTasks f
             , maybe True (> k) (fmPoison f) ]
          ++ [ "job " ++ show j ++ " failed with " ++ show e
             | [Left e] <- [fmAnswers f], not (expectedFailure f e) ]
        | (j, f) <- M.toList (wFarms w) ]
      streams = concat
        [ [ "stream " ++ show s ++ " opened " ++ show (length (smOpened m)) ++ " times" | length (smOpened m) /= 1 ]
          ++ [ "stream " ++ show s ++ " ended " ++ show (length (smEnds m)) ++ " times"
             | Right _ <- take 1 (smOpened m), length (smEnds m) /= 1 ]
          ++ [ "stream " ++ show s ++ " finished with " ++ show (smOutput m) ++ " for " ++ show (smSent m)
             | [Nothing] <- [smEnds m], smOutput m /= smSent m ]
          ++ [ "stream " ++ show s ++ " sent more than it was sent" | not (smOutput m `isPrefixOf'` smSent m) ]
        | (s, m) <- M.toList (wStreams w) ]
      answered = [ "a session was answered " ++ show (length a) ++ " times" | a <- sessions, length a /= 1 ]
  pure (reverse (wProblems w) ++ farms ++ streams ++ answered)
  where
    expectedFailure f e = case e of
      TaskFailed i _ _ -> Just i == fmPoison f
      AllWorkersLost _ -> True
      -- deaths from outside are charged to whatever may have been running:
      -- two of them can make an innocent task look guilty
      TaskKilledWorkers i _ d _ -> d == 3 && (Just i == fmKiller f || wKills w >= 2)
      _ -> False
    isPrefixOf' = isPrefixOf

runWorld :: [Action] -> IO (World, [String])
runWorld actions = do
  let w0 = World emptyCore 0 M.empty 1 1 M.empty M.empty M.empty [] 0 [] S.empty
  w1 <- foldM act w0 (Join : Join : actions)
  w2 <- settle 100000 w1
  problems <- verdict w2
  pure (w2, problems)

-- The core's last steps, oldest first: what it was told and what it did.
traceTail :: World -> String
traceTail w = unlines $ ("the core's last " ++ show (length steps) ++ " steps:")
  : concat [ ("  " ++ show ev) : [ "    -> " ++ show c | c <- cmds ] | (ev, cmds) <- reverse steps ]
  where steps = take 40 (wTrace w)

-- A session that ignores everything and never ends by itself.
inertMachine :: Machine ()
inertMachine = Machine { machineMessage = \_ _ _ st -> (st, []), machineLost = \_ _ _ st -> (st, [])
                       , machineJoined = \_ _ st -> (st, []), machineStarved = \st -> (st, [])
                       , machineDone = const False, machineView = const Nothing, machineClaims = claimsNothing }

-- A session that keeps the messages it is given and is done at the first;
-- beside others, it claims the answers about this state.
recordMachine :: Word64 -> Machine [FromWorker]
recordMachine s = Machine { machineMessage = \_ _ m ms -> (ms ++ [m], []), machineLost = \_ _ _ st -> (st, [])
                        , machineJoined = \_ _ st -> (st, []), machineStarved = \st -> (st, [])
                        , machineDone = not . null, machineView = const Nothing
                        , machineClaims = \_ msg _ -> answerState msg == Just s }

spec :: Spec
spec = describe "Herd.Core.Master" $ do
  it "answers every caller once, accepts every task once, and streams return their input, under random interleavings" $
    withMaxSuccess 300 $ forAll (resize 120 (listOf genAction)) $ \actions -> ioProperty $ do
      (w, problems) <- runWorld actions
      let kinds = [ "farm" | not (M.null (wFarms w)) ] ++ [ "stream" | not (M.null (wStreams w)) ]
                  ++ [ "session" | not (null (wSessions w)) ]
          killed = or [ True | Kill _ <- actions ]
          poisoned = or [ True | f <- M.elems (wFarms w), [Left (TaskKilledWorkers {})] <- [fmAnswers f] ]
      pure $ classify killed "a worker was killed"
           $ classify poisoned "a task that killed its workers was named"
           $ classify (length kinds == 3) "all three kinds at once"
           $ counterexample (unlines problems ++ traceTail w) (null problems)

  it "shares the workers between two farm jobs in turn" $ do
    let job = FarmJob ref 40 (FixedBatch 1) 0.02 3 1000000 False True
        (c1, _) = step 0 (LinkUp 1) emptyCore
        (c2, _) = step 0 (LinkUp 2) c1
        (c3, out1) = step 0 (FarmSubmit 1 job) c2
        (_, out2) = step 0 (FarmSubmit 2 job) c3
        sent cmds = [ jid | SendBatch _ jid _ _ _ <- cmds ]
    -- the first job fills both workers (with prefetch); the second gets the next batches
    sent out1 `shouldBe` [1, 1, 1, 1]
    sent out2 `shouldBe` []
    -- as batches complete, the workers alternate between the jobs
    let finishFirst c w bid = step 0 (Received w (BatchDone bid 1000)) (fst (step 0 (Received w (Results 1 (resultOf 1 0))) c))
        (c4, out3) = finishFirst c3 1 1
        (c5, _) = step 0 (FarmSubmit 2 job) c3
        (_, out4) = finishFirst c5 1 1
    sent out3 `shouldBe` [1]
    -- the new job goes first: it has had no worker yet
    sent out4 `shouldBe` [2]
    length (coreFarmJobs c4) `shouldBe` 1
    length (coreFarmJobs c5) `shouldBe` 2

  it "drops a worker that answers a batch it was not sent, and runs its tasks elsewhere" $ do
    (w, problems) <- runWorld [Submit 10 Nothing Nothing False, Garbage 0]
    problems `shouldBe` []
    M.size (wWorkers w) `shouldBe` 1
    case M.elems (wFarms w) of
      [f] -> fmAnswers f `shouldBe` [Right ()]
      _ -> expectationFailure "one job expected"

  it "names a task that kills every worker running it after three deaths, while new workers keep joining" $ do
    (w, problems) <- runWorld ([Submit 40 Nothing (Just 17) False] ++ concat (replicate 60 [Handle 0, Deliver 0, Handle 1, Deliver 1, Join]))
    problems `shouldBe` []
    map fmAnswers (M.elems (wFarms w)) `shouldSatisfy` \answers -> case answers of
      [[Left (TaskKilledWorkers 17 _ 3 _)]] -> True
      _ -> False

  it "forgets a session whose caller gave up; a cancel of another number does nothing; sessions run side by side" $ do
    let start ws = Right (inertMachine, (), [ SendTo x StatesReset | x <- ws ])
        req = SessionRequest "inert" Nothing Nothing start
        answered out = [ (sid, r) | SessionEnded sid r <- out ]
        (c1, _) = step 0 (LinkUp 1) emptyCore
        (c2, _) = step 0 (SessionStart 7 req) c1
        (c3, _) = step 0 (SessionCancel 8) c2       -- not the running one
        (_, beside) = step 0 (SessionStart 9 req) c3
        (c5, _) = step 0 (SessionCancel 7) c3
        (_, started) = step 0 (SessionStart 10 req) c5
    -- session 9 starts beside 7, which still runs
    answered beside `shouldBe` []
    beside `shouldBe` [Send 1 Urgent StatesReset]
    answered started `shouldBe` []   -- started: no answer yet
    started `shouldBe` [Send 1 Urgent StatesReset]
    -- the same number twice is refused
    answered (snd (step 0 (SessionStart 7 req) c2)) `shouldSatisfy` (\a -> map fst a == [7] && all (either (const True) (const False) . snd) a)

  it "routes each worker's answer to the session that asked, and names each session's function before its states" $ do
    let other = ref { refName = "other" }
        asker f s = SessionRequest "ask" Nothing (Just f) (\ws -> Right (recordMachine s, [], [ SendTo w (EvolveState s B.empty) | w <- ws ]))
        ended out = [ (sid, fmap (fmap endState . outcomeEnd) r) | SessionEnded sid r <- out ]
        (c1, _) = step 0 (LinkUp 1) emptyCore
        (c2, openA) = step 0 (SessionStart 7 (asker ref 100)) c1
        (c3, openB) = step 0 (SessionStart 9 (asker other 200)) c2
        (c4, endB) = step 0 (Received 1 (StateEvolved 200 5 [])) c3
        (c5, endA) = step 0 (Received 1 (StateEvolved 100 5 [])) c4
        (_, againA) = step 0 (SessionStart 11 (asker ref 300)) c5
    openA `shouldBe` [SendAll 1 [EvolveWith ref, EvolveState 100 B.empty]]
    openB `shouldBe` [SendAll 1 [EvolveWith other, EvolveState 200 B.empty]]
    ended endB `shouldBe` [(9, Right (Just [StateEvolved 200 5 []]))]
    ended endA `shouldBe` [(7, Right (Just [StateEvolved 100 5 []]))]
    -- the worker was told "other" last: a call of "square" names it again
    againA `shouldBe` [SendAll 1 [EvolveWith ref, EvolveState 300 B.empty]]

  it "gives each worker's StatesCleared to the oldest session that asked it to reset" $ do
    let resets = SessionRequest "reset" Nothing Nothing (\ws -> Right (recordMachine 0, [], [ SendTo w StatesReset | w <- ws ]))
        ended out = [ sid | SessionEnded sid _ <- out ]
        (c1, _) = step 0 (LinkUp 1) emptyCore
        (c2, _) = step 0 (SessionStart 7 resets) c1
        (c3, _) = step 0 (SessionStart 9 resets) c2
        (c4, first) = step 0 (Received 1 StatesCleared) c3
        (_, second) = step 0 (Received 1 StatesCleared) c4
    ended first `shouldBe` [7]
    ended second `shouldBe` [9]

  it "gathers a session's messages per worker: each live worker once, in the workers' order, its messages in the order given" $
    forAll (listOf ((,) <$> choose (1, 6 :: Int) <*> arbitrary)) $ \sends -> forAll (sublistOf [1 .. 6]) $ \linked ->
      let req = SessionRequest "inert" Nothing Nothing (\_ -> Right (inertMachine, (), []))
          -- workers 1-5 are the session's; 6 is not; only the linked ones count
          outs = [ SendTo (fromIntegral w) (Ping n B.empty) | (w, n) <- sends ]
          expected = [ (fromIntegral w, [ Ping n B.empty | (v, n) <- sends, v == w ])
                     | w <- [1 .. 5], w `elem` linked, any ((== w) . fst) sends ]
      in case hostStart [1 .. 5] req of
           Left _ -> counterexample "the session did not start" False
           Right (hosted, _) ->
             let (_, perWorker, drops) = hostApply ((`elem` linked) . fromIntegral) outs hosted
             in perWorker === expected .&&. null drops
