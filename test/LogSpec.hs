-- | What users read: log lines from concurrent threads arrive whole
-- ("Herd.Sys.Log"), through an unbuffered pipe as standard error is, and a
-- 'HerdError' nobody catches is printed as its sentence, not a record.
module LogSpec (spec, uncaughtErrorMain) where

import Control.Concurrent.Async (concurrently, forConcurrently_)
import Control.Monad (forM_)
import qualified Data.Set as S
import Control.Exception (displayException, throwIO)
import Data.List (isInfixOf, isPrefixOf)
import Herd (HerdError (..))
import Herd.Sys.Log (stampedLine, writeLine)
import Data.Time
import Test.QuickCheck
import System.Environment (getEnvironment, getExecutablePath)
import System.Exit (ExitCode (..))
import System.Process (createPipe, env, proc, readCreateProcessWithExitCode)
import System.IO

import Test.Hspec

-- | The test executable in the role of a program that lets a 'HerdError'
-- escape @main@.
uncaughtErrorMain :: IO ()
uncaughtErrorMain = throwIO (AllWorkersLost "worker 3 lost: connection closed")

spec :: Spec
spec = do
 describe "HerdError" $ do
  it "shows as its sentence, so a program that does not catch it tells its user in words" $
    forM_ [ AllWorkersLost "the cluster has no live worker", TaskFailed 3 "fib" "divide by zero"
          , ConfigError "configDashboard" "bad port", StatesLost ["s1"] "worker 2 lost", NoWorkers ] $ \e -> do
      show e `shouldBe` displayException e
      show e `shouldSatisfy` (\t -> "herd: " `isPrefixOf` t && not ("{" `isInfixOf` t))
  it "names a task by its index from 0 and the ordinal of its input" $ do
    show (TaskFailed 0 "f" "m") `shouldBe` "herd: task 0 (the 1st input) of f failed: m"
    [ show (TaskKilledWorkers i "f" 3 "x") | i <- [1, 10, 11, 12, 20, 101, 111] ] `shouldSatisfy`
      and . zipWith isInfixOf ["(the 2nd input)", "(the 11th input)", "(the 12th input)", "(the 13th input)", "(the 21st input)", "(the 102nd input)", "(the 112th input)"]
  it "is printed as its sentence when it escapes main (GHC prints uncaught exceptions with show)" $ do
    self <- getExecutablePath
    base <- getEnvironment
    (code, _, err) <- readCreateProcessWithExitCode
      (proc self []) { env = Just (("HERD_TEST_ROLE", "uncaught-error") : base) } ""
    code `shouldBe` ExitFailure 1
    err `shouldSatisfy` ("every worker was lost before the job finished (worker 3 lost: connection closed)" `isInfixOf`)
    err `shouldSatisfy` (not . ("lostDetail" `isInfixOf`))
 describe "Herd.Sys.Log" $ do
  it "starts a line with the local time in ISO 8601, to the millisecond, with the zone's offset" $
    property $ \(secs :: Int) (millis :: Int) (offsetMinutes :: Int) (line :: String) ->
      let zone = minutesToTimeZone (offsetMinutes `mod` 1500 - 720)
          utc = addUTCTime (fromIntegral (secs `mod` 2000000000) + fromIntegral (millis `mod` 1000) / 1000)
                           (UTCTime (fromGregorian 1970 1 1) 0)
          t = utcToZonedTime zone utc
          out = stampedLine t line
          (stamp, rest) = splitAt 29 out
          parsed = parseTimeM False defaultTimeLocale "%Y-%m-%dT%H:%M:%S%Q%Ez" stamp :: Maybe ZonedTime
      in counterexample out $
           (zonedTimeToUTC <$> parsed) === Just utc .&&. rest === ' ' : line
  it "stamps the lines herd logs" $ do
    now <- getZonedTime
    take 11 (stampedLine now "herd: x") `shouldBe` formatTime defaultTimeLocale "%Y-%m-%dT" now
  it "keeps lines from 50 threads whole on an unbuffered pipe" $ do
    (readEnd, writeEnd) <- createPipe
    hSetBuffering writeEnd NoBuffering
    hSetEncoding writeEnd utf8
    hSetEncoding readEnd utf8
    let line t k = "herd: thread " ++ show t ++ " line " ++ show k ++ " (ä, a word or two to make it longer)"
        expected = [ line t k | t <- [1 .. 50 :: Int], k <- [1 .. 20 :: Int] ]
    -- read while they write: the lines are more than a pipe holds
    (got, ()) <- concurrently (lines <$> (hGetContents readEnd >>= \s -> length s `seq` pure s)) $ do
      forConcurrently_ [1 .. 50 :: Int] $ \t -> forM_ [1 .. 20 :: Int] $ \k -> writeLine writeEnd (line t k)
      hClose writeEnd
    -- a broken line shows as a line that is not one of those written
    take 3 (filter (`S.notMember` S.fromList expected) got) `shouldBe` []
    length got `shouldBe` length expected
    S.fromList got `shouldBe` S.fromList expected
