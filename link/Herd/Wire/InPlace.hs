-- | Results written over their own arguments. When every argument and
-- every result of a farm has one encoded width, and it is the same, the
-- job's argument table ("Herd.Wire.ArgTable") can also be its result arena:
-- a task's argument is never needed again once its result is final. A
-- farm of tiny tasks then touches half the fresh memory, and the first
-- touch of memory is what bounds such a farm on a virtual machine.
--
-- A result is not final when it arrives: its worker may be lost before
-- its batch ends, and the batch is then sent again, arguments and all. So
-- runs of results are held as they came (slices of the packets, no copy)
-- and copied over their tasks' arguments only once the scheduler accepts
-- their tasks ('commitRanges').
--
-- The slices keep their packets alive and rely on their bytes staying put:
-- the master never gives a packet's buffer back for reuse (only a worker
-- does, 'Herd.Transport.recycleFrame', for packets it handled at once).
--
-- Promises: an accepted task's slot holds a result staged for it; a slot
-- is written only when its task is accepted; a task accepted without a
-- held result is reported, never left holding its argument as a result.
module Herd.Wire.InPlace
  ( Pending
  , newPending
  , holdRun
  , commitRanges
  , UnkeptResults (..)
  , pendingPieces
  ) where

import Control.Exception (Exception (..))
import Control.Monad (foldM, forM_)
import qualified Data.ByteString as B
import qualified Data.ByteString.Unsafe as BU
import Data.IORef
import qualified Data.IntMap.Strict as IM
import Data.List (foldl')
import Foreign.ForeignPtr (ForeignPtr, withForeignPtr)
import Foreign.Marshal.Utils (copyBytes)
import Foreign.Ptr (castPtr, plusPtr)
import Data.Word (Word8)
import Herd.Core.Base (Range (..))

-- | Runs of results of one width held until their tasks are final: by
-- first task, the task after the last and the results' bytes; and the
-- most tasks one piece has held, which bounds where a piece overlapping
-- given tasks can start.
data Pending = Pending !Int !(IORef (IM.IntMap (Int, B.ByteString))) !(IORef Int)

-- | Nothing held, for results of this width (bytes).
newPending :: Int -> IO Pending
newPending width = Pending width <$> newIORef IM.empty <*> newIORef 0

-- | Hold a run of results already checked to decode: its tasks' ranges in
-- order, and exactly their results' bytes. Where a piece for the same
-- first task is held already (a batch that ran twice, cut differently),
-- the longer stays: tasks are pure, so both hold the same results, and
-- the longer keeps every task it covered covered.
holdRun :: Pending -> [Range] -> B.ByteString -> IO ()
holdRun (Pending w ref longest) ranges bytes = do
  modifyIORef' ref (\m -> go m 0 ranges)
  modifyIORef' longest (\l -> maximum (l : [ hi - lo | Range lo hi <- ranges ]))
  where
    go m _ [] = m
    go m off (Range lo hi : rest)
      | hi <= lo = go m off rest
      | otherwise =
          let n = (hi - lo) * w
          in go (IM.insertWith longer lo (hi, B.take n (B.drop off bytes)) m) (off + n) rest
    longer new old = if fst new >= fst old then new else old

-- | Tasks accepted as final with no result held for them (a fault of
-- herd's, never of the caller's): their ranges.
newtype UnkeptResults = UnkeptResults [Range]
  deriving (Eq, Show)

instance Exception UnkeptResults where
  displayException (UnkeptResults gaps) =
    "tasks " ++ unwords [ show lo ++ "-" ++ show (hi - 1) | Range lo hi <- gaps ]
    ++ " were accepted, but no results for them were kept"

-- | These tasks are final: copy their held results over their arguments in
-- the table (slot @i@ at @i@ times the width) and forget the pieces that
-- lie wholly inside them. 'Left' names tasks accepted with no result held
-- (nothing is written for those).
commitRanges :: Pending -> ForeignPtr Word8 -> [Range] -> IO (Either UnkeptResults ())
commitRanges (Pending w ref longest) table ranges = do
  reach <- readIORef longest
  gaps <- withForeignPtr table $ \base -> do
    let one (m, bad) (Range lo hi)
          | hi <= lo = pure (m, bad)
          | otherwise = do
              let (overlapping, m') = takeRange reach lo hi m
              forM_ overlapping $ \(from, to, s, bytes) ->
                BU.unsafeUseAsCString bytes $ \src ->
                  copyBytes (base `plusPtr` (from * w)) (castPtr src `plusPtr` ((from - s) * w)) ((to - from) * w)
              pure (m', if covered overlapping < hi - lo then Range lo hi : bad else bad)
    held <- readIORef ref
    (held', bad) <- foldM one (held, []) ranges
    writeIORef ref held'
    pure (reverse bad)
  pure $ case gaps of
    [] -> Right ()
    _ -> Left (UnkeptResults gaps)

-- The held pieces overlapping tasks lo to hi - 1, in order of their first
-- task, each clipped to them (first, end, the piece's own first task, its
-- bytes); and the pieces left once those wholly inside are dropped. A
-- piece overlapping them starts before hi and at most the longest piece
-- before lo (pieces of two runs may overlap when a slow batch's copy was
-- cut differently). The pieces inside are cut out of the map whole, not
-- deleted one by one: a batch of thousands of one-task pieces (chunking
-- off) cost a path of the map per task that way.
takeRange :: Int -> Int -> Int -> IM.IntMap (Int, B.ByteString)
          -> ([(Int, Int, Int, B.ByteString)], IM.IntMap (Int, B.ByteString))
takeRange reach lo hi m = (clip (earlier ++ inRange), kept)
  where
    (below, atLo, fromLo) = IM.splitLookup lo m
    (inner, atHi, above) = IM.splitLookup hi fromLo
    inRange = maybe id (\p -> ((lo, p) :)) atLo (IM.toAscList inner)
    earlier = reverse (takeWhile (\(s, _) -> s >= lo - reach) (IM.toDescList below))
    clip ps = [ (max lo s, min hi e, s, bytes) | (s, (e, bytes)) <- ps, e > lo ]
    kept = IM.unions [ below, IM.fromDistinctAscList [ x | x@(_, (e, _)) <- inRange, e > hi ]
                     , maybe IM.empty (IM.singleton hi) atHi, above ]

-- How many tasks the clipped pieces (in order of their first task) cover,
-- each counted once.
covered :: [(Int, Int, Int, B.ByteString)] -> Int
covered = fst . foldl' add (0, minBound)
  where
    add (total, reached) (from, to, _, _)
      | to <= reached = (total, reached)
      | otherwise = (total + to - max from reached, to)

-- | How many pieces are held (for tests).
pendingPieces :: Pending -> IO Int
pendingPieces (Pending _ ref _) = IM.size <$> readIORef ref
