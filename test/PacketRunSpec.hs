{-# LANGUAGE ScopedTypeVariables #-}
-- | Runs of values through a real packet sender ('appendValuesToRun', with
-- 'sendMessage' and idle flushes between): what the frames carry, read
-- back as a receiver would, is exactly what was offered, in order; runs
-- never outgrow a packet; with chunking off every value travels alone.
module PacketRunSpec (spec) where

import Control.Monad (forM, forM_)
import qualified Data.ByteString as B
import qualified Data.ByteString.Unsafe as BU
import Data.IORef
import qualified Data.Map.Strict as M
import Data.Word (Word64, Word8)
import Foreign.Ptr (castPtr)
import Herd.Core.Bytes (word32At, word64At)
import Herd.Packet
import Herd.Core.Packet.Policy (PacketPolicy (..), Urgency (..))
import Test.Hspec
import Test.QuickCheck

-- What a feeder does to a sender.
data Step = Value Word64 [Word8]   -- ^ a value for the run of this key
          | Plain Urgency [Word8]  -- ^ some other message
          | Plains [[Word8]]       -- ^ other messages under one hold ('sendMessagesHeld')
          | Idle                   -- ^ nothing else ready
  deriving (Eq, Show)

-- What a receiver reads back, in order.
data Item = GotValue Word64 [Word8] | GotPlain [Word8]
  deriving (Eq, Show)

instance Arbitrary Step where
  arbitrary = frequency
    [ (10, Value <$> elements [1, 2] <*> body)
    , (2, Plain <$> elements [Bulk, Urgent] <*> body)
    , (1, Plains <$> resize 4 (listOf body))
    , (1, pure Idle) ]
    where body = do
            n <- frequency [(8, choose (0, 40)), (1, choose (40, 300))]
            vectorOf n arbitrary

runTag, plainTag :: Word8
runTag = 200
plainTag = 100

-- A value's encoding: its length, then its bytes (so a run splits back).
encodeValue :: [Word8] -> B.ByteString
encodeValue bs = B.pack (fromIntegral (length bs `div` 256) : fromIntegral (length bs `mod` 256) : bs)

offered :: [Step] -> [Item]
offered steps = concat [ case s of { Value k v -> [GotValue k v]; Plain _ v -> [GotPlain v]; Plains vs -> map GotPlain vs; Idle -> [] }
                        | s <- steps ]

-- Feed the steps to a sender; the frames it sent (copied as they left).
drive :: PacketPolicy -> [Step] -> IO [B.ByteString]
drive policy steps = fst <$> driveCounting policy steps

-- The same, with the sender's own statistics afterwards.
driveCounting :: PacketPolicy -> [Step] -> IO ([B.ByteString], PeerStats)
driveCounting policy steps = do
  out <- newIORef []
  s <- newSender policy (\parts -> let c = B.copy (B.concat parts) in c `seq` modifyIORef out (c :))
  forM_ steps $ \step -> case step of
    Value k v -> BU.unsafeUseAsCStringLen (encodeValue v) $ \(p, n) -> appendValuesToRun s runTag k (castPtr p) n 1
    Plain u v -> sendMessage s u (encodeBytes (B.pack (plainTag : v)))
    Plains vs -> sendMessagesHeld s [ (encodeBytes (B.pack [plainTag]), B.pack v) | v <- vs ]
    Idle -> flushIdle s
  flushIdle s
  frames <- reverse <$> readIORef out
  (,) frames <$> senderStats s

-- Read a frame as a receiver: its messages, runs opened into their values.
readFrame :: B.ByteString -> Either String [[Item]]
readFrame frame
  | word32At frame 0 /= B.length frame - 4 = Left "frame length does not match"
  | otherwise = splitPacket 100000 (B.drop 4 frame) >>= mapM readMessage
  where
    readMessage m = case B.unpack (B.take 1 m) of
      [t] | t == plainTag -> Right [GotPlain (B.unpack (B.drop 1 m))]
          | t == runTag, B.length m >= runHeadBytes -> do
              let key = word64At m 1
                  count = word32At m 9
              vs <- values (B.drop runHeadBytes m)
              if length vs /= count then Left ("run claims " ++ show count ++ " values, holds " ++ show (length vs))
                else Right (map (GotValue key) vs)
      _ -> Left "unknown message"
    values bs
      | B.null bs = Right []
      | B.length bs < 2 = Left "a value cut short"
      | otherwise = do
          let n = fromIntegral (B.index bs 0) * 256 + fromIntegral (B.index bs 1)
          if B.length bs < 2 + n then Left "a value cut short"
            else (B.unpack (B.take n (B.drop 2 bs)) :) <$> values (B.drop (2 + n) bs)

policies :: Gen PacketPolicy
policies = PacketPolicy <$> frequency [(4, pure True), (1, pure False)] <*> choose (64, 4096) <*> pure 60

spec :: Spec
spec = describe "Herd.Packet runs of values" $ do
  it "delivers every value and message once, in order, each run's count matching its values" $
    property $ forAll policies $ \policy steps -> ioProperty $ do
      frames <- drive policy steps
      pure $ case mapM readFrame frames of
        Left why -> counterexample why False
        Right packets -> concat (concat packets) === offered steps

  it "sends an urgent message at once, with everything offered before it" $
    property $ forAll policies $ \policy steps -> ioProperty $ do
      out <- newIORef []
      s <- newSender policy (\parts -> let c = B.copy (B.concat parts) in c `seq` modifyIORef out (c :))
      -- after each urgent message, what has left is all that was offered so far
      checks <- forM (zip [1 ..] steps) $ \(k, step) -> do
        case step of
          Value key v -> BU.unsafeUseAsCStringLen (encodeValue v) $ \(p, n) -> appendValuesToRun s runTag key (castPtr p) n 1
          Plain u v -> sendMessage s u (encodeBytes (B.pack (plainTag : v)))
          Plains vs -> sendMessagesHeld s [ (encodeBytes (B.pack [plainTag]), B.pack v) | v <- vs ]
          Idle -> flushIdle s
        case step of
          Plain Urgent _ -> do
            frames <- reverse <$> readIORef out
            pure $ case mapM readFrame frames of
              Left why -> counterexample why False
              Right packets -> counterexample ("after step " ++ show (k :: Int)) $
                                 concat (concat packets) === offered (take k steps)
          _ -> pure (property True)
      pure (conjoin checks)

  it "sends messages given under one hold together, in order, once the last (urgent) is added" $ do
    let bodies = [ [fromIntegral k, 7] | k <- [1 .. 5 :: Int] ]
    out <- newIORef []
    s <- newSender (PacketPolicy True 4096 60) (\parts -> let c = B.copy (B.concat parts) in c `seq` modifyIORef out (c :))
    sendMessagesHeld s [ (encodeBytes (B.pack [plainTag]), B.pack v) | v <- bodies ]
    frames <- readIORef out
    map readFrame frames `shouldBe` [Right [ [GotPlain v] | v <- bodies ]]

  it "packs no more than a packet's capacity, unless one message is larger alone" $
    property $ forAll policies $ \policy steps -> ioProperty $ do
      frames <- drive policy steps
      pure $ conjoin
        [ counterexample (show (B.length f)) (B.length f <= 8 + policyCapacity policy || word32At f 4 == 1)
        | f <- frames ]

  it "gathers values into runs with chunking on, and sends each alone with it off" $
    property $ forAll policies $ \policy steps -> ioProperty $ do
      frames <- drive policy steps
      let Right packets = mapM readFrame frames
          valuesPer = [ length [ () | GotValue _ _ <- concat p ] | p <- packets ]
          runMessages = sum [ length [ m | m@(GotValue _ _ : _) <- p ] | p <- packets ]
          valueCount = length [ () | Value _ _ <- steps ]
          -- a run may end only where another message, an idle flush or a
          -- new key comes between, or where a packet ends
          starts = length [ () | (prev, Value k _) <- zip (Nothing : map Just steps) steps
                               , not (sameKey k prev) ]
          sameKey k prev = case prev of { Just (Value k' _) -> k' == k; _ -> False }
      pure $ if policyChunking policy
        then counterexample (show (runMessages, starts, length frames)) $
               cover 20 (runMessages < valueCount) "runs held several values" $
               runMessages <= starts + length frames
        else conjoin [ length p === 1 | p <- packets ] .&&. all (<= 1) valuesPer

  it "counts what it sent: packets, messages, values, bytes and the largest packet" $
    property $ forAll policies $ \policy steps -> ioProperty $ do
      (frames, st) <- driveCounting policy steps
      let Right packets = mapM readFrame frames
          messages = [ word32At f 4 | f <- frames ]
          values = map (length . concat) packets
      pure $ conjoin
        [ packetsSent st === length frames
        , messagesSent st === sum messages
        , valuesSent st === sum values
        , bytesSent st === sum [ B.length f - 4 | f <- frames ]
        , maxSentPerPacket st === maximum (0 : messages)
        , maxValuesSentPerPacket st === maximum (0 : values)
        , sum (M.elems (flushesBy st)) === length frames ]
