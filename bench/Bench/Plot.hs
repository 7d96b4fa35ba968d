-- | A small log-log line plot written as SVG, for the scaling benchmarks
-- (no plotting library: the figure is a few lines and a grid).
module Bench.Plot
  ( Series (..)
  , logLogSvg
  ) where



-- | One line of the plot.
data Series = Series
  { seriesName   :: String
  , seriesColour :: String
  , seriesDashed :: Bool
  , seriesPoints :: [(Double, Double)]
  }

-- | An SVG document: x and y on log scales, a grid at powers of two (x)
-- and ten (y), a legend, and the series.
logLogSvg :: String -> String -> String -> [Series] -> String
logLogSvg title xLabel yLabel series = unlines $
  [ "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" ++ show w ++ "\" height=\"" ++ show h ++ "\" font-family=\"sans-serif\" font-size=\"12\">"
  , "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>"
  , text (w / 2) 20 "middle" title
  , text (w / 2) (h - 8) "middle" xLabel
  , "<text x=\"14\" y=\"" ++ num (h / 2) ++ "\" text-anchor=\"middle\" transform=\"rotate(-90 14 " ++ num (h / 2) ++ ")\">" ++ yLabel ++ "</text>"
  ] ++ grid ++ concatMap line (zip [0 :: Int ..] series) ++ ["</svg>"]
  where
    w = 640 :: Double
    h = 440 :: Double
    (left, right, top, bottom) = (70, w - 150, 40, h - 50)
    points = concatMap seriesPoints series
    xs = [ x | (x, _) <- points, x > 0 ]
    ys = [ y | (_, y) <- points, y > 0 ]
    (x0, x1) = widen (fromIntegral (floor (logBase 2 (minimum (orOne xs))) :: Int))
                     (fromIntegral (ceiling (logBase 2 (maximum (orOne xs))) :: Int))
    (y0, y1) = widen (fromIntegral (floor (logBase 10 (minimum (orOne ys))) :: Int))
                     (fromIntegral (ceiling (logBase 10 (maximum (orOne ys))) :: Int))
    orOne vs = if null vs then [1] else vs
    widen a b = if b - a < 1e-9 then (a - 0.5, b + 0.5) else (a, b)
    px x = left + (logBase 2 x - x0) / (x1 - x0) * (right - left)
    py y = bottom - (logBase 10 y - y0) / (y1 - y0) * (bottom - top)
    grid =
      [ "<line x1=\"" ++ num (px x) ++ "\" y1=\"" ++ num top ++ "\" x2=\"" ++ num (px x) ++ "\" y2=\"" ++ num bottom
        ++ "\" stroke=\"#ddd\"/>" ++ text (px x) (bottom + 16) "middle" (show (round x :: Int))
      | k <- [ceiling x0 .. floor x1 :: Int], let x = 2 ^^ k ] ++
      [ "<line x1=\"" ++ num left ++ "\" y1=\"" ++ num (py y) ++ "\" x2=\"" ++ num right ++ "\" y2=\"" ++ num (py y)
        ++ "\" stroke=\"#ddd\"/>" ++ text (left - 6) (py y + 4) "end" (showTick y)
      | k <- [round y0 .. round y1 :: Int], let y = 10 ^^ k ] ++
      [ "<rect x=\"" ++ num left ++ "\" y=\"" ++ num top ++ "\" width=\"" ++ num (right - left) ++ "\" height=\""
        ++ num (bottom - top) ++ "\" fill=\"none\" stroke=\"black\"/>" ]
    line (i, s) =
      let pts = [ (px x, py y) | (x, y) <- seriesPoints s, x > 0, y > 0 ]
          ly = top + 10 + 18 * fromIntegral i
      in [ "<polyline fill=\"none\" stroke=\"" ++ seriesColour s ++ "\" stroke-width=\"2\""
           ++ (if seriesDashed s then " stroke-dasharray=\"5,4\"" else "")
           ++ " points=\"" ++ unwords [ num a ++ "," ++ num b | (a, b) <- pts ] ++ "\"/>" ] ++
         [ "<circle cx=\"" ++ num a ++ "\" cy=\"" ++ num b ++ "\" r=\"3\" fill=\"" ++ seriesColour s ++ "\"/>"
         | not (seriesDashed s), (a, b) <- pts ] ++
         [ "<line x1=\"" ++ num (right + 12) ++ "\" y1=\"" ++ num ly ++ "\" x2=\"" ++ num (right + 36) ++ "\" y2=\""
           ++ num ly ++ "\" stroke=\"" ++ seriesColour s ++ "\" stroke-width=\"2\""
           ++ (if seriesDashed s then " stroke-dasharray=\"5,4\"" else "") ++ "/>"
         , text (right + 42) (ly + 4) "start" (seriesName s) ]
    showTick y | y >= 1 = show (round y :: Int)
               | otherwise = show y
    text x y anchor s = "<text x=\"" ++ num x ++ "\" y=\"" ++ num y ++ "\" text-anchor=\"" ++ anchor ++ "\">"
                        ++ escape s ++ "</text>"
    escape = concatMap (\c -> case c of '<' -> "&lt;"; '>' -> "&gt;"; '&' -> "&amp;"; _ -> [c])
    num :: Double -> String
    num v = show (fromIntegral (round (v * 10) :: Int) / 10 :: Double)

