-- | Small SVG figures for the benchmarks' @--plot@ files (no plotting
-- library: each figure is a frame, a grid, a legend and a few shapes).
--
-- Promises: the output is a complete SVG document whatever the data
-- (no points, zero or negative values on a log scale are left out, a
-- single value gets a visible range), and every text is escaped.
module Bench.Plot
  ( Series (..)
  , Scale (..)
  , lineSvg
  , logLogSvg
  , barSvg
  , writePlot
  , checkPlotWritable
  ) where

import Control.Exception (IOException, displayException, try)
import Numeric (showFFloat)
import System.Exit (ExitCode (..), exitWith)
import System.IO (hPutStrLn, stderr)

-- | One line of a line plot, or one colour of a bar chart's groups.
data Series = Series
  { seriesName   :: String
  , seriesColour :: String
  , seriesDashed :: Bool
  , seriesPoints :: [(Double, Double)]
  }

-- | How an axis maps values: ticks at powers of two, at powers of ten, or
-- at round steps from zero.
data Scale = Log2 | Log10 | Linear
  deriving (Eq, Show)

width, height, left, right, top, bottom :: Double
width = 720
height = 440
left = 70
right = width - 210
top = 40
bottom = height - 50

-- An axis: from value to position along [0, 1], and its ticks with labels.
data Axis = Axis { axisAt :: Double -> Double, axisTicks :: [(Double, String)], axisKeeps :: Double -> Bool }

