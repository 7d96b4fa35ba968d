-- | The evolve scheduler's start-of-call balancing ("Herd.Core.Evolve.Schedule"):
-- which held states to move where before anything starts, so that no
-- worker's queue is much longer than the mean.
--
-- A worker above the mean load gives states (never the one it will start
-- with, longest first) to the least loaded worker, as long as that lowers
-- the larger of the two loads and the giver stays above the mean by at
-- least half the state. Donors go most loaded first. Few moves, all
-- decided up front.
--
-- Pure from outside; inside, the loads live in an unboxed array and the
-- least loaded worker is found in an indexed binary heap, so a move costs
-- two heap updates and no allocation. (Sets and maps of thousands of
-- workers allocated a path of them per move, which a skewed start at
-- thousands of workers felt.)
module Herd.Core.Evolve.Balance
  ( balance
  ) where

import Control.Monad (when)
import Control.Monad.ST (ST, runST)
import Data.List (sortBy)
import qualified Data.Map.Strict as M
import Data.Ord (Down (..), comparing)
import qualified Data.Vector.Unboxed as U
import qualified Data.Vector.Unboxed.Mutable as MU
import Herd.Core.Base (WorkerId)
import Herd.Core.Evolve.Registry (StateId)

-- | Given each worker's held states, longest first, with their costs: the
-- moves, in the order decided, as (state, from, to, cost).
balance :: M.Map WorkerId [(Double, StateId)] -> [(StateId, WorkerId, WorkerId, Double)]
balance held
  | n < 2 = []
  | otherwise = runST $ do
      loads <- U.thaw loads0
      heap <- U.thaw (U.generate n id)   -- heap slot -> worker index
      slot <- U.thaw (U.generate n id)   -- worker index -> heap slot
      let h = Heap loads heap slot n
      mapM_ (siftDown h) [n `div` 2 - 1, n `div` 2 - 2 .. 0]
      moves <- mapM (give h) donors
      pure [ (s, workers U.! i, workers U.! t, c) | (i, given) <- zip (map fst donors) moves, (s, t, c) <- given ]
  where
    n = M.size held
    workers = U.fromListN n (M.keys held)
    lists = M.elems held
    loads0 = U.fromListN n (map (sum . map fst) lists)
    target = U.sum loads0 / fromIntegral n
    donors = [ (i, drop 1 ss) | (i, ss) <- sortBy (comparing (Down . (loads0 U.!) . fst)) (zip [0 ..] lists)
                              , loads0 U.! i > target ]
    -- one donor's candidates, in order; each either moves or stays
    give h (i, candidates) = go candidates []
      where
        go [] acc = pure (reverse acc)
        go ((c, s) : more) acc = do
          load <- MU.read (hLoads h) i
          if load <= target + c / 2 then go more acc else do
            lightest <- lightestExcept h i
            case lightest of
              Just (lt, t) | lt + c < load -> do
                setLoad h t (lt + c)
                setLoad h i (load - c)
                go more ((s, t, c) : acc)
              _ -> go more acc

-- An indexed min-heap of workers by (load, index).
data Heap s = Heap
  { hLoads :: !(MU.MVector s Double)
  , hHeap  :: !(MU.MVector s Int)
  , hSlot  :: !(MU.MVector s Int)
  , hSize  :: !Int
  }

-- Whether worker a comes before worker b: less loaded, or as loaded and
-- lower numbered (as a set of (load, worker) would order them).
before :: Heap s -> Int -> Int -> ST s Bool
{-# INLINE before #-}
before h a b = do
  la <- MU.read (hLoads h) a
  lb <- MU.read (hLoads h) b
  pure (la < lb || (la == lb && a < b))

-- The least loaded worker other than this one, with its load.
lightestExcept :: Heap s -> Int -> ST s (Maybe (Double, Int))
lightestExcept h i = do
  root <- MU.read (hHeap h) 0
  if root /= i then Just <$> withLoad root else
    -- the root is the donor: the next is one of its two children
    case hSize h of
      1 -> pure Nothing
      2 -> MU.read (hHeap h) 1 >>= fmap Just . withLoad
      _ -> do
        a <- MU.read (hHeap h) 1
        b <- MU.read (hHeap h) 2
        first <- before h a b
        Just <$> withLoad (if first then a else b)
  where withLoad w = (\l -> (l, w)) <$> MU.read (hLoads h) w

-- Change a worker's load and restore the heap's order.
setLoad :: Heap s -> Int -> Double -> ST s ()
setLoad h w load = do
  MU.write (hLoads h) w load
  at <- MU.read (hSlot h) w
  siftUp h at
  at' <- MU.read (hSlot h) w
  siftDown h at'

siftUp :: Heap s -> Int -> ST s ()
siftUp h at = when (at > 0) $ do
  let parent = (at - 1) `div` 2
  w <- MU.read (hHeap h) at
  p <- MU.read (hHeap h) parent
  up <- before h w p
  when up $ swap h at parent >> siftUp h parent

siftDown :: Heap s -> Int -> ST s ()
siftDown h at = do
  let l = 2 * at + 1
      r = l + 1
  smallest <- pick at l >>= \m -> pick m r
  when (smallest /= at) $ swap h at smallest >> siftDown h smallest
  where
    {-# INLINE pick #-}
    pick m c
      | c >= hSize h = pure m
      | otherwise = do
          wc <- MU.read (hHeap h) c
          wm <- MU.read (hHeap h) m
          first <- before h wc wm
          pure (if first then c else m)

swap :: Heap s -> Int -> Int -> ST s ()
swap h a b = do
  wa <- MU.read (hHeap h) a
  wb <- MU.read (hHeap h) b
  MU.write (hHeap h) a wb
  MU.write (hHeap h) b wa
  MU.write (hSlot h) wb a
  MU.write (hSlot h) wa b
