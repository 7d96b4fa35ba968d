{-# LANGUAGE StaticPointers #-}
-- | The functions "DatasetSpec" runs on datasets' partitions.
module DatasetTasks
  ( numbersGen
  , tripled
  , sumByResidue
  , countByResidue
  , joined
  , slowTripled
  , blockGen
  , labelsGen
  , blockSum
  , numbersFile
  , mapSize
  , numbersOf
  , residues
  , cutBlocks
  , workerPid
  , refuseSeven
  ) where

import Control.Concurrent (threadDelay)
import qualified Data.ByteString.Char8 as BC
import qualified Data.Map.Strict as M
import qualified Data.Vector.Unboxed as VU
import GHC.StaticPtr (StaticPtr)
import Herd.Dataset
import System.IO.Unsafe (unsafePerformIO)
import System.Posix.Process (getProcessID)

-- | Partition @j@ of @n@ of the numbers up to the top.
numbersOf :: Int -> Int -> Int -> [Int]
numbersOf top n j = [j, j + n .. top]

-- | The keys the pipeline's shuffles use.
residues :: Int -> Int
residues x = x `mod` 7

-- | The numbers up to the argument, dealt round the partitions.
numbersGen :: StaticPtr (DatasetGen Int [Int])
numbersGen = static (partitionGen numbersOf)

-- | Every number times three.
tripled :: StaticPtr (DatasetMap [Int] [Int])
tripled = static (partitionMap (map (* 3)))

-- | 'tripled', after 300 ms per partition.
slowTripled :: StaticPtr (DatasetMap [Int] [Int])
slowTripled = static (partitionMap (\xs -> unsafePerformIO (threadDelay 300000) `seq` map (* 3) xs))

-- | The numbers summed per residue mod 7.
sumByResidue :: StaticPtr (Shuffler [Int] [(Int, Int)] (M.Map Int Int))
sumByResidue = static (keyedShuffler (\x -> [(residues x, x)]) (+))

-- | The numbers counted per residue mod 7.
countByResidue :: StaticPtr (Shuffler [Int] [(Int, Int)] (M.Map Int Int))
countByResidue = static (keyedShuffler (\x -> [(residues x, 1)]) (+))

-- | Two co-partitioned maps joined on their keys.
joined :: StaticPtr (DatasetZip (M.Map Int Int) (M.Map Int Int) (M.Map Int (Int, Int)))
joined = static (partitionZip (M.intersectionWith (,)))

-- | How many keys a partition holds.
mapSize :: StaticPtr (DatasetQuery (M.Map Int Int) () Int)
mapSize = static (partitionQuery (\m () -> M.size (m :: M.Map Int Int)))

-- | Blocks of this many doubles, made where they are held.
blockGen :: StaticPtr (DatasetGen Int (VU.Vector Double))
blockGen = static (partitionGen (\len _ j -> VU.generate len (\i -> fromIntegral (i + j) :: Double)))

-- | Partition @j@ as a byte string naming it: pinned bytes, which the
-- runtime cannot put in a compact region.
labelsGen :: StaticPtr (DatasetGen Int BC.ByteString)
labelsGen = static (partitionGen (\k _ j -> BC.pack (concat (replicate k ("part " ++ show j ++ ";")))))

-- | A file of whole numbers, one per line, read where its partition is
-- held, as a block of doubles.
numbersFile :: StaticPtr (DatasetGen [FilePath] (VU.Vector Double))
numbersFile = static (partitionRead (\_ bytes -> VU.fromList [ fromIntegral n :: Double | l <- BC.lines bytes, Just (n, _) <- [BC.readInt l] ]))

-- | A block's sum.
blockSum :: StaticPtr (DatasetQuery (VU.Vector Double) () Double)
blockSum = static (partitionQuery (\v () -> VU.sum v))

-- | Each block cut into @n@ equal runs, run @j@ of every block joined in
-- block order as output partition @j@.
cutBlocks :: StaticPtr (Shuffler (VU.Vector Double) (VU.Vector Double) (VU.Vector Double))
cutBlocks = static (shuffler (\n v -> [ VU.slice (VU.length v * j `div` n) (VU.length v * (j + 1) `div` n - VU.length v * j `div` n) v
                                      | j <- [0 .. n - 1] ]) (VU.concat :: [VU.Vector Double] -> VU.Vector Double))

-- | Each worker's process id, beside twice the argument.
workerPid :: StaticPtr (EveryWorker Int (Int, Int))
workerPid = static (onEachWorker (\x -> (\pid -> (fromIntegral pid, 2 * x)) <$> getProcessID))

-- | A partition with a seven in it throws.
refuseSeven :: StaticPtr (DatasetMap [Int] [Int])
refuseSeven = static (partitionMap (\xs -> if 7 `elem` xs then error "a seven" else xs))
