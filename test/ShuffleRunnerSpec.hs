{-# LANGUAGE ScopedTypeVariables #-}
-- | A shuffle's runner on one worker ("Herd.Task.Partition"), without a
-- cluster: parts made one at a time, when asked for (so a worker can send
-- the parts other workers own before it makes its own), a part kept as
-- its value combining as its bytes would, and a split of the wrong length
-- refused.
module ShuffleRunnerSpec (spec) where

import Data.Either (isLeft)
import Data.IORef
import Data.List (isInfixOf)
import Data.Store (encode)
import qualified Data.Vector.Unboxed as VU
import System.IO.Unsafe (unsafePerformIO)
import Test.Hspec
import Herd.Task.Closure (closureRunner)
import Herd.Task.Partition

-- Cut a vector into n slices, counting each slice as it is made.
counted :: IORef Int -> Int -> VU.Vector Int -> [VU.Vector Int]
counted made n v = [ unsafePerformIO (modifyIORef' made (+ 1) >> pure (slice j)) | j <- [0 .. n - 1] ]
  where slice j = let per = VU.length v `div` n in VU.slice (j * per) per v
{-# NOINLINE counted #-}

runnerWith :: IORef Int -> ShuffleRunner
runnerWith made = closureRunner (shuffler (counted made) (\(ps :: [VU.Vector Int]) -> VU.concat ps))

spec :: Spec
spec = describe "a shuffle's runner" $ do
  it "makes each part only when it is asked for" $ do
    made <- newIORef 0
    input <- heldOf (VU.enumFromN (0 :: Int) 12)
    Right partOf <- shuffleSplit (runnerWith made) 3 input
    readIORef made `shouldReturn` 0
    Right p2 <- partOf 2
    readIORef made `shouldReturn` 1
    heldAs p2 `shouldReturn` Right (VU.fromList [8, 9, 10, 11 :: Int])
    missing <- partOf 3
    isLeft missing `shouldBe` True

  it "combines a part kept as its value as it combines the same part's bytes" $ do
    made <- newIORef 0
    let r = runnerWith made
    input <- heldOf (VU.enumFromN (0 :: Int) 10)
    Right partOf <- shuffleSplit r 2 input
    Right own <- partOf 0
    Right other <- partOf 1
    fromBytes <- newHeld (encode (VU.enumFromN (5 :: Int) 5))
    Right asValues <- shuffleCombine r [own, other]
    Right mixed <- shuffleCombine r [own, fromBytes]
    heldAs mixed `shouldReturn` (Right (VU.enumFromN (0 :: Int) 10))
    (heldAs asValues :: IO (Either String (VU.Vector Int))) `shouldReturn` Right (VU.enumFromN 0 10)

  it "refuses a part whose bytes are not of the part's type" $ do
    made <- newIORef 0
    bad <- newHeld (encode "not a vector of numbers")
    outcome <- shuffleCombine (runnerWith made) [bad]
    either ("does not decode" `isInfixOf`) (const False) outcome `shouldBe` True

  it "fails a split that gives another number of parts than asked" $ do
    input <- heldOf (VU.enumFromN (0 :: Int) 4)
    let short = closureRunner (shuffler (\_ (v :: VU.Vector Int) -> [v]) (\(ps :: [VU.Vector Int]) -> VU.concat ps))
    outcome <- shuffleSplit short 3 input
    either ("gave 1 parts, not 3" `isInfixOf`) (const False) outcome `shouldBe` True
