{-# LANGUAGE ScopedTypeVariables #-}
-- | Shared values: the core's bookkeeping ("Herd.Core.Shared") against a
-- model of workers under random shares, unshares, joins and losses, and a
-- real cluster whose farm reads a shared table: sent once per worker,
-- resent to a restarted worker, dropped everywhere by 'unshare'.
module SharedSpec (spec) where

import Control.Concurrent (threadDelay)
import Data.List (foldl', isInfixOf)
import qualified Data.ByteString as B
import qualified Data.ByteString.Char8 as BC
import qualified Data.Map.Strict as M
import qualified Data.Set as S
import Data.Word (Word64)
import Herd
import Herd.Config
import Herd.Monitor
import Herd.Core.Shared
import Herd.Core.Wire (FromWorker (..), ToWorker (..))
import System.Directory (doesDirectoryExist, doesFileExist, getTemporaryDirectory, listDirectory)
import System.Posix.Process (getProcessID)
import Herd.Node.Store (dropShared, newAssembly, receivePiece)
import System.FilePath ((</>))
import System.Posix.Signals (sigKILL, signalProcess)
import System.Process (terminateProcess)
import Test.Hspec
import Test.QuickCheck
import HandAgent (withHandAgent)
import TestTasks (sharedIndexTask)

-- What the model's master can be told.
data Op = Add | Remove Int | Join Int | Lose Int | Deliver Int
  deriving Show

instance Arbitrary Op where
  arbitrary = frequency
    [ (2, pure Add), (1, Remove <$> choose (0, 5)), (2, Join <$> choose (1, 4))
    , (1, Lose <$> choose (1, 4)), (5, Deliver <$> choose (1, 4)) ]

-- A worker of the model: its inbox from the master, what it holds, and
-- how many times each value's first piece reached this incarnation.
data W = W { wInbox :: [ToWorker], wHolds :: M.Map Word64 B.ByteString, wFirsts :: M.Map Word64 Int }

-- Numbers are never reused, as the cluster's are not.
data Model = Model { mShares :: Shares, mWorkers :: M.Map Int W, mLive :: M.Map Word64 B.ByteString, mNext :: Word64 }

valueOf :: Word64 -> B.ByteString
valueOf n = BC.pack (replicate (fromIntegral n) 'v')

run :: Model -> Op -> Model
run m op = case op of
  Add ->
    let n = mNext m
        (sh, sends) = shareAdd n (valueOf n) (M.keys (mWorkers m)) (mShares m)
    in (send [ (w, sharePieces n (valueOf n)) | w <- sends ] m) { mShares = sh, mLive = M.insert n (valueOf n) (mLive m), mNext = n + 1 }
  Remove k | M.null (mLive m) -> m
           | otherwise ->
    let n = M.keys (mLive m) !! (k `mod` M.size (mLive m))
        (sh, sends) = shareRemove n (M.keys (mWorkers m)) (mShares m)
    in (send [ (w, [x]) | (w, x) <- sends ] m) { mShares = sh, mLive = M.delete n (mLive m) }
  Join w | M.member w (mWorkers m) -> m
         | otherwise ->
             let (sh, msgs) = shareJoined w (mShares m)
             in m { mShares = sh, mWorkers = M.insert w (W (concatMap (uncurry sharePieces) msgs) M.empty M.empty) (mWorkers m) }
  Lose w -> m { mShares = shareLost w (mShares m), mWorkers = M.delete w (mWorkers m) }
  Deliver w -> case M.lookup w (mWorkers m) of
    Just x | msg : rest <- wInbox x ->
      let (x', answer) = atWorker msg x { wInbox = rest }
      in m { mWorkers = M.insert w x' (mWorkers m)
           , mShares = maybe id (shareAnswer w) answer (mShares m) }
    _ -> m
  where
    send sends model = model { mWorkers = foldl' (\ws (w, xs) -> M.adjust (\x -> x { wInbox = wInbox x ++ xs }) w ws)
                                                 (mWorkers model) sends }
    atWorker msg x = case msg of
      SharePart n _ b -> (x { wHolds = M.insert n b (wHolds x), wFirsts = M.insertWith (+) n 1 (wFirsts x) }, Just (ShareHeld n))
      ShareDrop n -> (x { wHolds = M.delete n (wHolds x) }, Just (ShareDropped n))
      _ -> (x, Nothing)

settled :: Model -> Model
settled m = foldl' run m [ Deliver w | w <- M.keys (mWorkers m), _ <- wInbox (mWorkers m M.! w) ]

spec :: Spec
spec = describe "shared values" $ do
  it "reach every live worker once, before anything else, and leave every worker when unshared" $
    property $ \(ops :: [Op]) ->
      let m = settled (foldl' run (Model emptyShares M.empty M.empty 1) ops)
      in conjoin $
           [ counterexample ("worker " ++ show w ++ " holds " ++ show (M.keys (wHolds x))) (wHolds x === mLive m)
           | (w, x) <- M.toList (mWorkers m) ]
           ++ [ counterexample ("worker " ++ show w ++ " was sent a value twice") (all (== 1) (M.elems (wFirsts x)))
              | (w, x) <- M.toList (mWorkers m) ]
           ++ [ sharesHeldBy (mShares m) === M.map (const (M.size (mLive m))) (mWorkers m)
              , S.fromList (sharesLive (mShares m)) === M.keysSet (mLive m) ]

  it "cross the wire in pieces that add up to the value" $ do
    let big = B.pack (take (2 * sharePieceBytes + 17) (cycle [0 .. 250]))
        parts = sharePieces 7 big
    length parts `shouldBe` 3
    B.concat [ b | SharePart 7 total b <- parts, total == fromIntegral (B.length big) ] `shouldBe` big
    sharePieces 8 B.empty `shouldBe` [SharePart 8 0 B.empty]

  it "refuses a value claiming more than a worker takes, and sends one larger than memory to disk" $ do
    assembly <- newAssembly
    r <- receivePiece assembly 77 (2 ^ (62 :: Int)) (BC.pack "abc")
    either (`shouldContain` "claims") (const (expectationFailure "a 4 EiB value was taken")) r
    -- 512 GiB: no allocation of that size is tried (it would end the process)
    receivePiece assembly 78 (2 ^ (39 :: Int)) (BC.pack "abc") `shouldReturn` Right False
    tmp <- getTemporaryDirectory
    pid <- getProcessID
    let file = tmp </> ("herd-spill-" ++ show pid) </> "78"
    doesFileExist file `shouldReturn` True
    dropShared assembly 78
    doesFileExist file `shouldReturn` False

  it "a table used by 1,000 tasks is sent to each worker once, again to a restarted one, and unshare drops it everywhere" $ do
    let cfg = defaultConfig { configWorkers = Just 2, configSecret = SecretValue (BC.pack "shared-spec-secret-0123456789") }
        table = B.pack (take (3 * 1024 * 1024 + 5) (cycle [0 .. 250]))
        expected = [ fromIntegral (B.index table i) + i | i <- [0, 3000 .. 2999999] ]
    withCluster cfg $ \cluster -> do
      True <- waitForWorkers cluster 2 30
      shared <- share cluster table
      answers <- farm cluster sharedIndexTask [ (shared, i) | i <- [0, 3000 .. 2999999] ]
      answers `shouldBe` expected
      length answers `shouldBe` 1000
      s1 <- clusterStatus cluster
      statusSharedSends s1 `shouldBe` 2
      statusSharedBytes s1 `shouldBe` 2 * (8 + B.length table)  -- store: a length, then the bytes
      map rowShared (live s1) `shouldBe` [1, 1]
      -- a worker killed: its replacement is sent the table before its first task
      victim : _ <- clusterWorkerInfo cluster
      signalProcess sigKILL (fromIntegral (infoPid victim))
      answers2 <- farm cluster sharedIndexTask [ (shared, i) | i <- [0, 3000 .. 2999999] ]
      answers2 `shouldBe` expected
      waitUntil (\s -> length (live s) == 2 && all ((== 1) . rowShared) (live s)) cluster `shouldReturn` True
      statusSharedSends <$> clusterStatus cluster `shouldReturn` 3
      -- unshared: gone from every worker, by their own word
      unshare cluster shared
      waitUntil (\s -> length (live s) == 2 && all ((== 0) . rowShared) (live s) && statusShared s == 0) cluster
        `shouldReturn` True
      -- a task that names it now fails, saying which value
      late <- farmEither cluster sharedIndexTask [(shared, 1)]
      case late of
        [Left e] -> show e `shouldSatisfy` ("is not held here" `isInfixOf`)
        other -> expectationFailure ("a task naming an unshared value should fail, got " ++ show other)

  it "a host agent is sent a table once for all its workers, and gives it to a worker it restarts" $ do
    let secret = "shared-spec-agent-secret-0123456789"
        cfg = defaultConfig { configWorkers = Just 0, configSecret = SecretValue (BC.pack secret) }
        table = B.pack (take (2 * 1024 * 1024 + 3) (cycle [0 .. 250]))
        keys = [0, 2000 .. 1999999]
        expected = [ fromIntegral (B.index table i) + i | i <- keys ]
    withCluster cfg $ \cluster ->
      withHandAgent cluster secret 2 $ \agent -> do
        True <- waitForWorkers cluster 2 30
        statusLinks <$> clusterStatus cluster `shouldReturn` 1
        shared <- share cluster table
        farm cluster sharedIndexTask [ (shared, i) | i <- keys ] `shouldReturn` expected
        s1 <- clusterStatus cluster
        (statusSharedSends s1, statusSharedBytes s1) `shouldBe` (1, 8 + B.length table)
        waitUntil (\s -> length (live s) == 2 && all ((== 1) . rowShared) (live s)) cluster `shouldReturn` True
        -- a worker killed: its agent restarts it and hands it the table itself
        victim : _ <- clusterWorkerInfo cluster
        signalProcess sigKILL (fromIntegral (infoPid victim))
        waitUntil (\s -> statusLostTotal s == 1 && length (live s) == 2 && all ((== 1) . rowShared) (live s)) cluster
          `shouldReturn` True
        farm cluster sharedIndexTask [ (shared, i) | i <- keys ] `shouldReturn` expected
        statusSharedSends <$> clusterStatus cluster `shouldReturn` 1
        unshare cluster shared
        waitUntil (\s -> all ((== 0) . rowShared) (live s)) cluster `shouldReturn` True
        terminateProcess agent

  it "values that outgrow a worker's memory limit spill to its disk, and the job completes" $ do
    -- twelve 24 MiB values (288 MiB) for workers limited to 320 MiB: each
    -- keeps three in memory (80 MiB of budget) and spills the rest. (At a
    -- 256 MiB limit a worker was once killed at 256 MiB resident in a full
    -- run: tasks reading spilled values read and decode 48 MiB each, and
    -- the runtime keeps freed memory for a while.)
    let cfg = defaultConfig { configWorkers = Just 2, configWorkerMemoryLimit = MemoryLimitMiB 320
                            , configSecret = SecretValue (BC.pack "shared-spec-secret-0123456789") }
        size = 24 * 1024 * 1024
        values = [ B.replicate size (fromIntegral k) | k <- [1 .. 12 :: Int] ]
        probes = [ (k, i) | k <- [0 .. 11], i <- [0, size `div` 3, size - 1] ]
    withCluster cfg $ \cluster -> do
      True <- waitForWorkers cluster 2 30
      handles <- mapM (share cluster) values
      answers <- farm cluster sharedIndexTask [ (handles !! k, i) | (k, i) <- probes ]
      answers `shouldBe` [ k + 1 + i | (k, i) <- probes ]
      statusLostTotal <$> clusterStatus cluster `shouldReturn` 0
      -- the spilled values are files in each worker's spill directory
      pids <- map infoPid <$> clusterWorkerInfo cluster
      tmp <- getTemporaryDirectory
      spilled <- mapM (\p -> length <$> listDirectory (tmp </> ("herd-spill-" ++ show p))) pids
      spilled `shouldSatisfy` all (>= 9)
      -- and on the workers' rows, by their own word
      waitUntil (\s -> length (live s) == 2 && all ((>= 9) . rowSpilled) (live s)) cluster `shouldReturn` True
      -- a worker killed cannot clean up: its supervisor removes what it spilled
      let victim : others = pids
      signalProcess sigKILL (fromIntegral victim)
      waitUntil (\s -> statusLostTotal s == 1 && length (live s) == 2) cluster `shouldReturn` True
      doesDirectoryExist (tmp </> ("herd-spill-" ++ show victim)) `shouldReturn` False
      mapM_ (unshare cluster) handles
      waitUntil (\s -> all ((== 0) . rowShared) (live s)) cluster `shouldReturn` True
      after <- mapM (\p -> length <$> listDirectory (tmp </> ("herd-spill-" ++ show p))) others
      after `shouldBe` map (const 0) others
  where
    live s = [ r | r <- statusWorkers s, rowState r /= Lost ]
    waitUntil cond cluster = go (100 :: Int)
      where go k = do
              s <- clusterStatus cluster
              if cond s then pure True else if k <= 0 then pure False else threadDelay 100000 >> go (k - 1)
