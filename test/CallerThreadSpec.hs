-- | Callers' code runs on callers' threads: the master's shell hands a
-- farm's results to its caller undecoded, so a job whose decoder is slow
-- holds up only itself, never the shell's lock (and with it every other
-- job and every worker's traffic).
module CallerThreadSpec (spec) where

import Control.Concurrent (threadDelay)
import Control.Concurrent.Async (poll, wait, withAsync)
import Control.Exception (evaluate)
import Control.Monad (forM_, replicateM)
import Data.Maybe (isNothing)
import GHC.Clock (getMonotonicTime)
import Herd
import Herd.Config
import qualified Data.ByteString.Char8 as BC
import Test.Hspec
import TestTasks (SlowToDecode (..), slowToDecodeTask, squareTask)

spec :: Spec
spec = describe "a farm's caller" $
  it "decodes its results on its own thread: a job whose decoder takes 200 ms a result leaves another job's rate within 1.5x" $ do
    let cfg = defaultConfig { configWorkers = Just 2, configSecret = SecretValue (BC.pack "caller-thread-spec-secret") }
    withCluster cfg $ \cluster -> do
      let fastRound = farm cluster squareTask [1 .. 50000] >>= evaluate . sum
          timed act = do { t0 <- getMonotonicTime; _ <- act; t1 <- getMonotonicTime; pure (t1 - t0) }
          fastRun = timed (forM_ [1 .. 10 :: Int] (const fastRound))
      _ <- fastRound   -- warm the workers up
      -- the fastest of a few runs, alone and beside the slow job: the
      -- machine's noise makes any one run of a few tens of ms unreliable
      alone <- minimum <$> replicateM 3 fastRun
      -- fifteen results, 200 ms each to decode: about 3 s of the slow job's
      -- caller decoding while the fast job runs
      withAsync (farm cluster slowToDecodeTask [1 .. 15]) $ \slow -> do
        threadDelay 100000   -- its first results are being decoded by now
        during <- minimum <$> replicateM 2 fastRun
        overlapped <- isNothing <$> poll slow
        slowResults <- wait slow
        slowResults `shouldBe` map SlowToDecode [1 .. 15]
        -- (seconds of the fast rounds beside the slow job, and the ratio to alone)
        (during, during / alone) `shouldSatisfy` (\(_, ratio) -> ratio <= 1.5)
        overlapped `shouldBe` True
