{-# LANGUAGE StaticPointers #-}
-- | Static tasks used by the integration tests. They live outside Main so
-- their static pointers link under optimisation.
module TestTasks
  ( squareTask
  , sleeperTask
  , givesUpTask
  , failAt13Task
  , exitAt13Task
  , sleepySquareTask
  , bigResultTask
  , byteSumTask
  , byteSumEvolver
  , spinTask
  , unitTask
  , runningSumProcess
  , failAt5Process
  , countEvolver
  , slowEvolver
  , SlowToDecode (..)
  , decodeStarted
  , decodeGate
  , memoryHogTask
  , growingHogTask
  , sleepMsTask
  , slowOnceTask
  , slowToDecodeTask
  , exitEvolver
  , sharedIndexTask
  , showReducer
  , slowCountReducer
  , slowCountPairs
  , orderedKeyedReducer
  , bigPartReducer
  , bigPartBytes
  , throwingKeyedReducer
  , refSquare
  , refAddAll
  , rendezvousEvolver
  , rendezvousRef
  , refSlowInc
  , refPlus
  , refFailAt13
  , refSlowFailAt13
  ) where

import Control.Concurrent (threadDelay)
import Control.Concurrent.MVar (MVar, newEmptyMVar, readMVar, tryPutMVar)
import Control.Exception (evaluate)
import Control.Monad.IO.Class (liftIO)
import Data.Store (Size (..), Store (..))
import qualified Data.ByteString as B
import qualified Data.ByteString.Char8 as BC
import GHC.StaticPtr (StaticPtr)
import Herd
import Herd.Par (get, runPar, spawnTask)
import System.Environment (lookupEnv)
import System.Exit (ExitCode (..))
import System.IO.Unsafe (unsafePerformIO)
import System.Directory (doesFileExist)
import System.Posix.Process (exitImmediately)

square :: Int -> Int
square x = x * x

failAt13 :: Int -> Int
failAt13 x
  | x == 13 = error "unlucky thirteen"
  | otherwise = x + 1

-- A square that takes about the given milliseconds of wall time, so a test
-- can kill a worker while tasks are in flight.
sleepySquare :: (Int, Int) -> Int
sleepySquare (ms, x) = unsafePerformIO (threadDelay (ms * 1000) >> pure (x * x))
{-# NOINLINE sleepySquare #-}

-- A loop that allocates nothing and never yields: a worker running it
-- cannot run Haskell threads until it ends.
spin :: Int -> Int
spin n = go n 0
  where
    go :: Int -> Int -> Int
    go 0 acc = acc
    go k acc = go (k - 1) (acc + k `mod` 7)

-- | A number whose decoding takes 200 ms (its encoding is an Int's): the
-- results of 'slowToDecodeTask', for the test that a slow decoder holds
-- up only its own job: decoding one (on the master, by the caller) says
-- so in 'decodeStarted' and then waits until 'decodeGate' is open.
newtype SlowToDecode = SlowToDecode Int deriving (Eq, Show)

instance Store SlowToDecode where
  -- variable in size as far as store knows, so the farm decodes each
  -- result as its run arrives (one-width results stay encoded till read)
  size = VarSize (const 8)
  poke (SlowToDecode x) = poke x
  peek = do
    x <- peek
    liftIO $ do
      _ <- tryPutMVar decodeStarted ()
      readMVar decodeGate
    pure (SlowToDecode x)

-- | Filled when the first 'SlowToDecode' starts decoding (a test's own
-- signal, in the test's process).
decodeStarted :: MVar ()
decodeStarted = unsafePerformIO newEmptyMVar
{-# NOINLINE decodeStarted #-}

-- | Empty until the test lets 'SlowToDecode' results decode.
decodeGate :: MVar ()
decodeGate = unsafePerformIO newEmptyMVar
{-# NOINLINE decodeGate #-}

-- | Its argument, as a result that takes 200 ms to decode.
slowToDecodeTask :: StaticPtr (Task Int SlowToDecode)
slowToDecodeTask = static (named "slowToDecode" (task SlowToDecode))

-- Its input back; a negative input -n first holds n MiB resident for two
-- seconds (written, so every page is touched), longer than the master
-- takes to see it.
memoryHog :: Int -> Int
memoryHog n
  | n >= 0 = n
  | otherwise = unsafePerformIO $ do
      let held = B.replicate (negate n * 1024 * 1024) 7
      _ <- evaluate (B.length held)
      threadDelay 2000000
      pure (fromIntegral (B.last held))
{-# NOINLINE memoryHog #-}

-- | 'memoryHog' as a task: for the memory limit's test.
memoryHogTask :: StaticPtr (Task Int Int)
memoryHogTask = static (named "memoryHog" (task memoryHog))

-- Its input back after 5 ms; a negative input -n first grows to n MiB
-- resident over a second (a tenth at a time, each written), then holds it
-- for two seconds: slow enough to look like a straggler before it passes
-- a limit.
growingHog :: Int -> Int
growingHog n
  | n >= 0 = unsafePerformIO (threadDelay 5000 >> pure n)
  | otherwise = unsafePerformIO $ do
      let piece = negate n * 1024 * 1024 `div` 10
      held <- mapM (\k -> do
                      let b = B.replicate piece (fromIntegral k)
                      _ <- evaluate (B.length b)
                      threadDelay 100000
                      pure b) [1 .. 10 :: Int]
      threadDelay 2000000
      pure (sum (map (fromIntegral . B.last) held))
{-# NOINLINE growingHog #-}

-- | 'growingHog' as a task: for speculation's memory test.
growingHogTask :: StaticPtr (Task Int Int)
growingHogTask = static (named "growingHog" (showingInputs (task growingHog)))

-- Its input back after that many milliseconds asleep (a negative input:
-- at once).
sleepMs :: Int -> Int
sleepMs n = unsafePerformIO (threadDelay (max 0 n * 1000) >> pure n)
{-# NOINLINE sleepMs #-}

-- | 'sleepMs' as a task: for cancellation's tests.
sleepMsTask :: StaticPtr (Task Int Int)
sleepMsTask = static (named "sleepMs" (task sleepMs))

-- Its input back; a negative input sleeps 30 s the first time it runs
-- (the first to create its marker file in $HERD_TEST_SLOW_ONCE) and
-- answers at once after that: a straggler whose copy wins.
slowOnce :: Int -> Int
slowOnce n
  | n >= 0 = n
  | otherwise = unsafePerformIO $ do
      dir <- maybe "/tmp" id <$> lookupEnv "HERD_TEST_SLOW_ONCE"
      let marker = dir ++ "/slow-once-" ++ show (negate n)
      seen <- doesFileExist marker
      if seen then pure n else writeFile marker "" >> threadDelay 30000000 >> pure n
{-# NOINLINE slowOnce #-}

-- | 'slowOnce' as a task.
slowOnceTask :: StaticPtr (Task Int Int)
slowOnceTask = static (named "slowOnce" (task slowOnce))

-- | Square an Int.
squareTask :: StaticPtr (Task Int Int)
squareTask = static (named "square" (task square))

-- | Throws on 13.
failAt13Task :: StaticPtr (Task Int Int)
failAt13Task = static (named "failAt13" (showingInputs (task failAt13)))

-- A task whose input 13 makes the worker process exit at once, as a
-- crash in a C library or the out-of-memory killer would end it.
exitAt13 :: Int -> Int
exitAt13 x
  | x == 13 = unsafePerformIO (exitImmediately (ExitFailure 9) >> pure 0)
  | otherwise = x + 1
{-# NOINLINE exitAt13 #-}

-- | Ends its worker's process on 13.
exitAt13Task :: StaticPtr (Task Int Int)
exitAt13Task = static (named "exitAt13" (task exitAt13))

-- | Slow square.
-- Three million bytes of one letter (chosen by the argument), after a
-- short sleep, so a test can kill a worker in the middle of sending them.
bigResult :: Int -> B.ByteString
bigResult i = unsafePerformIO (threadDelay 20000 >> pure (BC.replicate 3000000 (toEnum (fromEnum 'a' + i `mod` 26))))
{-# NOINLINE bigResult #-}

bigResultTask :: StaticPtr (Task Int B.ByteString)
bigResultTask = static (named "bigResult" (task bigResult))

-- The sum of a string's bytes.
byteSum :: B.ByteString -> Int
byteSum = B.foldl' (\k w -> k + fromIntegral w) 0

-- | 'byteSum' as a task: large arguments, small results.
byteSumTask :: StaticPtr (Task B.ByteString Int)
byteSumTask = static (named "byteSum" (task byteSum))

-- An evolve step whose states are strings: the state stays as it is and
-- reports its byte sum plus the input.
byteSumStep :: B.ByteString -> Int -> [(B.ByteString, Int)]
byteSumStep s k = [(s, byteSum s + k)]

-- | 'byteSumStep' as an evolve function: large states held by workers.
byteSumEvolver :: StaticPtr (Evolver B.ByteString Int Int)
byteSumEvolver = static (evolver byteSumStep)

sleepySquareTask :: StaticPtr (Task (Int, Int) Int)
sleepySquareTask = static (named "sleepySquare" (task sleepySquare))

-- | A task whose arguments and results take no bytes at all.
unitTask :: StaticPtr (Task () ())
unitTask = static (named "unit" (task id))

-- | Long non-allocating loop.
spinTask :: StaticPtr (Task Int Int)
spinTask = static (named "spin" (task spin))

-- | Running sums of a stream: each output depends on all inputs so far.
runningSumProcess :: StaticPtr (Process Int Int)
runningSumProcess = static (named "runningSum" (process (scanl1 (+))))

failAt5 :: [Int] -> [Int]
failAt5 = map (\x -> if x == 5 then error "five is not allowed" else x)

-- | A stream process that throws on the element 5.
failAt5Process :: StaticPtr (Process Int Int)
failAt5Process = static (named "failAt5" (process failAt5))

-- An evolve step for the tests: a state is a number; input k makes k
-- children (state + j for j in 0..k-1), each reporting state * 10 + j;
-- input -1 throws.
countStep :: Int -> Int -> [(Int, Int)]
countStep s k
  | k < 0 = error ("refused state " ++ show s)
  | otherwise = [ (s + j, s * 10 + j) | j <- [0 .. k - 1] ]

-- | 'countStep' as an evolve function.
countEvolver :: StaticPtr (Evolver Int Int Int)
countEvolver = static (evolver countStep)

-- A step that takes the given milliseconds, so a test can kill a worker
-- while states are being evolved.
slowStep :: Int -> Int -> [(Int, Int)]
slowStep s ms = unsafePerformIO (threadDelay (ms * 1000) >> pure [(s, s)])
{-# NOINLINE slowStep #-}

-- | 'slowStep' as an evolve function.
slowEvolver :: StaticPtr (Evolver Int Int Int)
slowEvolver = static (evolver slowStep)

-- A step that ends its worker's process on state 13, as a crash would.
exitStep :: Int -> Int -> [(Int, Int)]
exitStep s _
  | s == 13 = unsafePerformIO (exitImmediately (ExitFailure 9) >> pure [])
  | otherwise = [(s, s)]
{-# NOINLINE exitStep #-}

-- | 'exitStep' as an evolve function.
exitEvolver :: StaticPtr (Evolver Int Int Int)
exitEvolver = static (evolver exitStep)

-- | A task that reads a shared table: its byte at the position, plus the position.
sharedIndex :: (Shared B.ByteString, Int) -> Int
sharedIndex (table, i) = fromIntegral (B.index (sharedValue table) i) + i

sharedIndexTask :: StaticPtr (Task (Shared B.ByteString, Int) Int)
sharedIndexTask = static (named "sharedIndex" (task sharedIndex))

-- | Concatenation: associative, not commutative, so an answer combined
-- out of order shows.
showReducer :: StaticPtr (Reducer Int String)
showReducer = static (reducer (\x -> show x ++ ",") (++))

-- | A document's pairs: two keys from its number, the second weighted by it.
slowCountPairs :: (Int, Int) -> [(Int, Int)]
slowCountPairs (doc, _) = [(doc `mod` 7, 1), (100 + doc `mod` 3, doc)]

-- | 'slowCountPairs' after sleeping the milliseconds given, summed per key.
slowCountReducer :: StaticPtr (KeyedReducer (Int, Int) Int Int)
slowCountReducer = static (keyedReducer (\x@(_, ms) -> unsafePerformIO (threadDelay (ms * 1000)) `seq` slowCountPairs x) (+))

-- | Each input's text under its residue mod 3, joined in input order: a
-- combining function that is associative but not commutative.
orderedKeyedReducer :: StaticPtr (KeyedReducer Int Int String)
orderedKeyedReducer = static (keyedReducer (\x -> [(x `mod` 3, show x ++ ",")]) (++))

-- | The size of each of 'bigPartReducer''s values: 12 MiB.
bigPartBytes :: Int
bigPartBytes = 12 * 1024 * 1024

-- | Each input, after 150 ms, as one 12 MiB value under key 0 (its bytes
-- the input); of two values, the first is kept.
bigPartReducer :: StaticPtr (KeyedReducer Int Int B.ByteString)
bigPartReducer = static (keyedReducer (\x -> unsafePerformIO (threadDelay 150000) `seq` [(0, B.replicate bigPartBytes (fromIntegral x))]) const)

-- | Counts inputs, but throws on 37.
throwingKeyedReducer :: StaticPtr (KeyedReducer Int Int Int)
throwingKeyedReducer = static (keyedReducer (\x -> if x == 37 then error "no 37 here" else [(x `mod` 5, 1)]) (+))

-- | A square whose result stays on its worker.
refSquare :: StaticPtr (RefTask Int Int)
refSquare = static (named "refSquare" (refTask (\x -> x * x)))

-- | The held value plus the others given with it.
refAddAll :: StaticPtr (RefTaskWith Int [Int] Int)
refAddAll = static (named "refAddAll" (refTaskWith (\x ys -> x + sum ys)))

-- | One more, after 20 ms.
refSlowInc :: StaticPtr (RefTask Int Int)
refSlowInc = static (named "refSlowInc" (refTask (\x -> unsafePerformIO (threadDelay 20000) `seq` x + 1)))

-- | A held value plus the argument, brought back.
refPlus :: StaticPtr (RefQuery Int Int Int)
refPlus = static (named "refPlus" (refQuery (+)))

-- | Throws on 13, keeps the rest.
refFailAt13 :: StaticPtr (RefTask Int Int)
refFailAt13 = static (named "refFailAt13" (refTask failAt13))

-- | 'refFailAt13' after 20 ms each: when 13 throws, its worker still has
-- others of the call queued.
refSlowFailAt13 :: StaticPtr (RefTask Int Int)
refSlowFailAt13 = static (named "refSlowFailAt13" (refTask (\x -> unsafePerformIO (threadDelay 20000) `seq` failAt13 x)))

-- Make the first file, then wait (at most 20 s) for the second: two of
-- these, each making the file the other waits for, both see it only if
-- they run at the same time. True: the other's file came.
rendezvous :: (FilePath, FilePath) -> Bool
rendezvous (mine, theirs) = unsafePerformIO $ do
  writeFile mine ""
  let wait k
        | k <= (0 :: Int) = pure False
        | otherwise = doesFileExist theirs >>= \there -> if there then pure True else threadDelay 10000 >> wait (k - 1)
  wait 2000
{-# NOINLINE rendezvous #-}

-- | 'rendezvous' as an evolve step: one child, the same state, saying
-- whether the other file came.
rendezvousEvolver :: StaticPtr (Evolver (FilePath, FilePath) () Bool)
rendezvousEvolver = static (named "rendezvous" (evolver (\paths () -> [(paths, rendezvous paths)])))

-- | 'rendezvous' as a task whose result stays on its worker.
rendezvousRef :: StaticPtr (RefTask (FilePath, FilePath) Bool)
rendezvousRef = static (named "rendezvousRef" (refTask rendezvous))

-- | One, after sleeping this many seconds on its worker's OS thread.
sleeperTask :: StaticPtr (Task Double Int)
sleeperTask = static (named "sleeper" (task (\secs -> simulatedWork secs 1)))

-- | A Par computation that offers a child sleeping @(long)@ seconds, sleeps
-- @short@ itself, then throws before it waits for the child.
givesUpTask :: StaticPtr (Task (Double, Double) Int)
givesUpTask = static (named "givesUp" (task givesUp))

givesUp :: (Double, Double) -> Int
givesUp (long, short) = runPar $ do
  v <- spawnTask sleeperTask long
  let mine = simulatedWork short (0 :: Int)
  if mine == 0 then error "this computation gives up" else get v

