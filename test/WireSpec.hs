-- | The protocol's encodings round-trip, and decoding arbitrary or hostile
-- bytes is total: a 'Left', never an exception, a hang or a huge
-- allocation.
module WireSpec (spec) where

import Control.Exception (evaluate)
import Control.Monad (forM_)
import Data.List (isInfixOf)
import qualified Data.ByteString as B
import qualified Data.Text as T
import Data.Word (Word32, Word64, Word8)
import GHC.Fingerprint (Fingerprint (..))
import Data.IORef
import Herd.Packet (Encoder, appendValuesToRun, encoderBytes, flushIdle, newSender, splitPacket)
import Herd.Core.Packet.Policy (PacketPolicy (..))
import Herd.Wire.Staging (newStaging, stageValueAt, withStaged)
import Herd.Core.Wire.Tags (tagStreamIn, tagStreamOut)
import Herd.Task.Evolver (lookupEvolver)
import Herd.Task.Process (lookupProcess, processRef)
import Herd.Core.Base (Range (..))
import Herd.Task (Runner (..), TaskCodecs (..), TaskRef (..), lookupRunner, taskCodecs, taskRef)
import Herd.Wire.ArgTable (argsEncoder)
import Herd.Wire.Scratch (ChunkOutcome (..), newScratch, resultsEncoder)
import Herd.Wire.Value (valueEncoder)
import CodecSpec (allocationOf)
import TestTasks (runningSumProcess, squareTask, unitTask)
import Herd.Core.Wire
import Herd.Core.Wire.Host
import Herd.Wire.Encode
import Herd.Wire.HostEntry (hostSharePiece)
import Herd.Core.Wire.Codec (buildStrict, putWord32, putWord64, putWord8)
import Test.Hspec
import Test.Hspec.QuickCheck (prop)
import Test.QuickCheck hiding (Args)

ref :: TaskRef
ref = TaskRef (Fingerprint 1 2) "square (Test:1:1)" (Fingerprint 3 4) (Fingerprint 5 6)

-- The one message a sender makes of these values appended to a run.
runMessage :: Word8 -> Word64 -> [Int] -> IO B.ByteString
runMessage tag key xs = do
  out <- newIORef []
  -- the frame is the sender's own buffer: copy it now
  sender <- newSender (PacketPolicy True 65536 10) (\parts -> let c = B.copy (B.concat parts) in c `seq` modifyIORef out (c :))
  staging <- newStaging
  forM_ xs $ \x -> do
    n <- stageValueAt staging 0 x
    withStaged staging $ \p -> appendValuesToRun sender tag key p n 1
  flushIdle sender
  frames <- readIORef out
  case frames of
    [frame] | Right [msg] <- splitPacket 10 (B.drop 4 frame) -> pure msg
    _ -> fail ("expected one packet of one message, got " ++ show frames)

roundTrip :: (a -> Encoder) -> (B.ByteString -> Either String a) -> a -> IO (Either String a)
roundTrip enc dec msg = dec <$> encoderBytes (enc msg)

