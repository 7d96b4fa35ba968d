-- | The dashboard: the ledger's arithmetic (properties), the Prometheus
-- text's escaping, and the served page, JSON and metrics of a real
-- cluster during a farm, looked at over HTTP and in a real headless
-- browser (Debian's chromium, over the DevTools protocol).
module DashboardSpec (spec) where

import Control.Concurrent (threadDelay)
import Control.Concurrent.Async (withAsync, wait)
import Control.Exception (bracket, try)
import Control.Monad (forM_, unless)
import qualified Data.ByteString.Char8 as BC
import Data.Char (isAlphaNum)
import Data.List (foldl', isInfixOf, isPrefixOf)
import qualified Data.Map.Strict as M
import Browser
import ClusterSpec (eventually, withTestClusterConfig)
import Herd
import Herd.Config
import Herd.Monitor
import Herd.Settings (validateConfig)
import Herd.Core.Monitor.Ledger
import Herd.Master.Monitor.Render (escapeLabel)
import Herd.Testkit.Json
import qualified Network.Socket as N
import System.Posix.Signals (sigKILL, signalProcess)
import Test.Hspec
import Test.QuickCheck
import TestTasks (refSlowInc, refSquare, slowCountReducer, sleepySquareTask)
import DatasetTasks (numbersGen, slowTripled)
import Herd.Dataset (generateDataset, mapDataset)

-- One change to the ledger, as the core makes them.
data Op
  = Tick Double Bool     -- ^ this much later; the cluster has work from now or not
  | Join                 -- ^ the next worker joins
  | Lose Int             -- ^ the k-th known worker is lost
  | Credit Int Int Double  -- ^ the k-th known worker finished this many tasks in this many seconds
  deriving (Show)

instance Arbitrary Op where
  arbitrary = frequency
    [ (4, Tick <$> choose (0, 2) <*> arbitrary)
    , (2, pure Join)
    , (1, Lose <$> choose (0, 20))
    , (3, Credit <$> choose (0, 20) <*> choose (0, 50) <*> choose (0, 3)) ]

-- The model: per worker the working time it was present for, figured
-- step by step; the clock and whether the cluster works.
data Model = Model
  { mNow :: Double, mWorking :: Bool, mNext :: Int
  , mPresent :: M.Map Int Double, mLost :: M.Map Int (Double, Double) }

-- Run the ops through the ledger and the model, checking after each.
ledgerAgrees :: [Op] -> Property
ledgerAgrees ops = go ops (Model 0 False 1 M.empty M.empty) emptyLedger
  where
    go [] _ _ = property True
    go (op : rest) m l =
      let (m', l') = apply op m l
      in counterexample (show op) (check m' l') .&&. go rest m' l'
    apply op m l = case op of
      Tick dt w ->
        let t = mNow m + dt
            present = if mWorking m then M.map (+ dt) (mPresent m) else mPresent m
        in (m { mNow = t, mWorking = w, mPresent = present }, ledgerTick t w l)
      Join -> ( m { mNext = mNext m + 1, mPresent = M.insert (mNext m) 0 (mPresent m) }
              , ledgerJoin (mNow m) (mNext m) l )
      Lose k -> case pick k of
        Just w | Just p <- M.lookup w (mPresent m) ->
          let acc = lookup w (ledgerAccounts l)
              busy = maybe 0 accountBusy acc
          in ( m { mPresent = M.delete w (mPresent m), mLost = M.insert w (p, busy) (mLost m) }
             , ledgerLose (mNow m) w "gone" l )
        _ -> (m, l)
      Credit k n busy -> case pick k of
        Just w | M.member w (mPresent m) -> (m, ledgerCredit w n 1 0 busy l)
        _ -> (m, l)
      where pick k = if mNext m <= 1 then Nothing else Just (1 + k `mod` (mNext m - 1))
    check m l = conjoin
      [ counterexample ("worker " ++ show w) $ conjoin
          [ property (accountBusy a >= 0), property (waiting >= 0)
          , case (accountLeft a, M.lookup w (mPresent m), M.lookup w (mLost m)) of
              (Nothing, Just p, _) ->
                counterexample ("present " ++ show p ++ ", busy " ++ show (accountBusy a) ++ ", waiting " ++ show waiting)
                  (abs (accountBusy a + waiting - max p (accountBusy a)) < 1e-6)
              (Just _, _, Just (p, busy)) ->
                -- a lost worker's figures stop where they were
                counterexample ("lost at present " ++ show p ++ ", waiting " ++ show waiting)
                  (abs (waiting - max 0 (p - busy)) < 1e-6)
              _ -> counterexample "ledger and model disagree on who is there" False ]
      | (w, a) <- ledgerAccounts l, let waiting = accountWaiting (mNow m) l a ]
      .&&. length [ () | (_, a) <- ledgerAccounts l, Just _ <- [accountLeft a] ] <= keptLost
      .&&. ledgerWorkingSeconds (mNow m) l >= 0

-- Workers 1..n join, and those listed are lost in that order: the kept
-- lost accounts are the 'keptLost' lost ones with the largest numbers
-- (numbers grow with time), and no connected worker's account is gone.
keptAfterLosses :: Int -> [Int] -> Property
keptAfterLosses n lost =
  let joined = foldl' (\l w -> ledgerJoin 0 w l) emptyLedger [1 .. n]
      ledger = foldl' (\l (t, w) -> ledgerLose t w "gone" l) joined (zip [1 ..] lost)
      accounts = ledgerAccounts ledger
      keptLostIds = [ w | (w, a) <- accounts, Just _ <- [accountLeft a] ]
      connected = [ w | (w, a) <- accounts, Nothing <- [accountLeft a] ]
      newest = take keptLost (reverse (M.keys (M.fromList [ (w, ()) | w <- lost ])))
  in counterexample ("kept lost " ++ show keptLostIds) $
       keptLostIds === reverse newest
       .&&. connected === filter (`notElem` lost) [1 .. n]
       .&&. ledgerLostCount ledger === length lost

-- Undo 'escapeLabel'.
unescape :: String -> String
unescape s = case s of
  '\\' : 'n' : r -> '\n' : unescape r
  '\\' : c : r -> c : unescape r
  c : r -> c : unescape r
  [] -> []

-- A Prometheus text exposition, checked line by line: every sample is
-- @name{k="v",...} number@, and its family's HELP and TYPE came first.
-- The samples, by name and labels.
parseMetrics :: String -> Either String [(String, String, Double)]
parseMetrics text = fmap reverse (snd <$> foldl' line (Right ([], [])) (lines text))
  where
    line acc l = do
      (typed, out) <- acc
      case words l of
        "#" : "HELP" : name : _ -> Right (name : typed, out)
        "#" : "TYPE" : name : kind : _
          | kind `elem` ["counter", "gauge"], name `elem` typed -> Right (typed, out)
          | otherwise -> Left ("TYPE before HELP or unknown type: " ++ l)
        _ -> do
          let (name, rest) = span (\c -> isAlphaNum c || c == '_') l
              (labels, value) = case rest of
                '{' : r -> let (ls, r') = break (== '}') r in (ls, drop 1 r')
                _ -> ("", rest)
          unless (name `elem` typed) $ Left ("sample before its HELP and TYPE: " ++ l)
          unless (all labelOk (splitLabels labels)) $ Left ("bad labels: " ++ l)
          case reads value of
            [(v, "")] -> Right (typed, (name, labels, v) : out)
            _ -> Left ("bad value: " ++ l)
    splitLabels "" = []
    splitLabels s = let (a, b) = break (== ',') s in a : splitLabels (drop 1 b)
    labelOk kv = case break (== '=') kv of
      (k, '=' : '"' : v) -> not (null k) && all (\c -> isAlphaNum c || c == '_') k && not (null v) && last v == '"'
      _ -> False

metricValue :: String -> [(String, String, Double)] -> Maybe Double
metricValue name ms = case [ v | (n, "", v) <- ms, n == name ] of
  v : _ -> Just v
  [] -> Nothing

-- Whether the condition holds within this many seconds (checked every 50 ms).
waitUntil :: Double -> IO Bool -> IO Bool
waitUntil secs cond = go (ceiling (secs * 20) :: Int)
  where go k = do ok <- cond
                  if ok || k <= 0 then pure ok else threadDelay 50000 >> go (k - 1)

-- A cluster of two local workers with its dashboard on a free loopback port.
withDashboardCluster :: ((String, Int) -> Cluster -> IO a) -> IO a
withDashboardCluster body =
  withTestClusterConfig 2 (\c -> c { configDashboard = Just "127.0.0.1:0" }) $ \_ cluster -> do
    addr <- clusterDashboard cluster
    maybe (expectationFailure "no dashboard address" >> error "unreachable") (`body` cluster) addr

-- Tasks of about this many milliseconds each.
slowInputs :: Int -> Int -> [(Int, Int)]
slowInputs ms n = [ (ms, i) | i <- [1 .. n] ]

spec :: Spec
spec = describe "the dashboard" $ do
  it "keeps busy and waiting right: never negative, adding up to the working time each worker was there" $
    withMaxSuccess 500 $ forAll (listOf arbitrary) ledgerAgrees

  it "keeps the newest lost workers' accounts, as many as keptLost, and every connected one" $
    withMaxSuccess 50 $ forAll (choose (keptLost, 3 * keptLost)) $ \n ->
      forAll (shuffle [1 .. n]) $ \order -> forAll (choose (0, n)) $ \k ->
        keptAfterLosses n (take k order)

  it "escapes Prometheus label values so that they read back exactly" $
    property $ \s -> let e = escapeLabel s
                     in unescape e == s && '\n' `notElem` e && not (hasBareQuote e)

  it "refuses a malformed address, naming configDashboard" $ do
    forM_ ["nonsense", "127.0.0.1:", ":8787", "127.0.0.1:99999", "127.0.0.1:80a"] $ \a ->
      case validateConfig defaultConfig { configDashboard = Just a } of
        Left (ConfigError "configDashboard" _) -> pure ()
        other -> expectationFailure (a ++ ": " ++ show (fmap (const ()) other))

  it "fails to start, naming configDashboard, when its port is taken" $
    bracket (N.socket N.AF_INET N.Stream N.defaultProtocol) N.close $ \s -> do
      N.bind s (N.SockAddrInet 0 (N.tupleToHostAddress (127, 0, 0, 1)))
      N.listen s 1
      port <- N.socketPort s
      r <- try (withTestClusterConfig 1 (\c -> c { configDashboard = Just ("127.0.0.1:" ++ show port) })
                                        (\_ _ -> pure ()))
      case r of
        Left (ConfigError "configDashboard" why) -> why `shouldContain` show port
        other -> expectationFailure ("expected a ConfigError, got " ++ show (fmap (const ()) other))

  it "shows a keyed reduction, a Ref call and a dataset step as calls while they run, with their workers busy, in /api/status and /metrics" $
    withDashboardCluster $ \(host, port) cluster -> do
      let seen kind = eventually $ do
            st <- clusterStatus cluster
            let mine = [ c | c <- statusCalls st, callKind c == kind ]
                busy = [ r | r <- statusWorkers st, rowState r == Busy ]
            (_, metrics) <- httpGet host port "/metrics"
            pure (not (null mine) && all (not . null . callFunction) mine && not (null busy)
                  && ("herd_calls_running{kind=\"" ++ kind ++ "\"} 1") `isInfixOf` metrics)
      withAsync (reduceByKey cluster slowCountReducer [ (d, 20) | d <- [1 .. 150 :: Int] ]) $ \job -> do
        seen "reduce" `shouldReturn` True
        _ <- wait job
        pure ()
      squares <- farmRefs cluster refSquare [1 .. 200 :: Int]
      withAsync (mapRefs cluster refSlowInc squares) $ \job -> do
        seen "evolve" `shouldReturn` True
        incs <- wait job
        fetchMany cluster incs `shouldReturn` [ x * x + 1 | x <- [1 .. 200] ]
      nums <- generateDataset cluster numbersGen 300 8
      withAsync (mapDataset cluster slowTripled nums) $ \job -> do
        seen "dataset" `shouldReturn` True
        _ <- wait job
        pure ()
      statusCalls <$> clusterStatus cluster `shouldReturn` []

  it "serves /api/status and /metrics during a farm, with counters that rise, and refuses writes" $
    withDashboardCluster $ \(host, port) cluster ->
      withAsync (farm cluster sleepySquareTask (slowInputs 15 240)) $ \job -> do
        started <- eventually $ do
          (_, body) <- httpGet host port "/api/status"
          pure (either (const False) (\v -> maybe False (not . null . arr) (field "jobs" v)) (parseJson body))
        started `shouldBe` True
        (code, body) <- httpGet host port "/api/status"
        code `shouldBe` 200
        st <- either (\e -> expectationFailure e >> error "unreachable") pure (parseJson body)
        let workers = maybe [] arr (field "workers" st)
        length workers `shouldBe` 2
        forM_ workers $ \w -> do
          field "state" w `shouldSatisfy` (`elem` [Just (String "busy"), Just (String "idle")])
          field "transport" w `shouldSatisfy` maybe False (/= Null)
          field "busy_s" w `shouldSatisfy` isNumber
        (path ["jobs"] st >>= firstOf >>= field "tasks") `shouldBe` Just (Number 240)
        (_, m1) <- httpGet host port "/metrics"
        threadDelay 600000
        (_, m2) <- httpGet host port "/metrics"
        s1 <- either (\e -> expectationFailure e >> error "unreachable") pure (parseMetrics m1)
        s2 <- either (\e -> expectationFailure e >> error "unreachable") pure (parseMetrics m2)
        metricValue "herd_workers" s1 `shouldBe` Just 2
        let done1 = metricValue "herd_tasks_completed_total" s1
            done2 = metricValue "herd_tasks_completed_total" s2
        (done1, done2) `shouldSatisfy` \(a, b) -> maybe False id ((<) <$> a <*> b)
        length [ () | (n, l, _) <- s2, n == "herd_worker_busy_seconds_total", "worker=" `isPrefixOf` l ] `shouldBe` 2
        (405, _) <- httpRequest "POST" host port "/api/status"
        (404, _) <- httpGet host port "/nothing"
        _ <- wait job
        (_, after) <- httpGet host port "/metrics"
        fmap (metricValue "herd_tasks_completed_total") (parseMetrics after) `shouldBe` Right (Just 240)

  -- make check skips this group: it needs Debian's chromium
  describe "in a real browser" $ do
    it "shows every worker in a real browser, with numbers that change between two looks, and draws a non-blank page" $
      -- the farm outlasts the looks and is cancelled when the test leaves it
      withFarmOnPage 2000 $ \_ page _ -> do
            first <- evaluateJs page "document.querySelector('#workers tbody').innerText"
            threadDelay 1500000
            second <- evaluateJs page "document.querySelector('#workers tbody').innerText"
            first `shouldSatisfy` (/= second)
            forM_ [first, second] $ \t -> case t of
              String text -> do
                length (lines text) `shouldBe` 2
                text `shouldSatisfy` ("busy" `isInfixOf`)
              other -> expectationFailure ("the table's text: " ++ show other)
            png <- screenshot page
            case pngVariety png of
              Right (colours, share) -> do
                colours `shouldSatisfy` (>= 8)
                share `shouldSatisfy` (> 0.02)
              Left why -> expectationFailure why
            BC.writeFile "dist-newstyle/dashboard-test.png" png

    it "marks a killed worker lost on the page" $
      withFarmOnPage 300 $ \cluster page job -> do
            victim : _ <- clusterWorkerInfo cluster
            signalProcess sigKILL (fromIntegral (infoPid victim))
            marked <- waitUntil 10 $ do
              t <- evaluateJs page "Array.from(document.querySelectorAll('#workers tbody tr')).map(function (r) { return r.innerText; }).join('|')"
              pure $ case t of
                String text -> any (\r -> ("lost" `isInfixOf` r) && (show (infoId victim) `isPrefixOf` r)) (splitOn '|' text)
                _ -> False
            marked `shouldBe` True
            results <- wait job
            results `shouldBe` [ i * i | i <- [1 .. 300] ]
  where
    arr v = case v of { Array xs -> xs; _ -> [] }
    firstOf v = case v of { Array (x : _) -> Just x; _ -> Nothing }
    isNumber v = case v of { Just (Number _) -> True; _ -> False }
    hasBareQuote e = go e
      where go s = case s of
              '\\' : _ : r -> go r
              '"' : _ -> True
              _ : r -> go r
              [] -> False
    -- A farm of this many 15 ms tasks on a two-worker cluster whose page
    -- is open in the browser. The page shows both workers before the farm
    -- starts (so a slow browser start cannot miss it), and the job before
    -- the body runs.
    withFarmOnPage n body =
      withDashboardCluster $ \(host, port) cluster ->
        withBrowser ("http://" ++ host ++ ":" ++ show port ++ "/") $ \page -> do
          rowsOf page "#workers" 2 >>= (`shouldBe` True)
          withAsync (farm cluster sleepySquareTask (slowInputs 15 n)) $ \job -> do
            rowsOf page "#jobs" 1 >>= (`shouldBe` True)
            body cluster page job
    -- a table of the page has this many rows, within 20 s
    rowsOf page table n = waitUntil 20 $
      (== Number n) <$> evaluateJs page ("document.querySelectorAll('" ++ table ++ " tbody tr').length")
    splitOn c s = case break (== c) s of
      (a, _ : b) -> a : splitOn c b
      (a, []) -> [a]
