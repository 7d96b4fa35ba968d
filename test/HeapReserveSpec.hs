-- | The heap reserves ("Herd.Sys.HeapReserve"): how large the master's is for
-- a setting and a worker count, that a cluster's start really touches
-- it, and that each worker touches the one the configuration sets.
module HeapReserveSpec (spec) where

import Data.Char (isDigit)
import Data.Either (isLeft)
import GHC.RTS.Flags (getGCFlags, minOldGenSize)
import GHC.Stats (RTSStats (..), getRTSStats, getRTSStatsEnabled)
import Herd
import Herd.Config
import Herd.Settings (validateConfig)
import Herd.Sys.HeapReserve
import ClusterSpec (withTestClusterConfig)
import Test.Hspec
import Test.QuickCheck

mib :: Int
mib = 1024 * 1024

spec :: Spec
spec = do
  describe "the master's heap reserve" $ do
    it "is the size set, whatever the workers, and none when set to 0" $ do
      heapReserveBytes (Just 32) 1 `shouldBe` 32 * mib
      heapReserveBytes (Just 32) 5000 `shouldBe` 32 * mib
      heapReserveBytes (Just 0) 5000 `shouldBe` 0
    it "by default: 256 KiB a worker, from 128 MiB to 256 MiB" $ do
      heapReserveBytes Nothing 0 `shouldBe` 128 * mib
      heapReserveBytes Nothing 2 `shouldBe` autoReserveLeast
      heapReserveBytes Nothing 512 `shouldBe` 128 * mib
      heapReserveBytes Nothing 768 `shouldBe` 192 * mib
      heapReserveBytes Nothing 2048 `shouldBe` 256 * mib
      heapReserveBytes Nothing 100000 `shouldBe` autoReserveMost
    it "grows with the workers by default, within its bounds" $ property $ \(NonNegative a) (NonNegative b) ->
      let r = heapReserveBytes Nothing
      in r (min a b) <= r (max a b) && r a >= autoReserveLeast && r a <= autoReserveMost
    it "keeps the old generation at a quarter of the reserve" $
      oldGenerationFloor (128 * mib) `shouldBe` 32 * mib
    it "refuses a negative or absurd setting, naming it" $ do
      refusedField defaultConfig { configMasterHeapReserve = Just (-1) } `shouldBe` Just "configMasterHeapReserve"
      refusedField defaultConfig { configMasterHeapReserve = Just 100000 } `shouldBe` Just "configMasterHeapReserve"
      refusedField defaultConfig { configMasterHeapReserve = Just 0 } `shouldBe` Nothing
    it "is touched when a cluster starts: the process's memory reaches it" $ do
      enabled <- getRTSStatsEnabled
      if not enabled then pendingWith "needs +RTS -T" else do
        before <- getRTSStats
        -- more than the process ever had, so only the reserve can reach it
        let reserve = fromIntegral (max_mem_in_use_bytes before) `div` mib + 64
        withTestClusterConfig 0 (\c -> c { configMasterHeapReserve = Just reserve }) $ \_ _ -> do
          after <- getRTSStats
          fromIntegral (max_mem_in_use_bytes after) `shouldSatisfy` (>= reserve * mib)
          -- and the runtime's minimum old generation (+RTS -O) was raised to a quarter of it
          flags <- getGCFlags
          fromIntegral (minOldGenSize flags) * 4096 `shouldSatisfy` (>= oldGenerationFloor (reserve * mib))

  describe "a worker's heap reserve" $ do
    it "is read from its variable as MiB from 0 to 65536, or refused saying why" $ do
      parseWorkerHeapReserve "64" `shouldBe` Right 64
      parseWorkerHeapReserve "0" `shouldBe` Right 0
      parseWorkerHeapReserve "65536" `shouldBe` Right 65536
      mapM_ (\t -> parseWorkerHeapReserve t `shouldSatisfy` isLeft) ["", "-1", "65537", "64m", " 64", "lots"]
      parseWorkerHeapReserve "64m" `shouldBe` Left "not a heap reserve from 0 to 65536 MiB: \"64m\""
    it "refuses a negative or absurd setting, naming it" $ do
      refusedField defaultConfig { configWorkerHeapReserve = -1 } `shouldBe` Just "configWorkerHeapReserve"
      refusedField defaultConfig { configWorkerHeapReserve = 70000 } `shouldBe` Just "configWorkerHeapReserve"
      refusedField defaultConfig { configWorkerHeapReserve = 0 } `shouldBe` Nothing
      configWorkerHeapReserve defaultConfig `shouldBe` defaultWorkerHeapReserve
    it "is touched by each worker as set, and not at all when set to 0" $ do
      -- a worker's peak resident memory: its reserve on top of its nursery
      -- with one, well under it without
      let peakOfWorkers reserve = withTestClusterConfig 1 (\c -> c { configWorkerHeapReserve = reserve }) $ \_ cluster -> do
            infos <- clusterWorkerInfo cluster
            mapM (peakResidentMiB . infoPid) infos
      peakOfWorkers 300 >>= (`shouldSatisfy` \ps -> not (null ps) && all (>= 300) ps)
      peakOfWorkers 0 >>= (`shouldSatisfy` \ps -> not (null ps) && all (< 300) ps)

-- A process's peak resident memory in MiB (Linux's VmHWM).
peakResidentMiB :: Int -> IO Int
peakResidentMiB pid = do
  status <- lines <$> readFile ("/proc/" ++ show pid ++ "/status")
  case [ read (takeWhile isDigit (dropWhile (not . isDigit) l)) | l <- status, take 6 l == "VmHWM:" ] of
    (kib : _) -> pure (kib `div` 1024)
    [] -> fail ("no VmHWM for process " ++ show pid)

-- The field a configuration is refused for, if it is.
refusedField :: Config -> Maybe String
refusedField c = either (\e -> case e of { ConfigError f _ -> Just f; _ -> Nothing }) (const Nothing) (validateConfig c)
