-- | A small JSON reader for the tests and the benchmark report: enough to
-- check that what herd's dashboard serves parses as JSON, to look fields
-- up in it, to read the browser's DevTools answers and the last line of
-- a @herd bench --json@ run. Strict about syntax (one value, nothing
-- after it), so a malformed document fails the test that reads it.
module Herd.Testkit.Json
  ( Value (..)
  , parseJson
  , field
  , path
  ) where

import Data.Char (chr, isDigit, isHexDigit, isSpace)
import Numeric (readHex)

-- | A parsed JSON value.
data Value
  = Null
  | Bool Bool
  | Number Double
  | String String
  | Array [Value]
  | Object [(String, Value)]
  deriving (Eq, Show)

-- | Parse one JSON document.
parseJson :: String -> Either String Value
parseJson s = case value (skip s) of
  Right (v, rest) | all isSpace rest -> Right v
                  | otherwise -> Left ("text after the value: " ++ take 40 rest)
  Left e -> Left e

-- | A field of an object.
field :: String -> Value -> Maybe Value
field k (Object kvs) = lookup k kvs
field _ _ = Nothing

-- | Fields of nested objects, outermost first.
path :: [String] -> Value -> Maybe Value
path ks v = foldl (\acc k -> acc >>= field k) (Just v) ks

skip :: String -> String
skip = dropWhile isSpace

value :: String -> Either String (Value, String)
value s = case s of
  'n' : 'u' : 'l' : 'l' : r -> Right (Null, skip r)
  't' : 'r' : 'u' : 'e' : r -> Right (Bool True, skip r)
  'f' : 'a' : 'l' : 's' : 'e' : r -> Right (Bool False, skip r)
  '"' : r -> do { (str, r') <- string r; Right (String str, skip r') }
  '[' : r -> array (skip r) []
  '{' : r -> object (skip r) []
  c : _ | c == '-' || isDigit c -> number s
  _ -> Left ("unexpected: " ++ take 40 s)

array :: String -> [Value] -> Either String (Value, String)
array (']' : r) [] = Right (Array [], skip r)
array s acc = do
  (v, r) <- value s
  case r of
    ',' : r' -> array (skip r') (v : acc)
    ']' : r' -> Right (Array (reverse (v : acc)), skip r')
    _ -> Left ("expected , or ] at: " ++ take 40 r)

object :: String -> [(String, Value)] -> Either String (Value, String)
object ('}' : r) [] = Right (Object [], skip r)
object ('"' : s) acc = do
  (k, r) <- string s
  case skip r of
    ':' : r' -> do
      (v, r'') <- value (skip r')
      case r'' of
        ',' : t -> object (skip t) ((k, v) : acc)
        '}' : t -> Right (Object (reverse ((k, v) : acc)), skip t)
        _ -> Left ("expected , or } at: " ++ take 40 r'')
    _ -> Left ("expected : after key " ++ show k)
object s _ = Left ("expected a key at: " ++ take 40 s)

string :: String -> Either String (String, String)
string = go []
  where
    go acc s = case s of
      '"' : r -> Right (reverse acc, r)
      '\\' : c : r -> case c of
        'n' -> go ('\n' : acc) r
        't' -> go ('\t' : acc) r
        'r' -> go ('\r' : acc) r
        'b' -> go ('\b' : acc) r
        'f' -> go ('\f' : acc) r
        'u' | (h, r') <- splitAt 4 r, length h == 4, all isHexDigit h -> go (chr (fst (head (readHex h))) : acc) r'
        _ | c `elem` "\"\\/" -> go (c : acc) r
          | otherwise -> Left ("bad escape \\" ++ [c])
      c : r | c < ' ' -> Left "control character in a string"
            | otherwise -> go (c : acc) r
      [] -> Left "unterminated string"

number :: String -> Either String (Value, String)
number s =
  let (t, r) = span (`elem` "+-0123456789.eE") s
  in case reads (fixup t) of
       [(d, "")] -> Right (Number d, skip r)
       _ -> Left ("bad number " ++ show t)
  where
    -- Haskell's reader wants a digit before and after the point
    fixup t = case t of
      '-' : rest -> '-' : fixup rest
      _ -> let (a, b) = break (== '.') t in a ++ (case b of { '.' : d -> '.' : (if null d || not (isDigit (head d)) then '0' : d else d); _ -> b })
