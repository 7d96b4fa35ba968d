-- | Output for people and for programs: aligned text tables and a minimal
-- JSON value with a correct encoder.
--
-- Every @herd bench@ prints a table and, with @--json@, ends with one line
-- that is a JSON object; both are built here so all benchmarks agree.
module Herd.Core.Report
  ( renderTable
  , Json (..)
  , renderJson
  , fixed
  ) where

import Data.Char (ord)
import Data.List (intercalate, transpose)
import Numeric (showFFloat, showHex)

-- | Render rows under a header, columns padded to line up; numbers (cells
-- starting with a digit or minus) are right-aligned.
renderTable :: [String] -> [[String]] -> String
renderTable header rows = unlines (line header : rule : map line rows)
  where
    widths = map (maximum . map length) (transpose (header : rows))
    line cells = intercalate "  " (zipWith pad widths cells)
    rule = intercalate "  " [ replicate w '-' | w <- widths ]
    pad w c
      | isNumeric c = replicate (w - length c) ' ' ++ c
      | otherwise = c ++ replicate (w - length c) ' '
    isNumeric c = any (`elem` "0123456789") c && all (`elem` "0123456789.-+e%") c

-- | A JSON value.
data Json
  = JNull
  | JBool Bool
  | JNumber Double
  | JInt Integer
  | JString String
  | JArray [Json]
  | JObject [(String, Json)]
  deriving (Eq, Show)

-- | Encode on one line.
renderJson :: Json -> String
renderJson v = case v of
  JNull -> "null"
  JBool b -> if b then "true" else "false"
  JInt i -> show i
  JNumber d
    | isNaN d || isInfinite d -> "null"
    | otherwise -> showFFloat Nothing (fromIntegral (round (d * 1e6) :: Integer) / 1e6 :: Double) ""
  JString s -> quote s
  JArray xs -> "[" ++ intercalate "," (map renderJson xs) ++ "]"
  JObject kvs -> "{" ++ intercalate "," [ quote k ++ ":" ++ renderJson x | (k, x) <- kvs ] ++ "}"
  where
    quote s = "\"" ++ concatMap esc s ++ "\""
    esc c = case c of
      '"' -> "\\\""
      '\\' -> "\\\\"
      '\n' -> "\\n"
      '\t' -> "\\t"
      '\r' -> "\\r"
      _ | ord c < 0x20 -> "\\u" ++ replicate (4 - length (showHex (ord c) "")) '0' ++ showHex (ord c) ""
        | otherwise -> [c]

-- | A number with this many decimals.
fixed :: Int -> Double -> String
fixed d x = showFFloat (Just d) x ""