axisFor :: Scale -> [Double] -> Axis
axisFor scale values = case scale of
  Linear ->
    let hi = if null kept || maximum kept <= 0 then 1 else maximum kept
        step = niceStep (hi / 5)
        top' = step * fromIntegral (ceiling (hi / step) :: Int)
        decimals = max 0 (negate (floor (logBase 10 step + 1e-9)) :: Int)
    in Axis (/ top') [ (v, showFFloat (Just decimals) v "") | k <- [0 .. round (top' / step) :: Int], let v = fromIntegral k * step ] (>= 0)
  _ ->
    let base = if scale == Log2 then 2 else 10
        lg v = logBase base v
        -- a value just above a power of the base gets a step of room below
        -- it (a bar at the axis' foot would not show)
        low = lg (minimum (orOne kept))
        (a, b) = widen (fromIntegral (floor (low - 0.2) :: Int))
                       (fromIntegral (ceiling (lg (maximum (orOne kept))) :: Int))
    in Axis (\v -> (lg v - a) / (b - a)) [ (v, showTick v) | k <- [round a .. round b :: Int], let v = base ^^ k ] (> 0)
  where
    kept = [ v | v <- values, if scale == Linear then v >= 0 else v > 0 ]
    orOne vs = if null vs then [1] else vs
    widen a b = if b - a < 1e-9 then (a - 1, b + 1) else (a, b)

-- A round step (1, 2 or 5 times a power of ten) near the given size.
niceStep :: Double -> Double
niceStep raw = head ([ s | m <- [1, 2, 5, 10], let s = m * p, s >= raw ] ++ [10 * p])
  where p = 10 ^^ (floor (logBase 10 (max 1e-12 raw)) :: Int)

showTick :: Double -> String
showTick v
  | v >= 1 && v == fromIntegral (round v :: Int) = show (round v :: Int)
  | otherwise = showFFloat Nothing v ""

-- | A line plot: x and y on the given scales, a grid at the ticks, a
-- legend, and the series (dashed ones without markers).
lineSvg :: Scale -> Scale -> String -> String -> String -> [Series] -> String
lineSvg xScale yScale title xLabel yLabel series = document title xLabel yLabel $
  xGrid ++ yGrid yAxis ++ concatMap line (zip [0 ..] series)
  where
    xAxis = axisFor xScale (map fst (concatMap seriesPoints series))
    yAxis = axisFor yScale (map snd (concatMap seriesPoints series))
    px x = left + axisAt xAxis x * (right - left)
    xGrid = [ gridLine (px x) top (px x) bottom ++ text (px x) (bottom + 16) "middle" label
            | (x, label) <- axisTicks xAxis ]
    line (i, s) =
      let pts = [ (px x, yAt yAxis y) | (x, y) <- seriesPoints s, axisKeeps xAxis x, axisKeeps yAxis y ]
      in [ "<polyline fill=\"none\" stroke=\"" ++ seriesColour s ++ "\" stroke-width=\"2\"" ++ dash s
           ++ " points=\"" ++ unwords [ num a ++ "," ++ num b | (a, b) <- pts ] ++ "\"/>" ] ++
         [ "<circle cx=\"" ++ num a ++ "\" cy=\"" ++ num b ++ "\" r=\"3\" fill=\"" ++ seriesColour s ++ "\"/>"
         | not (seriesDashed s), (a, b) <- pts ] ++
         legend i s

-- | The log-log plot of the scaling benchmarks: x at powers of two, y at
-- powers of ten.
logLogSvg :: String -> String -> String -> [Series] -> String
logLogSvg = lineSvg Log2 Log10

-- | A grouped bar chart: one group per label along x, one bar per series
-- in each group (a series' points are (group index, value); a missing
-- group is a gap), y on the given scale.
barSvg :: Scale -> String -> String -> [String] -> [Series] -> String
barSvg yScale title yLabel groups series = document title "" yLabel $
  yGrid yAxis ++ groupLabels ++ concat bars ++ concatMap (uncurry legend) (zip [0 ..] series)
  where
    yAxis = axisFor yScale (map snd (concatMap seriesPoints series))
    slot = (right - left) / fromIntegral (max 1 (length groups))
    barW = 0.8 * slot / fromIntegral (max 1 (length series))
    -- long labels alternate between two rows so that neighbours do not overlap
    stagger = 7 * maximum (0 : map length groups) > round slot
    groupLabels = [ text (left + slot * (fromIntegral g + 0.5)) (bottom + (if stagger && odd g then 30 else 16)) "middle" label
                  | (g, label) <- zip [0 :: Int ..] groups ]
    base = if yScale == Linear then bottom else yAt yAxis (fst (head (axisTicks yAxis ++ [(1, "")])))
    bars = [ [ "<rect x=\"" ++ num x ++ "\" y=\"" ++ num (min y base) ++ "\" width=\"" ++ num barW ++ "\" height=\""
               ++ num (abs (base - y)) ++ "\" fill=\"" ++ seriesColour s ++ "\"/>"
             , "<title>" ++ escape (seriesName s ++ ": " ++ showFFloat (Just 3) v "") ++ "</title>" ]
           | (k, s) <- zip [0 :: Int ..] series, (g, v) <- seriesPoints s, axisKeeps yAxis v
           , let x = left + slot * g + 0.1 * slot + barW * fromIntegral k
                 y = yAt yAxis v ]

yAt :: Axis -> Double -> Double
yAt axis y = bottom - axisAt axis y * (bottom - top)

yGrid :: Axis -> [String]
yGrid axis = [ gridLine left (yAt axis y) right (yAt axis y) ++ text (left - 6) (yAt axis y + 4) "end" label
             | (y, label) <- axisTicks axis ]

legend :: Int -> Series -> [String]
legend i s =
  let ly = top + 10 + 18 * fromIntegral i
  in [ "<line x1=\"" ++ num (right + 12) ++ "\" y1=\"" ++ num ly ++ "\" x2=\"" ++ num (right + 36) ++ "\" y2=\""
       ++ num ly ++ "\" stroke=\"" ++ seriesColour s ++ "\" stroke-width=\"" ++ (if seriesDashed s then "2" else "6") ++ "\""
       ++ dash s ++ "/>"
     , text (right + 42) (ly + 4) "start" (seriesName s) ]

dash :: Series -> String
dash s = if seriesDashed s then " stroke-dasharray=\"5,4\"" else ""

document :: String -> String -> String -> [String] -> String
document title xLabel yLabel body = unlines $
  [ "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" ++ num width ++ "\" height=\"" ++ num height
    ++ "\" font-family=\"sans-serif\" font-size=\"12\">"
  , "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>"
  , text (width / 2) 20 "middle" title
  , text ((left + right) / 2) (height - 8) "middle" xLabel
  , "<text x=\"14\" y=\"" ++ num (height / 2) ++ "\" text-anchor=\"middle\" transform=\"rotate(-90 14 "
    ++ num (height / 2) ++ ")\">" ++ escape yLabel ++ "</text>"
  ] ++ body ++
  [ "<rect x=\"" ++ num left ++ "\" y=\"" ++ num top ++ "\" width=\"" ++ num (right - left) ++ "\" height=\""
    ++ num (bottom - top) ++ "\" fill=\"none\" stroke=\"black\"/>"
  , "</svg>" ]

gridLine :: Double -> Double -> Double -> Double -> String
gridLine x1 y1 x2 y2 = "<line x1=\"" ++ num x1 ++ "\" y1=\"" ++ num y1 ++ "\" x2=\"" ++ num x2 ++ "\" y2=\""
                       ++ num y2 ++ "\" stroke=\"#ddd\"/>"

text :: Double -> Double -> String -> String -> String
text x y anchor s = "<text x=\"" ++ num x ++ "\" y=\"" ++ num y ++ "\" text-anchor=\"" ++ anchor ++ "\">"
                    ++ escape s ++ "</text>"

escape :: String -> String
escape = concatMap (\c -> case c of '<' -> "&lt;"; '>' -> "&gt;"; '&' -> "&amp;"; '"' -> "&quot;"; _ -> [c])

num :: Double -> String
num v = showFFloat (Just 1) v ""

-- | Fail now, with exit code 2, if the plot file cannot be written: a
-- benchmark should not run for minutes and then lose its figure.
checkPlotWritable :: String -> Maybe FilePath -> IO ()
checkPlotWritable _ Nothing = pure ()
checkPlotWritable bench (Just path) = do
  writable <- try (appendFile path "") :: IO (Either IOException ())
  case writable of
    Left e -> do
      hPutStrLn stderr (bench ++ ": cannot write the plot to " ++ path ++ ": " ++ displayException e)
      exitWith (ExitFailure 2)
    Right () -> pure ()

-- | Write a plot if a file was asked for, and say where.
writePlot :: Maybe FilePath -> String -> IO ()
writePlot Nothing _ = pure ()
writePlot (Just path) svg = do
  writeFile path svg
  putStrLn ("plot written to " ++ path)
