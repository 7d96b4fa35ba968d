-- | A heap reserve: memory a process touches once, when its links are
-- up, and then lets go, so that the collections that follow copy into
-- pages the process already has. The master takes one when its cluster
-- has started ('Herd.Settings.configMasterHeapReserve'); a simulated host
-- ("Herd.Simulate.Host") when its workers have joined; a worker before it
-- joins ('defaultWorkerHeapReserve', 'Herd.Settings.configWorkerHeapReserve'),
-- or, set to none, it only warms its nursery ('warmNursery').
--
-- Why: on a virtual machine a page's first touch is dear, and a master's
-- collections keep reaching for fresh pages as the live set of a call
-- moves; those faults happen inside the collector, mostly at the start of
-- each evolve call, when every worker waits. A reserve turns them into
-- faults taken once, before any work. The memory touched stays in the
-- runtime's pool of free blocks (it gives memory back only beyond a few
-- times the live data, which a master of hundreds of links has). The
-- reserve asks the kernel for transparent huge pages (where its mode is
-- "madvise"), so touching it costs one fault per 2 MiB, not per 4 KiB.
-- (The figures behind each default are in the benchmark docs and the
-- commit history.)
--
-- Promises: a reserve of 0, or one whose floor is no higher than the
-- runtime's minimum old generation already is (an earlier reserve's, or
-- a larger @+RTS -O@ given by hand), touches nothing and collects nothing; the
-- reserve is garbage before the caller goes on (it warms the runtime's
-- free memory, it is not kept); nothing here changes a result.
module Herd.Sys.HeapReserve
  ( heapReserveBytes
  , reserveHeap
  , autoReserveLeast
  , autoReservePerWorker
  , autoReserveMost
  , oldGenerationFloor
  , warmNursery
  , defaultWorkerHeapReserve
  , parseWorkerHeapReserve
  , heapReserveMostMiB
  ) where

import Control.Exception (evaluate)
import Data.Char (isDigit)
import Control.Monad (void, when)
import qualified Data.ByteString as B
import qualified Data.ByteString.Internal as BI
import Data.Word (Word8)
import Foreign.C.Types (CInt (..), CSize (..))
import Foreign.Marshal.Utils (fillBytes)
import Foreign.Ptr (Ptr, ptrToWordPtr, wordPtrToPtr)
import System.Info (os)
import GHC.RTS.Flags (getGCFlags, minAllocAreaSize)
import System.Mem (performMajorGC)

-- | The reserve for a configured size in MiB ('Nothing': chosen by the
-- number of workers connected at the start), in bytes.
heapReserveBytes :: Maybe Int -> Int -> Int
heapReserveBytes (Just mib) _ = max 0 mib * 1024 * 1024
heapReserveBytes Nothing workers = min autoReserveMost (max autoReserveLeast (workers * autoReservePerWorker))

-- | The smallest reserve chosen by default, whatever the workers: 128
-- MiB. Even a farm on two workers runs faster with it (@herd bench
-- throughput@; see 'oldGenerationFloor').
autoReserveLeast :: Int
autoReserveLeast = 128 * 1024 * 1024

