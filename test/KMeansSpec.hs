-- | The k-means example's assignment ("Herd.Examples.KMeans"), which
-- finds nearest centroids by a rearranged distance for speed: it must
-- pick what the plain squared distance picks, the first of equals
-- included.
module KMeansSpec (spec) where

import Data.List (foldl')
import qualified Data.Vector.Unboxed as VU
import Herd.Examples.KMeans (assignPartial)
import Test.Hspec
import Test.QuickCheck

spec :: Spec
spec = describe "the k-means example's assignment" $
  it "gives each centroid the points nearest it by squared distance, ties to the first" $
    -- Small whole coordinates keep both forms exact, so ties are real.
    property $ forAll (choose (1, 11)) $ \k -> forAll (vectorOf (2 * k) coordinate) $ \cs ->
      forAll (listOf ((,) <$> coordinate <*> coordinate)) $ \pts ->
        let ps = VU.fromList (concat [ [x, y] | (x, y) <- pts ])
            centroids = VU.fromList cs
            plain = foldl' (\acc (x, y) -> addTo acc (nearestPlain centroids x y) x y)
                           (VU.replicate (2 * k) 0, VU.replicate k 0) pts
        in assignPartial centroids ps 0 (length pts) === plain
  where
    coordinate = fromIntegral <$> (choose (-6, 6) :: Gen Int)
    nearestPlain cs x y =
      snd (minimum [ ((x - cs VU.! (2 * c)) ^ (2 :: Int) + (y - cs VU.! (2 * c + 1)) ^ (2 :: Int), c)
                   | c <- [0 .. VU.length cs `div` 2 - 1] ])
    addTo (sums, counts) c x y =
      ( sums VU.// [(2 * c, sums VU.! (2 * c) + x), (2 * c + 1, sums VU.! (2 * c + 1) + y)]
      , counts VU.// [(c, counts VU.! c + 1)] )
