-- | The protocol's encodings round-trip, and decoding arbitrary or hostile
-- bytes is total: a 'Left', never an exception, a hang or a huge
-- allocation.
module WireSpec (spec) where

import Control.Exception (evaluate)
import Control.Monad (forM_)
import qualified Data.ByteString as B
import qualified Data.ByteString.Lazy as BL
import qualified Data.Text as T
import Data.Word (Word32, Word64, Word8)
import GHC.Fingerprint (Fingerprint (..))
import Herd.Task (BatchFailure (..), Runner (..), TaskRef (..), lookupRunner, taskDecodeResults, taskRef)
import TestTasks (unitTask)
import Herd.Wire
import Herd.Wire.Codec (buildStrict, putWord32, putWord64, putWord8)
import Test.Hspec
import Test.QuickCheck

ref :: TaskRef
ref = TaskRef (Fingerprint 1 2) "square (Test:1:1)" (Fingerprint 3 4) (Fingerprint 5 6)

spec :: Spec
spec = describe "Herd.Wire" $ do
  it "round-trips batches" $ property $ \(bid :: Word64', count :: Word32, args :: [Word8]) ->
    let msg = RunBatch (unW bid) ref count (B.pack args)
    in decodeToWorker (BL.toStrict (encodeToWorker msg)) === Right msg
  it "round-trips results" $ property $ \(bid :: Word64', busy :: Word64', out :: Either (Word32, String) [Word8]) ->
    let msg = BatchResult (unW bid) (unW busy) (either (\(p, m) -> Left (p, T.pack m)) (Right . B.pack) out)
    in decodeFromWorker (BL.toStrict (encodeFromWorker msg)) === Right msg
  it "round-trips the handshake" $ do
    let hello = WorkerHello protocolVersion (B.replicate 32 7) 1234 (T.pack "host") (T.pack "ssh:host")
    decodeWorkerHello (encodeWorkerHello hello) `shouldBe` Right hello
    forM_ [ Welcome (B.replicate 32 7) 3 65536 4000, Refused (T.pack "no"), Challenge (B.replicate 32 1)
          , AuthAccepted (B.replicate 32 2) ] $ \reply ->
      decodeMasterReply (encodeMasterReply reply) `shouldBe` Right reply
    decodeAuthResponse (encodeAuthResponse (B.replicate 32 3) (B.replicate 32 4))
      `shouldBe` Right (B.replicate 32 3, B.replicate 32 4)
    decodeAuthResponse (encodeAuthResponse (B.replicate 31 3) (B.replicate 32 4))
      `shouldSatisfy` either (const True) (const False)
  it "decodes arbitrary bytes totally" $ property $ \(bytes :: [Word8]) -> ioProperty $ do
    let b = B.pack bytes
    _ <- evaluate (either (const ()) (const ()) (decodeFromWorker b))
    _ <- evaluate (either (const ()) (const ()) (decodeToWorker b))
    _ <- evaluate (either (const ()) (const ()) (decodeWorkerHello b))
    _ <- evaluate (either (const ()) (const ()) (decodeAuthResponse b))
    _ <- evaluate (either (const ()) (const ()) (decodeMasterReply b))
    pure True
  it "rejects a result claiming four gigabytes in a few bytes" $ do
    let hostile = buildStrict (putWord8 1 <> putWord64 1 <> putWord64 0 <> putWord8 0 <> putWord32 4000000000)
    decodeFromWorker hostile `shouldSatisfy` either (const True) (const False)
  it "refuses a hello from another build or protocol version" $ do
    let ours = B.replicate 32 1
    checkHello ours (WorkerHello protocolVersion ours 1 T.empty T.empty) `shouldBe` Right ()
    checkHello ours (WorkerHello protocolVersion (B.replicate 32 2) 1 T.empty T.empty)
      `shouldSatisfy` either (const True) (const False)
    checkHello ours (WorkerHello (protocolVersion + 1) ours 1 T.empty T.empty)
      `shouldSatisfy` either (const True) (const False)
  it "refuses a list of zero-size values claiming more elements than the batch holds" $ do
    -- store alone would loop for the claimed 2^62 elements of ()
    let hostile = B.pack [0, 0, 0, 0, 0, 0, 0, 0x40]
    taskDecodeResults unitTask 3 hostile `shouldSatisfy` either (const True) (const False)
    taskDecodeResults unitTask 3 (B.pack [3, 0, 0, 0, 0, 0, 0, 0]) `shouldBe` Right [(), (), ()]
    Right runner <- lookupRunner (taskRef unitTask)
    r <- runnerRun runner 2 hostile
    case r of
      Left (ArgumentsUndecodable why) -> why `shouldContain` "claims"
      other -> expectationFailure (show other)
  it "rejects garbage in place of a hello" $
    decodeWorkerHello (B.pack [71, 69, 84, 32, 47]) `shouldSatisfy` either (const True) (const False)

newtype Word64' = W { unW :: Word64 } deriving (Show)

instance Arbitrary Word64' where
  arbitrary = W . fromIntegral <$> (arbitrary :: Gen Int)
