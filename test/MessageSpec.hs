{-# OPTIONS_GHC -Werror=incomplete-patterns #-}
{-# LANGUAGE ScopedTypeVariables #-}
-- | Every message of the protocol, both directions, round-trips through
-- its encoder and decoder. The generators are tied to the message types: a
-- constructor added without a generator makes 'toWorkerIndex' or
-- 'fromWorkerIndex' incomplete, which this module refuses to compile, and
-- one given an index but no generator fails the coverage test.
module MessageSpec (spec) where

import Control.Exception (SomeException, evaluate, try)
import Data.Bits (shiftL, xor)
import qualified Data.ByteString as B
import Data.List (nub, sort)
import Data.Word (Word64, Word8)
import qualified Data.Text as T
import GHC.Fingerprint (Fingerprint (..))
import Herd.Core.Base (TaskRef (..))
import Herd.Core.Master (features)
import Herd.Core.Master.Feature (Feature (..))
import Herd.Wire.Writer (encoderBytes)
import Herd.Core.Wire
import Herd.Core.Wire.Codec (Get, getCount, getSizedBytes, getWord64, getWord8, runGet)
import Herd.Core.Wire.Evolved (decodeEvolved)
import Herd.Wire.Encode (encodeFromWorker, encodeToWorker, evolvedEncoder)
import Control.Monad (replicateM)
import Test.Hspec
import Test.QuickCheck hiding (Args)

toWorkerIndex :: ToWorker -> Int
toWorkerIndex m = case m of
  RunBatch {} -> 0; Args {} -> 1; Shutdown -> 2; StreamOpen {} -> 3; StreamIn {} -> 4; StreamEnd {} -> 5
  StreamCredit {} -> 6; StreamClose {} -> 7; StatesReset -> 8; StateAdd {} -> 9; EvolveWith {} -> 10
  EvolveState {} -> 11; StateRelease {} -> 12; StateReplay {} -> 13; Ping {} -> 14
  SharePart {} -> 15; ShareDrop {} -> 16; HoldBudget {} -> 17
  GroupRun {} -> 18; PartIn {} -> 19; PartitionCombine {} -> 20; ExchangeEnd {} -> 21; StatesDrop {} -> 22
  BatchCancel {} -> 23; TaskDeadline {} -> 24
  PartRun {} -> 25; PartsDrop {} -> 26; GroupRunHeld {} -> 27; PartitionKeep {} -> 28
  PartsDirectory {} -> 29; PartInFile {} -> 30
  StealAsk {} -> 31; StolenRun {} -> 32; ChildDone {} -> 33; ChildThrew {} -> 34; ChildLost {} -> 35; StolenCancel {} -> 36

fromWorkerIndex :: FromWorker -> Int
fromWorkerIndex m = case m of
  Results {} -> 0; BatchDone {} -> 1; TaskThrew {} -> 2; BatchRejected {} -> 3; StreamOut {} -> 4
  StreamDone {} -> 5; StreamAborted {} -> 6; StreamTaken {} -> 7; StateEvolved {} -> 8; EvolveThrew {} -> 9
  EvolveRejected {} -> 10; StateReleased {} -> 11; StateKept {} -> 12; StateMissing {} -> 13
  StatesCleared -> 14; StateReplayed {} -> 15; Pong {} -> 16; ShareHeld {} -> 17
  ShareDropped {} -> 18; ShareSpilled {} -> 19
  Forward {} -> 20; GroupSent {} -> 21; GroupThrew {} -> 22; PartHeld {} -> 23; PartitionDone {} -> 24
  PartitionThrew {} -> 25; BatchStopped {} -> 26
  PartRan {} -> 27; PartThrew {} -> 28; PartMissing {} -> 29; GroupMissing {} -> 30; ForwardFile {} -> 31
  WantWork -> 32; ChildrenHeld {} -> 33; StealGiven {} -> 34; StealNone {} -> 35; StolenDone {} -> 36; StolenThrew {} -> 37; StolenDropped {} -> 38; ChildCounts {} -> 39; ChildrenAbandoned {} -> 40

bytes :: Gen B.ByteString
bytes = B.pack <$> resize 40 arbitrary

text :: Gen T.Text
text = T.pack <$> resize 20 arbitrary

ref :: Gen TaskRef
ref = TaskRef <$> fp <*> (T.unpack <$> text) <*> fp <*> fp
  where fp = Fingerprint <$> arbitrary <*> arbitrary

genToWorker :: Gen ToWorker
genToWorker = oneof
  [ RunBatch <$> arbitrary <*> ref <*> arbitrary, Args <$> arbitrary <*> bytes, pure Shutdown
  , StreamOpen <$> arbitrary <*> ref, StreamIn <$> arbitrary <*> arbitrary <*> bytes, StreamEnd <$> arbitrary
  , StreamCredit <$> arbitrary <*> arbitrary, StreamClose <$> arbitrary, pure StatesReset
  , StateAdd <$> arbitrary <*> bytes, EvolveWith <$> ref, EvolveState <$> arbitrary <*> bytes
  , StateRelease <$> arbitrary
  , StateReplay <$> arbitrary <*> bytes <*> resize 4 (listOf ((,,) <$> ref <*> bytes <*> arbitrary))
  , Ping <$> arbitrary <*> bytes, SharePart <$> arbitrary <*> arbitrary <*> bytes, ShareDrop <$> arbitrary, HoldBudget <$> arbitrary
  , GroupRun <$> arbitrary <*> arbitrary <*> ref <*> arbitrary <*> resize 5 (listOf arbitrary) <*> bytes
  , PartIn <$> arbitrary <*> arbitrary <*> arbitrary <*> bytes
  , PartitionCombine <$> arbitrary <*> arbitrary <*> ref <*> arbitrary, ExchangeEnd <$> arbitrary
  , StatesDrop <$> resize 6 (listOf arbitrary), BatchCancel <$> arbitrary, TaskDeadline <$> arbitrary
  , PartRun <$> arbitrary <*> arbitrary <*> ref <*> resize 4 (listOf arbitrary) <*> arbitrary <*> bytes
  , PartsDrop <$> resize 6 (listOf arbitrary)
  , GroupRunHeld <$> arbitrary <*> arbitrary <*> ref <*> arbitrary <*> resize 5 (listOf arbitrary) <*> arbitrary
  , PartitionKeep <$> arbitrary <*> arbitrary <*> ref <*> arbitrary <*> arbitrary
  , PartsDirectory <$> text, PartInFile <$> arbitrary <*> arbitrary <*> arbitrary <*> arbitrary <*> text
  , StealAsk <$> arbitrary, StolenRun <$> arbitrary <*> ref <*> bytes, ChildDone <$> arbitrary <*> bytes
  , ChildThrew <$> arbitrary <*> text, ChildLost <$> arbitrary, StolenCancel <$> arbitrary ]

genFromWorker :: Gen FromWorker
genFromWorker = oneof
  [ Results <$> arbitrary <*> bytes, BatchDone <$> arbitrary <*> arbitrary, TaskThrew <$> arbitrary <*> arbitrary <*> text
  , BatchRejected <$> arbitrary <*> text, StreamOut <$> arbitrary <*> arbitrary <*> bytes, StreamDone <$> arbitrary
  , StreamAborted <$> arbitrary <*> text, StreamTaken <$> arbitrary <*> arbitrary
  , StateEvolved <$> arbitrary <*> arbitrary <*> resize 5 (listOf ((,) <$> arbitrary <*> bytes))
  , EvolveThrew <$> arbitrary <*> text, EvolveRejected <$> text, StateReleased <$> arbitrary <*> bytes
  , StateKept <$> arbitrary, StateMissing <$> arbitrary, pure StatesCleared, StateReplayed <$> arbitrary
  , Pong <$> arbitrary, ShareHeld <$> arbitrary, ShareDropped <$> arbitrary
  , ShareSpilled <$> arbitrary
  , Forward <$> arbitrary <*> arbitrary <*> arbitrary <*> arbitrary <*> bytes, GroupSent <$> arbitrary <*> arbitrary
  , GroupThrew <$> arbitrary <*> arbitrary <*> text, PartHeld <$> arbitrary <*> arbitrary <*> arbitrary
  , PartitionDone <$> arbitrary <*> arbitrary <*> bytes, PartitionThrew <$> arbitrary <*> arbitrary <*> text
  , BatchStopped <$> arbitrary, PartRan <$> arbitrary <*> arbitrary <*> bytes
  , PartThrew <$> arbitrary <*> arbitrary <*> text, PartMissing <$> arbitrary <*> arbitrary
  , GroupMissing <$> arbitrary <*> arbitrary
  , ForwardFile <$> arbitrary <*> arbitrary <*> arbitrary <*> arbitrary <*> arbitrary <*> text
  , pure WantWork, ChildrenHeld <$> arbitrary, StealGiven <$> arbitrary <*> arbitrary <*> arbitrary <*> ref <*> bytes
  , StealNone <$> arbitrary, StolenDone <$> arbitrary <*> bytes, StolenThrew <$> arbitrary <*> text, StolenDropped <$> arbitrary, ChildCounts <$> arbitrary <*> arbitrary <*> arbitrary <*> arbitrary <*> arbitrary
  , ChildrenAbandoned <$> resize 6 (listOf arbitrary) ]

spec :: Spec
spec = describe "every protocol message" $ do
  it "from a worker is the business of at most one feature of the master's core" $
    forAll genFromWorker $ \m -> counterexample (show [ featureName f | f <- features, featureOwns f m ]) $
      length [ () | f <- features, featureOwns f m ] <= 1
  it "to a worker round-trips, whichever constructor" $
    forAll genToWorker $ \m -> ioProperty $ do
      b <- encoderBytes (encodeToWorker m)
      pure $ classify True (show (toWorkerIndex m)) (decodeToWorker b === Right m)
  it "to the master round-trips, whichever constructor" $
    forAll genFromWorker $ \m -> ioProperty $ do
      b <- encoderBytes (encodeFromWorker m)
      pure $ classify True (show (fromWorkerIndex m)) (decodeFromWorker b === Right m)
  it "decodes mutated messages (bit flips, cuts, bytes added) to a value or an error, never a crash" $
    forAll ((,) <$> genToWorker <*> genFromWorker) $ \(t, f) -> forAll arbitrary $ \(Mutation kind k bit extra) ->
      ioProperty $ do
        bt <- mutate kind k bit extra <$> encoderBytes (encodeToWorker t)
        bf <- mutate kind k bit extra <$> encoderBytes (encodeFromWorker f)
        -- the whole result is forced: a lazy field hiding an exception fails here
        rt <- try (evaluate (length (show (decodeToWorker bt))))
        rf <- try (evaluate (length (show (decodeFromWorker bf))))
        pure $ classify (kind == 0) "bit flip" $ classify (kind == 1) "cut" $ classify (kind == 2) "bytes added" $
          case (rt, rf) of
            (Right _, Right _) -> property True
            (Left (e :: SomeException), _) -> counterexample ("to worker: " ++ show e) False
            (_, Left (e :: SomeException)) -> counterexample ("to master: " ++ show e) False
  it "reads an evolved report on the direct path exactly as the general decoder does, damaged or not" $
    forAll ((,,) <$> arbitrary <*> arbitrary <*> resize 6 (listOf ((,) <$> arbitrary <*> bytes))) $ \(sid, busy, kids) ->
      forAll arbitrary $ \(Mutation kind k bit extra) -> ioProperty $ do
        b <- mutate kind k bit extra <$> encoderBytes (evolvedEncoder 8 sid busy kids)
        let general = either (const Nothing) Just (runGet generalEvolved b)
        pure $ classify (general == Nothing) "rejected" (decodeEvolved b === general)
  it "has a generator for every constructor" $ do
    ts <- generate (vectorOf 3000 genToWorker)
    fs <- generate (vectorOf 3000 genFromWorker)
    sort (nub (map toWorkerIndex ts)) `shouldBe` [0 .. 36]
    sort (nub (map fromWorkerIndex fs)) `shouldBe` [0 .. 40]

-- The report as the general decoder reads it (tag byte skipped).
generalEvolved :: Get (Word64, Word64, [(Word64, B.ByteString)])
generalEvolved = do
  _ <- getWord8
  sid <- getWord64
  busy <- getWord64
  n <- getCount 12
  kids <- replicateM n ((,) <$> getWord64 <*> getSizedBytes)
  pure (sid, busy, kids)

-- | One way to damage a message: which kind, where, which bit, what to add.
data Mutation = Mutation Int Int Int [Word8]
  deriving (Show)

instance Arbitrary Mutation where
  arbitrary = Mutation <$> choose (0, 2) <*> arbitrary <*> choose (0, 7) <*> resize 12 arbitrary

mutate :: Int -> Int -> Int -> [Word8] -> B.ByteString -> B.ByteString
mutate kind k bit extra b
  | B.null b = B.pack extra
  | otherwise =
      let i = k `mod` B.length b
      in case kind of
           0 -> B.take i b <> B.singleton (B.index b i `xor` (1 `shiftL` bit)) <> B.drop (i + 1) b
           1 -> B.take i b
           _ -> B.take i b <> B.pack extra <> B.drop i b
