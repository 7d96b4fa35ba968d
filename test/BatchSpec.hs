{-# LANGUAGE ScopedTypeVariables #-}
-- | The farm's runs of values ("Herd.Wire.ArgTable"): an argument table cut
-- into runs by any budget gives back every argument once, in order; a
-- function that throws, or bytes that do not decode, are named by their
-- position; results kept encoded in an arena come back as decoded ones do,
-- whatever order their runs arrive in.
module BatchSpec (spec) where

import Control.Exception (ErrorCall (..), throw, displayException)
import Control.Monad (foldM)
import qualified Data.ByteString as B
import Data.IORef
import Data.List (isInfixOf, sortOn)
import Data.Proxy (Proxy (..))
import Data.Store (Store (..))
import Data.Store.Internal (Size (..))
import Data.Word (Word32)
import qualified Data.Map.Strict as M
import Herd.Core.Base (Range (..))
import Herd.Wire.Writer (Encoder (..), encoderBytes)
import Herd.Wire.ArgTable
import Herd.Wire.Scratch
import Herd.Wire.InPlace
import qualified Data.ByteString.Internal as BI
import Foreign.ForeignPtr (ForeignPtr, mallocForeignPtrBytes, withForeignPtr)
import Foreign.Ptr (castPtr)
import Foreign.Storable (peekElemOff, pokeElemOff)
import Data.Word (Word8)
import Test.Hspec
import Test.QuickCheck

-- Cut arguments lo..hi-1 into runs as the master's shell does, each run
-- given the budget next in the list (cycled).
runsOf :: ArgTable -> [Int] -> Int -> Int -> [(Int, Int)]
runsOf table budgets lo hi = go lo (cycle budgets)
  where
    go i (b : bs)
      | i >= hi = []
      | otherwise = let k = argsFitting table i hi b in (i, i + k) : go (i + k) bs
    go _ [] = []

-- The body of a run message, without its tag and count.
bodyOf :: Encoder -> IO B.ByteString
bodyOf enc = B.drop runHeaderBytes <$> encoderBytes enc

-- A type whose Store instance claims a constant width its encoding does
-- not keep.
newtype Liar = Liar Word32
  deriving Show

instance Store Liar where
  size = ConstSize 8
  poke (Liar x) = poke x
  peek = Liar <$> peek

-- Build a table of these arguments, cut it into runs by the budgets, and
-- decode every run: each argument comes back once, in order.
everyArgumentOnce :: (Store a, Eq a, Show a) => [a] -> [Positive Int] -> Property
everyArgumentOnce xs budgets = ioProperty $ do
  Right table <- buildArgTable xs
  let n = argCount table
      cuts = runsOf table (map ((* 4) . getPositive) budgets ++ [1000]) 0 n
  got <- newIORef M.empty
  results <- mapM (\(lo, hi) -> do
    body <- bodyOf (argsEncoder table lo hi)
    decodeRun (\i x -> modifyIORef' got (M.insertWith (++) i [x])) [Range lo hi] body) cuts
  seen <- readIORef got
  pure $ classify (length cuts > 1) "several runs"
       $ n === length xs .&&. all (either (const False) (const True)) results
         .&&. seen === M.fromList (zip [0 ..] (map pure xs))

spec :: Spec
spec = batchSpec >> inPlaceSpec

batchSpec :: Spec
batchSpec = describe "Herd.Wire.ArgTable" $ do
  it "gives back every argument once, in order, however the runs are cut" $
    property $ \(xs :: [String]) budgets -> everyArgumentOnce xs budgets

  it "gives back every argument of a constant width once, in order, with no table of ends" $
    property $ \(xs :: [Int]) budgets -> everyArgumentOnce xs budgets

  it "refuses an argument whose encoding is not the width its type claims" $ do
    Left (i, why) <- buildArgTable [Liar 1, Liar 2]
    (i, "says every value takes 8" `isInfixOf` why) `shouldBe` (0, True)

  it "fills a run to its budget, and never leaves an argument out" $
    property $ \(xs :: [[Int]]) (Positive budget) -> not (null xs) ==> ioProperty $ do
      Right table <- buildArgTable xs
      let k = argsFitting table 0 (length xs) budget
      size' <- B.length <$> bodyOf (argsEncoder table 0 k)
      more <- if k < length xs then Just . B.length <$> bodyOf (argsEncoder table 0 (k + 1)) else pure Nothing
      pure $ counterexample (show (k, size', more))
           $ k >= 1 .&&. (k == 1 || size' + runHeaderBytes <= budget)
             .&&. maybe True (\m -> m + runHeaderBytes > budget) more

  it "names the first argument that throws, or a list that breaks off" $ do
    Left (i, why) <- buildArgTable [1, 2, throw (ErrorCall "bad argument"), 4 :: Int]
    (i, "bad argument" `isInfixOf` why) `shouldBe` (2, True)
    Left (j, _) <- buildArgTable ([1, 2, 3 :: Int] ++ error "no more")
    j `shouldBe` 3

  it "runs a function over a run, keeping the results before a throw and naming its position" $
    property $ \(xs :: [Int]) (NonNegative cut) -> not (null xs) ==> ioProperty $ do
      let bad = cut `mod` length xs
          f x = if x == xs !! bad then throw (ErrorCall "boom") else x * 2
      Right table <- buildArgTable xs
      args <- bodyOf (argsEncoder table 0 (length xs))
      scratch <- newScratch
      outcome <- runChunk f scratch args (length xs)
      kept <- scratchCount scratch
      let firstBad = length (takeWhile (/= xs !! bad) xs)
      results <- if kept == 0 then pure [] else do
        body <- resultsEncoder scratch 0 kept >>= bodyOf
        out <- newIORef []
        _ <- decodeRun (\_ (y :: Int) -> modifyIORef' out (y :)) [Range 0 kept] body
        reverse <$> readIORef out
      pure $ case outcome of
        ChunkThrew p why -> (p, kept, results, "boom" `isInfixOf` why)
                            === (firstBad, firstBad, map (* 2) (take firstBad xs), True)
        other -> counterexample (show other) False

  it "keeps constant-width results encoded, and gives them back whatever order their runs came in" $
    property $ \(xs :: [Double]) (seed :: Int) -> ioProperty $ do
      let n = length xs
      Just width <- pure (constantWidth (Proxy :: Proxy Double))
      arena <- newArena n width
      Right table <- buildArgTable xs
      let cuts = runsOf table [24, 40, 1000] 0 n
          shuffled = sortOn (\(lo, _) -> (lo * 7919 + seed) `mod` 101) cuts
      ok <- foldM (\acc (lo, hi) -> do
        body <- bodyOf (argsEncoder table lo hi)
        r <- stageRun (Proxy :: Proxy Double) arena [Range lo hi] body
        pure (acc && r == Right ())) True shuffled
      pure (ok .&&. arenaValues arena n === xs)

  it "refuses a run of results whose bytes are short or left over, naming where" $ do
    arena <- newArena 2 8
    short <- stageRun (Proxy :: Proxy Int) arena [Range 0 2] (B.replicate 12 0)
    fmap fst (either Just (const Nothing) short) `shouldBe` Just 1
    long <- stageRun (Proxy :: Proxy Int) arena [Range 0 2] (B.replicate 20 0)
    either (("left over" `isInfixOf`) . snd) (const False) long `shouldBe` True

-- Results held until their tasks are final, then written over the
-- arguments ("Herd.Wire.InPlace"): a result written early would be sent
-- back as an argument if its batch ran again.
inPlaceSpec :: Spec
inPlaceSpec = describe "Herd.Wire.InPlace" $ do
  it "leaves the table alone until tasks are accepted, then writes exactly theirs" $ do
    table <- tableOf [0 .. 9]
    pending <- newPending 8
    holdRun pending [Range 0 4] (resultsOf [100 .. 103])
    holdRun pending [Range 4 6, Range 8 10] (resultsOf [104, 105, 108, 109])
    holdRun pending [Range 6 8] (resultsOf [106, 107])
    slots table 10 `shouldReturn` [0 .. 9]
    commitRanges pending table [Range 0 4] `shouldReturn` Right ()
    slots table 10 `shouldReturn` ([100 .. 103] ++ [4 .. 9])
    commitRanges pending table [Range 4 10] `shouldReturn` Right ()
    slots table 10 `shouldReturn` [100 .. 109]
    pendingPieces pending `shouldReturn` 0

  it "names accepted tasks it holds no results for, and writes nothing for them" $ do
    table <- tableOf [0 .. 5]
    pending <- newPending 8
    holdRun pending [Range 0 2] (resultsOf [100, 101])
    r <- commitRanges pending table [Range 0 4]
    r `shouldBe` Left (UnkeptResults [Range 0 4])
    either (("0-3" `isInfixOf`) . displayException) (const False) r `shouldBe` True
    slots table 6 `shouldReturn` [100, 101, 2, 3, 4, 5]

  it "writes every accepted task's result and no other, however runs were cut, interleaved and repeated" $
    property $ forAll inPlaceScenario $ \(n, runs, accepted) -> ioProperty $ do
      table <- tableOf [0 .. n - 1]
      pending <- newPending 8
      mapM_ (\(lo, hi) -> holdRun pending [Range lo hi] (resultsOf [ 1000 + i | i <- [lo .. hi - 1] ])) runs
      answers <- mapM (\(lo, hi) -> commitRanges pending table [Range lo hi]) accepted
      got <- slots table n
      let final i = any (\(lo, hi) -> i >= lo && i < hi) accepted
      pure (conjoin [ answers === map (const (Right ())) accepted
                    , got === [ if final i then 1000 + i else i | i <- [0 .. n - 1] ] ])

-- Tasks cut into batches, each batch's results arriving as runs cut at
-- random; besides, copies of other batches, cut another way (some of the
-- tasks ran twice, on batches that straddle these), held for some of them;
-- all runs interleaved. Some of the first batches are accepted, whole or
-- in parts, in any order.
inPlaceScenario :: Gen (Int, [(Int, Int)], [(Int, Int)])
inPlaceScenario = do
  n <- choose (1, 200)
  let batchesOf = do
        cuts <- sublistOf [1 .. n - 1]
        pure (zip (0 : cuts) (cuts ++ [n]))
      runsOf (lo, hi) = do
        inner <- sublistOf [lo + 1 .. hi - 1]
        pure (zip (lo : inner) (inner ++ [hi]))
  batches <- batchesOf
  copies <- batchesOf >>= sublistOf
  runs <- concat <$> mapM runsOf (batches ++ copies)
  interleaved <- shuffle runs
  -- a batch's tasks may be accepted in parts (a part done elsewhere first)
  accepted <- sublistOf batches >>= fmap concat . mapM runsOf >>= shuffle
  pure (n, interleaved, accepted)

-- A table of 8-byte slots holding these numbers.
tableOf :: [Int] -> IO (ForeignPtr Word8)
tableOf xs = do
  fp <- mallocForeignPtrBytes (8 * max 1 (length xs))
  withForeignPtr fp $ \p -> mapM_ (\(i, x) -> pokeElemOff (castPtr p) i x) (zip [0 ..] xs)
  pure fp

-- The first n slots of a table.
slots :: ForeignPtr Word8 -> Int -> IO [Int]
slots fp n = withForeignPtr fp $ \p -> mapM (peekElemOff (castPtr p)) [0 .. n - 1]

-- Results as a run carries them: 8 bytes each, as the table holds them.
resultsOf :: [Int] -> B.ByteString
resultsOf xs = BI.unsafeCreate (8 * length xs) $ \p -> mapM_ (\(i, x) -> pokeElemOff (castPtr p) i x) (zip [0 ..] xs)