-- | Bytes of reserve per worker by default (at 512 workers, a smaller
-- reserve slowed an evolve call's master and a larger one did not help).
autoReservePerWorker :: Int
autoReservePerWorker = 256 * 1024

-- | The largest reserve chosen by default: 256 MiB, whose first touches on
-- huge pages are small beside the start of the thousand workers that ask
-- for it.
autoReserveMost :: Int
autoReserveMost = 256 * 1024 * 1024

-- | Touch this many bytes of heap, then collect with them dead, so the
-- runtime keeps the pages as free blocks; and allocate a nursery's worth
-- of short-lived data first, so every page of the allocation area has
-- been touched too. (A simulated host allocates little while its workers
-- join: without this its nursery was first touched in the first call.)
--
-- The runtime's minimum old generation (@+RTS -O@) is first raised to a
-- quarter of the reserve ('oldGenerationFloor'), unless it is larger: a
-- major collection gives memory back only beyond about four times the
-- larger of that and the live data, so the reserve stays; and the old
-- generation is collected before it outgrows the reserve.
reserveHeap :: Int -> IO ()
reserveHeap bytes = do
  -- once per process is enough: with the floor raised, the runtime keeps
  -- what an earlier reserve touched (a test run starts hundreds of
  -- clusters). The runtime's own floor says how large a reserve was
  -- touched before: it is raised only by a larger reserve.
  floorBefore <- c_raiseMinOldGen 0
  when (oldGenerationFloor bytes `div` rtsBlock > fromIntegral floorBefore `div` rtsBlock) $ do
      _ <- c_raiseMinOldGen (fromIntegral (oldGenerationFloor bytes))
      warmNursery
      -- one pinned block: filling it touches every page once (pieces of a
      -- megabyte, held until the last was filled, faulted again later)
      block <- BI.create bytes $ \p -> do
        adviseHugePages p bytes
        fillBytes p 1 bytes
      _ <- evaluate (B.last block)
      performMajorGC

-- The runtime's block: its floor is counted in these.
rtsBlock :: Int
rtsBlock = 4096

-- | The minimum old generation a reserve of this many bytes asks for: a
-- quarter of it. Without a floor the runtime gave the reserve back at its
-- next major collection; with half of it the old generation outgrew the
-- reserve (both slower in @herd bench throughput@).
oldGenerationFloor :: Int -> Int
oldGenerationFloor bytes = bytes `div` 4

foreign import ccall unsafe "herd_raise_min_old_gen"
  c_raiseMinOldGen :: CSize -> IO CSize

-- Ask for transparent huge pages over the whole 2 MiB pages inside this
-- range (Linux; advice only, and nothing elsewhere): the first touch of a
-- huge page costs one fault where 512 small pages cost 512.
adviseHugePages :: Ptr Word8 -> Int -> IO ()
adviseHugePages p n
  | os /= "linux" = pure ()
  | otherwise = do
      let huge = 2 * 1024 * 1024
          start = (ptrToWordPtr p + huge - 1) `div` huge * huge
          end = (ptrToWordPtr p + fromIntegral n) `div` huge * huge
      when (end > start) $
        void (c_madvise (wordPtrToPtr start) (fromIntegral (end - start)) madvHugePage)

-- MADV_HUGEPAGE on Linux.
madvHugePage :: CInt
madvHugePage = 14

foreign import ccall unsafe "madvise"
  c_madvise :: Ptr Word8 -> CSize -> CInt -> IO CInt

-- | MiB of heap a worker touches before it joins, by default: none. A
-- worker's own live data is small, so a major collection gives back all
-- but a few MiB and the next megabytes of messages are first touches
-- again; a reserve of 64 MiB keeps about that much. It cut the page
-- faults and the time of @herd bench echo@ with large items, but slowed
-- @herd bench bandwidth@ over TCP, so it is not on by default.
defaultWorkerHeapReserve :: Int
defaultWorkerHeapReserve = 0

-- | The largest heap reserve a setting may ask for, master's or worker's:
-- 65536 MiB.
heapReserveMostMiB :: Int
heapReserveMostMiB = 65536

-- | A worker heap reserve in MiB, as text (an environment variable):
-- 0 (none) to 'heapReserveMostMiB'.
parseWorkerHeapReserve :: String -> Either String Int
parseWorkerHeapReserve t
  | not (null t), length t <= 6, all isDigit t, read t <= heapReserveMostMiB = Right (read t)
  | otherwise = Left ("not a heap reserve from 0 to " ++ show heapReserveMostMiB ++ " MiB: " ++ show t)

-- | Allocate a nursery's worth of short-lived data, so that every page of
-- the allocation area has been touched once.
warmNursery :: IO ()
warmNursery = do
  nursery <- (* 4096) . fromIntegral . minAllocAreaSize <$> getGCFlags
  _ <- evaluate (length (countdown (nursery `div` 24)))   -- at least 24 bytes a cell
  pure ()

-- A list of this many cells, made as it is consumed (each a cons cell
-- and its number: garbage at once, but allocated in the nursery).
countdown :: Int -> [Int]
countdown 0 = []
countdown n = (n `mod` 16) : countdown (n - 1)
{-# NOINLINE countdown #-}
