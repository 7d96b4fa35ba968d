-- | The validating decoder never trusts a length or count it has not
-- checked against the bytes present.
module CodecSpec (spec, allocationOf) where

import Control.Exception (evaluate)
import Control.Monad (replicateM)
import System.Mem (getAllocationCounter)
import qualified Data.ByteString as B
import Data.Word (Word8)
import Herd.Core.Wire.Codec
import Test.Hspec
import Test.QuickCheck

spec :: Spec
spec = describe "Herd.Core.Wire.Codec" $ do
  it "round-trips sized byte strings" $ property $ \(xs :: [[Word8]]) ->
    let chunks = map B.pack xs
        bytes = buildStrict (putWord32 (fromIntegral (length chunks)) <> foldMap putSizedBytes chunks)
        decoder = getCount 4 >>= \n -> replicateM n getSizedBytes
    in runGet decoder bytes === Right chunks
  it "rejects a length larger than the bytes left, without allocating it" $ do
    let bytes = buildStrict (putWord32 0xFFFFFFF0) <> B.pack [1, 2, 3]
    (r, allocated) <- allocationOf (runGet getSizedBytes bytes)
    r `shouldSatisfy` isLeft
    -- the claim is 4 GB: anything near it would show here
    allocated `shouldSatisfy` (< 100000)
  it "rejects a count that cannot fit in the bytes left" $ do
    let bytes = buildStrict (putWord32 4000000000) <> B.replicate 10 0
    runGet (getCount 1) bytes `shouldSatisfy` isLeft
  it "fails cleanly on every truncation of a valid message" $ do
    let bytes = buildStrict (putWord64 7 <> putSizedBytes (B.replicate 20 9) <> putWord16 3)
        decoder = (,,) <$> getWord64 <*> getSizedBytes <*> getWord16
    runGet decoder bytes `shouldSatisfy` either (const False) (const True)
    mapM_ (\k -> runGet decoder (B.take k bytes) `shouldSatisfy` isLeft) [0 .. B.length bytes - 1]
  it "rejects trailing bytes" $
    runGet getWord8 (B.pack [1, 2]) `shouldSatisfy` isLeft
  where
    isLeft = either (const True) (const False)

-- | A value forced to weak head normal form, and the bytes this thread
-- allocated meanwhile.
allocationOf :: a -> IO (a, Int)
allocationOf x = do
  before <- getAllocationCounter
  r <- evaluate x
  after <- getAllocationCounter
  pure (r, fromIntegral (before - after))