spec :: Spec
spec = describe "Herd.Core.Wire" $ do
  it "round-trips the farm and stream messages to a worker (every message: MessageSpec)" $ property $ \(sid :: Word64', n :: Word32, val :: [Word8]) -> ioProperty $ do
    let v = B.pack (1 : val)
        msgs = [ RunBatch (unW sid) ref n, Args n v, Shutdown, StreamOpen (unW sid) ref, StreamIn (unW sid) n v
               , StreamEnd (unW sid), StreamCredit (unW sid) n, StreamClose (unW sid) ]
    outs <- mapM (roundTrip encodeToWorker decodeToWorker) msgs
    pure (outs === map Right msgs)
  it "round-trips the farm and stream messages to the master (every message: MessageSpec)" $ property $ \(sid :: Word64', n :: Word32, why :: String, val :: [Word8]) -> ioProperty $ do
    let v = B.pack val
        msgs = [ Results n v, BatchDone (unW sid) (unW sid), TaskThrew (unW sid) n (T.pack why)
               , BatchRejected (unW sid) (T.pack why), StreamOut (unW sid) n v, StreamDone (unW sid)
               , StreamAborted (unW sid) (T.pack why), StreamTaken (unW sid) n ]
    outs <- mapM (roundTrip encodeFromWorker decodeFromWorker) msgs
    pure (outs === map Right msgs)
  it "builds the hot-path messages as the general encoder does" $ property $ \(sid :: Word64', x :: Int, xs :: [Int]) -> ioProperty $ do
    let args = x : xs
    -- stream elements are appended to runs by a real packet sender
    i <- runMessage tagStreamIn (unW sid) args
    o <- runMessage tagStreamOut (unW sid) args
    Right table <- encodeArgs (taskCodecs squareTask) args
    a <- encoderBytes (argsEncoder table 0 (length args))
    all' <- B.concat <$> mapM (encoderBytes . valueEncoder) args
    Right runner <- lookupRunner (taskRef squareTask)
    scratch <- newScratch
    ChunkDone <- runnerChunk runner scratch all' (length args)
    r <- resultsEncoder scratch 0 (length args) >>= encoderBytes
    squares <- B.concat <$> mapM (encoderBytes . valueEncoder . (\y -> y * y)) args
    pure $ (decodeToWorker i, decodeFromWorker o, decodeToWorker a, decodeFromWorker r)
       === ( Right (StreamIn (unW sid) (fromIntegral (length args)) all')
           , Right (StreamOut (unW sid) (fromIntegral (length args)) all')
           , Right (Args (fromIntegral (length args)) all'), Right (Results (fromIntegral (length args)) squares) )
  prop "round-trips a host link's control messages, and refuses their truncations" $ \token wid pid used limit (NonNegative cut) ->
    let why = T.pack (show (token, wid))
        cs = [ AddWorker token pid wid, WorkerAdded token wid, WorkerGone wid (GoneDied why)
             , WorkerGone wid (GoneMemory used limit), StopWorker wid, CloseHost
             , HostShare used limit (B.pack (map fromIntegral [token, pid, wid])), HostUnshare used
             , HostMemoryLimit NoHostLimit, HostMemoryLimit HostLimitAuto, HostMemoryLimit (HostLimitBytes used)
             , HostMemoryLimit (HostLimitShared wid) ]
    in conjoin [ decodeHostControl (encodeHostControl c) === Right c
                 .&&. (let bytes = encodeHostControl c
                           short = B.take (cut `mod` B.length bytes) bytes
                       in counterexample (show short) (either (const True) (const False) (decodeHostControl short)))
               | c <- cs ]
  prop "writes a shared value's piece for a host as the whole message would be, the piece as its tail" $ \n total (bytes :: [Word8]) ->
    let piece = B.pack bytes
        (enc, tl) = hostSharePiece n total piece
    in ioProperty $ do
         written <- encoderBytes enc
         pure ((written <> tl) === (encodeEntryHeader controlSlot <> encodeHostControl (HostShare n total piece)))
  it "splits a host entry into its slot and the body, and names a short one" $ do
    decodeEntry (encodeEntryHeader 7 <> B.pack [1, 2, 3]) `shouldBe` Right (7, B.pack [1, 2, 3])
    decodeEntry (encodeEntryHeader controlSlot) `shouldBe` Right (controlSlot, B.empty)
    either id (const "") (decodeEntry (B.pack [0, 0, 1])) `shouldSatisfy` ("no slot" `isInfixOf`)
  it "round-trips the handshake" $ do
    let hello = WorkerHello protocolVersion (B.replicate 32 7) 1234 (T.pack "host") (T.pack "ssh:host") ShmLink 3
    decodeWorkerHello (encodeWorkerHello hello) `shouldBe` Right hello
    forM_ [ Welcome (B.replicate 32 7) 3 65536 4000 True 65536 2000 4096, Refused (T.pack "no")
          , Challenge (B.replicate 32 1), AuthAccepted (B.replicate 32 2) ] $ \reply ->
      decodeMasterReply (encodeMasterReply reply) `shouldBe` Right reply
    decodeAuthResponse (encodeAuthResponse (B.replicate 32 3) (B.replicate 32 4))
      `shouldBe` Right (B.replicate 32 3, B.replicate 32 4)
    decodeAuthResponse (encodeAuthResponse (B.replicate 31 3) (B.replicate 32 4))
      `shouldSatisfy` either (const True) (const False)
  it "decodes arbitrary bytes past every tag and magic to a value or an error, forced in full" $
    property $ \(tag :: Word8, bytes :: [Word8], NonNegative cut) -> ioProperty $ do
      let rest = B.pack bytes
          tagged = B.cons tag rest
          -- a hello's first bytes (magic, version, ...) then anything
          hello = encodeWorkerHello (WorkerHello protocolVersion (B.replicate 32 7) 1234 (T.pack "host") (T.pack "ssh") ShmLink noCpu)
          helloLike = B.take (cut `mod` (B.length hello + 1)) hello <> rest
          reply = encodeMasterReply (Challenge (B.replicate 32 1))
          replyLike = B.take (cut `mod` (B.length reply + 1)) reply <> rest
          -- 'show' walks every field: an exception hidden in one is thrown here
          full :: (Show e, Show v) => Either e v -> Int
          full = length . either show show
      n <- evaluate (sum [ full (decodeFromWorker tagged), full (decodeToWorker tagged), full (decodeWorkerHello helloLike)
                         , full (decodeAuthResponse tagged), full (decodeMasterReply replyLike) ])
      pure (n > 0)
  it "rejects a failure message claiming four gigabytes of text in a few bytes" $ do
    let hostile = buildStrict (putWord8 3 <> putWord64 1 <> putWord32 0 <> putWord32 4000000000)
    (r, allocated) <- allocationOf (decodeFromWorker hostile)
    r `shouldSatisfy` either (const True) (const False)
    allocated `shouldSatisfy` (< 100000)
  it "refuses a hello from another build or protocol version" $ do
    let ours = B.replicate 32 1
    checkHello ours (WorkerHello protocolVersion ours 1 T.empty T.empty DirectLink noCpu) `shouldBe` Right ()
    checkHello ours (WorkerHello protocolVersion (B.replicate 32 2) 1 T.empty T.empty DirectLink noCpu)
      `shouldSatisfy` either (const True) (const False)
    checkHello ours (WorkerHello (protocolVersion + 1) ours 1 T.empty T.empty DirectLink noCpu)
      `shouldSatisfy` either (const True) (const False)
  it "refuses a run with bytes left over, or too few bytes" $ do
    let ignore _ _ = pure ()
    r1 <- decodeResults (taskCodecs unitTask) ignore [Range 0 1] (B.pack [1])
    r1 `shouldSatisfy` either (\(i, why) -> i == 0 && "left over" `isInfixOf` why) (const False)
    r2 <- decodeResults (taskCodecs squareTask) ignore [Range 0 1] (B.pack [1, 2, 3])
    r2 `shouldSatisfy` either ((== 0) . fst) (const False)
    Right runner <- lookupRunner (taskRef squareTask)
    scratch <- newScratch
    short <- runnerChunk runner scratch (B.pack [1, 2, 3]) 1
    short `shouldSatisfy` (\o -> case o of { ChunkUndecodable 0 _ -> True; _ -> False })
    long <- runnerChunk runner scratch (B.pack (replicate 9 0)) 1
    long `shouldSatisfy` (\o -> case o of { ChunkUndecodable 0 why -> "left over" `isInfixOf` why; _ -> False })
  it "finds a closure only as the kind it is, with its own types" $ do
    Right _ <- lookupRunner (taskRef squareTask)
    asTask <- lookupRunner (processRef runningSumProcess)
    either id (const "found") asTask `shouldContain` "is a stream process, not a task"
    asProcess <- lookupProcess (taskRef squareTask)
    either id (const "found") asProcess `shouldContain` "is a task, not a stream process"
    wrongTypes <- lookupRunner (taskRef squareTask) { refResultType = Fingerprint 1 2 }
    either id (const "found") wrongTypes `shouldContain` "type mismatch"
    missing <- lookupEvolver (taskRef squareTask) { refKey = Fingerprint 3 4 }
    either id (const "found") missing `shouldContain` "has no such function"
  it "rejects garbage in place of a hello" $
    decodeWorkerHello (B.pack [71, 69, 84, 32, 47]) `shouldSatisfy` either (const True) (const False)

newtype Word64' = W { unW :: Word64 } deriving (Show)

instance Arbitrary Word64' where
  arbitrary = W . fromIntegral <$> (arbitrary :: Gen Int)
