-- | Divide and conquer over a cluster (Eden's @dc@ skeleton): the master
-- divides a problem until there are enough pieces to keep every worker
-- busy, the pieces run as one farm (each may use "Herd.Par" on its
-- worker), and the master combines the answers up the tree.
--
-- > nfibD = Divide { trivial = \(n, t) -> n <= t + 4, divide = \(n, t) -> [(n - 1, t), (n - 2, t)]
-- >                , combine = \_ [a, b] -> a + b + 1 }
-- > answer <- divideAndConquer cluster nfibD nfibTask (40, 20)
--
-- Promises: the answer is what solving the problem sequentially with the
-- same divide and combine gives (the farm's promises hold for the pieces:
-- each is answered exactly once, also when a worker dies); the division
-- stops at trivial problems, at 'piecesFor' the workers, or at
-- 'maxPieces', whichever comes first.
module Herd.Skeleton
  ( Divide (..)
  , divideAndConquer
  , divideAndConquerWith
  , piecesFor
  , maxPieces
  , DivTree (..)
  , divideTree
  , conquerTree
  ) where

import GHC.StaticPtr (StaticPtr)
import Herd

-- | How a problem divides and its answers combine (at the master).
data Divide a b = Divide
  { trivial :: a -> Bool        -- ^ solve this piece whole, on a worker
  , divide  :: a -> [a]         -- ^ its parts (at least one)
  , combine :: a -> [b] -> b    -- ^ the answer from the parts' answers, in order
  }

-- | Pieces aimed for on this many workers: 64 a worker on two, falling
-- to 16 a worker from eight workers on. A few workers need many pieces so
-- that pieces of unequal cost even out (mandelbrot's bands of rows on
-- two workers: 16 a worker left one idle for the last pieces, 64 did
-- not); many workers need fewer, each bigger, because every piece is a
-- batch the master hands out and answers (a tree of 100,000 sleeping
-- leaves on 1,024 simulated workers was bound by the master at 64 a
-- worker, and 16 evened out the pieces' unequal leaf counts better than 8).
piecesFor :: Int -> Int
piecesFor workers = n * max 16 (128 `div` n)
  where n = max 1 workers

-- | The most pieces a division makes, whatever the cluster's size.
maxPieces :: Int
maxPieces = 100000

-- | A problem divided: pieces at the leaves, each node keeping its
-- problem for the combination.
data DivTree a
  = Piece a
  | Parts a [DivTree a]
  deriving (Eq, Show)

-- | Divide level by level, every non-trivial piece of a level at once,
-- until there are at least this many pieces (or only trivial ones, or
-- 'maxPieces' would be passed).
divideTree :: Divide a b -> Int -> a -> DivTree a
divideTree d want root = go (Piece root)
  where
    go t
      | pieces t >= want = t
      | otherwise =
          let t' = deepen t
          in if pieces t' == pieces t || pieces t' > maxPieces then t else go t'
    deepen (Piece a)
      | trivial d a = Piece a
      | otherwise = case divide d a of
          [] -> Piece a
          parts -> Parts a (map Piece parts)
    deepen (Parts a ts) = Parts a (map deepen ts)
    pieces (Piece _) = 1 :: Int
    pieces (Parts _ ts) = sum (map pieces ts)

-- | Fill the pieces with their answers (given in the order of the leaves,
-- left to right) and combine up the tree.
conquerTree :: Divide a b -> DivTree a -> [b] -> b
conquerTree d tree answers = fst (go tree answers)
  where
    go (Piece _) (b : bs) = (b, bs)
    go (Piece _) [] = error "Herd.Skeleton.conquerTree: fewer answers than pieces"
    go (Parts a ts) bs =
      let step (acc, rest) t = let (b, rest') = go t rest in (b : acc, rest')
          (revs, rest) = foldl step ([], bs) ts
      in (combine d a (reverse revs), rest)

-- | Divide at the master until there are 'piecesFor' the workers' pieces, solve
-- the pieces with the task as one farm, combine at the master.
divideAndConquer :: Cluster -> Divide a b -> StaticPtr (Task a b) -> a -> IO b
divideAndConquer cluster d t problem = do
  n <- clusterWorkerCount cluster
  divideAndConquerWith (piecesFor n) cluster d t problem

-- | 'divideAndConquer' aiming for this many pieces.
divideAndConquerWith :: Int -> Cluster -> Divide a b -> StaticPtr (Task a b) -> a -> IO b
divideAndConquerWith want cluster d t problem = do
  let tree = divideTree d want problem
  answers <- farm cluster t (leaves tree)
  pure (conquerTree d tree answers)
  where
    leaves (Piece a) = [a]
    leaves (Parts _ ts) = concatMap leaves ts
