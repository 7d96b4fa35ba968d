-- | Callers' code runs on callers' threads: the master's shell hands a
-- farm's results to its caller undecoded, so a job whose decoder is slow
-- holds up only itself, never the shell's lock (and with it every other
-- job and every worker's traffic). Checked without timing: the slow job's
-- decoder is held on a gate while another job runs to its end.
module CallerThreadSpec (spec) where

import Control.Concurrent.Async (poll, wait, withAsync)
import Control.Concurrent.MVar (putMVar, readMVar)
import Control.Exception (evaluate)
import Data.Maybe (isNothing)
import Herd
import Herd.Config
import qualified Data.ByteString.Char8 as BC
import System.Timeout (timeout)
import Test.Hspec
import TestTasks (SlowToDecode (..), decodeGate, decodeStarted, slowToDecodeTask, squareTask)

spec :: Spec
spec = describe "a farm's caller" $
  it "decodes its results on its own thread: another job runs to its end while one job's decoder is held" $ do
    let cfg = defaultConfig { configWorkers = Just 2, configSecret = SecretValue (BC.pack "caller-thread-spec-secret") }
    withCluster cfg $ \cluster -> do
      let fastRound = farm cluster squareTask [1 .. 50000] >>= evaluate . sum
      expected <- fastRound   -- the workers warmed up, and the answer to expect
      withAsync (farm cluster slowToDecodeTask [1 .. 15]) $ \slow -> do
        -- its first result is being decoded, on its caller's thread, and
        -- stays there until the gate opens
        readMVar decodeStarted
        -- ten whole farms of 50 000 tasks meanwhile (the bound only stops a
        -- hang: a decoder under the shell's lock would stop every job)
        fast <- timeout (120 * 1000000) (mapM (const fastRound) [1 .. 10 :: Int])
        fast `shouldBe` Just (replicate 10 expected)
        overlapped <- isNothing <$> poll slow
        overlapped `shouldBe` True
        putMVar decodeGate ()
        slowResults <- wait slow
        slowResults `shouldBe` map SlowToDecode [1 .. 15]
