-- | Log lines from concurrent threads arrive whole ("Herd.Log"), through
-- an unbuffered pipe as standard error is.
module LogSpec (spec) where

import Control.Concurrent.Async (concurrently, forConcurrently_)
import Control.Monad (forM_)
import qualified Data.Set as S
import Herd.Log (writeLine)
import System.IO
import System.Process (createPipe)
import Test.Hspec

spec :: Spec
spec = describe "Herd.Log" $
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
