-- | Frames for fuzzing herd's two receivers: a corpus of well-formed
-- packets of every message type in each direction, and seeded mutations
-- of them (bit flips, byte changes, cuts, extensions, extreme lengths,
-- repeats, random bytes, and some left intact). Pure and deterministic:
-- one seed gives one frame, so a failure can be replayed.
module Herd.Fuzz.Mutate
  ( toMasterCorpus
  , toWorkerCorpus
  , mutate
  , mixSeed
  , sentinelFrame
  ) where

import Data.Bits (shiftR, xor, (.&.))
import qualified Data.ByteString as B
import qualified Data.Text as T
import Data.Word (Word64, Word8)
import GHC.Fingerprint (Fingerprint (..))
import Herd.Core.Base (TaskRef (..))
import Herd.Core.Wire (FromWorker (..), ToWorker (..))

-- | One message of every kind a worker sends, with plausible fields.
toMasterCorpus :: [FromWorker]
toMasterCorpus =
  [ Results 1 (word 7), Results 3 (B.concat (map word [1, 2, 3])), BatchDone 1 1000, TaskThrew 1 0 (T.pack "boom")
  , BatchRejected 1 (T.pack "unknown"), StreamOut 1 1 (word 5), StreamDone 1, StreamAborted 1 (T.pack "x")
  , StreamTaken 1 1, StateEvolved 1 100 [(2, word 9)], EvolveThrew 1 (T.pack "x"), EvolveRejected (T.pack "x")
  , StateReleased 1 (word 4), StateKept 1, StateMissing 1, StatesCleared, StateReplayed 1, Pong 1
  , ShareHeld 1, ShareDropped 1, ShareSpilled 1, BatchStopped 1
  , Forward 2 1 0 0 (word 3), GroupSent 1 0, GroupThrew 1 0 (T.pack "x"), PartHeld 1 0 0
  , PartitionDone 1 0 (word 3), PartitionThrew 1 0 (T.pack "x")
  , PartRan 1 0 (word 2), PartThrew 1 0 (T.pack "x"), PartMissing 1 0, GroupMissing 1 0, ForwardFile 2 1 0 0 8 (T.pack "/nonexistent/part")
  , WantWork, ChildrenHeld 2, StealGiven 1 1 0 (fakeRef "child") (word 3), StealNone 1, StolenDone 1 (word 3)
  , StolenThrew 1 (T.pack "x"), StolenDropped 1, ChildCounts 3 1 1 0 0, ChildrenAbandoned [1, 2] ]

-- | One message of every kind a master sends, naming this function.
toWorkerCorpus :: TaskRef -> [ToWorker]
toWorkerCorpus ref =
  [ RunBatch 1 ref 2, Args 2 (B.concat [word 1, word 2]), Shutdown, StreamOpen 1 ref, StreamIn 1 1 (word 3)
  , StreamEnd 1, StreamCredit 1 4, StreamClose 1, StatesReset, StateAdd 1 (word 5), EvolveWith ref
  , EvolveState 1 (word 6), StateRelease 1, StateReplay 1 (word 5) [(ref, word 1, 0)], Ping 1 B.empty
  , SharePart 1 8 (word 2), ShareDrop 1, HoldBudget 1024
  , GroupRun 1 0 ref 2 [(0, 1), (1, 2)] (word 0), PartIn 1 0 0 (word 3), PartitionCombine 1 0 ref 1
  , ExchangeEnd 1, StatesDrop [1, 2], BatchCancel 1, TaskDeadline 5000
  , PartRun 1 0 ref [1] 2 (word 4), PartsDrop [1, 2], GroupRunHeld 1 0 ref 2 [(0, 1)] 1, PartitionKeep 1 0 ref 1 2
  , PartInFile 1 0 0 8 (T.pack "/nonexistent/part")
  , StealAsk 1, StolenRun 1 ref (word 3), ChildDone 1 (word 3), ChildThrew 1 (T.pack "x"), ChildLost 1, StolenCancel 1 ]

-- A function no worker has, for a child a worker claims to give.
fakeRef :: String -> TaskRef
fakeRef name = TaskRef (Fingerprint 1 2) name (Fingerprint 3 4) (Fingerprint 5 6)

-- An Int as store encodes it (8 bytes, little-endian).
word :: Word64 -> B.ByteString
word w = B.pack [ fromIntegral (w `shiftR` (8 * k)) | k <- [0 .. 7] ]

-- | A frame no receiver accepts (too short to be a packet): it ends a
-- session, so the fuzzer knows its earlier frames were all read.
sentinelFrame :: B.ByteString
sentinelFrame = B.pack [0xFF, 0xFF, 0xFF]

-- | A well-mixed number from two (splitmix64's finaliser).
mixSeed :: Word64 -> Word64 -> Word64
mixSeed a b =
  let z0 = a * 0x9E3779B97F4A7C15 + b
      z1 = (z0 `xor` (z0 `shiftR` 30)) * 0xBF58476D1CE4E5B9
      z2 = (z1 `xor` (z1 `shiftR` 27)) * 0x94D049BB133111EB
  in z2 `xor` (z2 `shiftR` 31)

-- | A mutation of a well-formed frame, chosen by the seed.
mutate :: Word64 -> B.ByteString -> B.ByteString
mutate seed frame = case r 0 `mod` 8 of
  0 -> foldl (\b k -> flipBit (r (10 + k)) b) frame [0 .. r 1 `mod` 3]
  1 -> foldl (\b k -> setByte (r (20 + k)) (fromIntegral (r (30 + k))) b) frame [0 .. r 1 `mod` 4]
  2 -> B.take (at (r 2) (B.length frame)) frame
  3 -> frame <> randomBytes (r 3) (1 + fromIntegral (r 4 `mod` 64))
  4 -> overwrite (at (r 5) (max 1 (B.length frame - 3)))
                 (B.pack (extremes !! fromIntegral (r 6 `mod` fromIntegral (length extremes)))) frame
  5 -> randomBytes (r 7) (fromIntegral (r 8 `mod` 200))
  6 -> let i = at (r 9) (B.length frame)
           n = at (r 11) (B.length frame - i + 1)
       in B.take (i + n) frame <> B.drop i frame
  _ -> frame
  where
    r k = mixSeed seed k
    at x n = if n <= 0 then 0 else fromIntegral (x `mod` fromIntegral n)
    flipBit x b
      | B.null b = b
      | otherwise = let i = at x (B.length b)
                        bit = fromIntegral ((x `shiftR` 32) .&. 7) :: Int
                    in setAt i (B.index b i `xor` (2 ^ bit)) b
    setByte x v b
      | B.null b = b
      | otherwise = setAt (at x (B.length b)) v b
    setAt i v b = B.take i b <> B.singleton v <> B.drop (i + 1) b
    overwrite i bytes b = B.take i b <> B.take (B.length b - i) bytes <> B.drop (i + B.length bytes) b
    extremes = [[0xFF, 0xFF, 0xFF, 0xFF], [0x7F, 0xFF, 0xFF, 0xFF], [0, 0, 0, 0], [0x80, 0, 0, 0], [0, 0, 0, 1]]

randomBytes :: Word64 -> Int -> B.ByteString
randomBytes seed n = B.pack [ fromIntegral (mixSeed seed (fromIntegral k)) :: Word8 | k <- [0 .. n - 1] ]
