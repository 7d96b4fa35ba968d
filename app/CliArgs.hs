-- | The readers of @herd@'s flag values: counts, lists, durations,
-- transports, master loops, CPUs. Each refuses a bad value with the values
-- it accepts.
module CliArgs
  ( targetListArg
  , dashboardOption
  , dashboardArg
  , plotOption
  , transportListArg
  , commaItems
  , durationArg
  , parseDuration
  , loopListArg
  , durationListArg
  , countListArg
  , sizeListArg
  , countArg
  , positiveInt
  , fibArg
  , coreListArg
  , secondsArg
  , cpuArg
  ) where

import Herd.Fuzz (FuzzTarget (..))
import Data.Char (isDigit)
import Herd.Settings (MasterLoop (..), parseDashboardAddress, parseMasterLoop)
import Herd.Node.Topology (parseCpuList)
import Herd.Transport (TransportKind, parseTransportKind)
import Data.List (nub)
import Options.Applicative

targetListArg :: ReadM [FuzzTarget]
targetListArg = eitherReader $ \s -> do
  ts <- mapM one (commas s)
  if null ts then Left "expected at least one target: master, worker" else Right (nub ts)
  where
    commas str = case break (== ',') str of
      (a, _ : rest) -> a : commas rest
      (a, []) -> [a | not (null a)]
    one t = case t of
      "master" -> Right AtMaster
      "worker" -> Right AtWorker
      _ -> Left ("unknown fuzz target " ++ show t ++ " (master, worker)")

-- The optional @--dashboard HOST:PORT@ of a command that runs a cluster.
dashboardOption :: Parser (Maybe String)
dashboardOption = optional (option dashboardArg (long "dashboard" <> metavar "HOST:PORT"
  <> help "serve a live dashboard of the cluster there (e.g. 127.0.0.1:8787; port 0: a free one, logged): \
          \the page at /, JSON at /api/status, Prometheus metrics at /metrics"))

dashboardArg :: ReadM String
dashboardArg = eitherReader $ \s -> either Left (const (Right s)) (parseDashboardAddress s)

-- The optional @--plot FILE@ of a benchmark: an SVG figure of what it
-- measured, written only when asked for.
plotOption :: String -> Parser (Maybe FilePath)
plotOption what = optional (strOption (long "plot" <> metavar "FILE"
                                       <> help ("also write an SVG figure: " ++ what)))

-- A comma-separated list of transports, each named once.
transportListArg :: ReadM [TransportKind]
transportListArg = eitherReader $ \s -> do
  ts <- mapM parseTransportKind (splitCommas s)
  if null ts then Left "expected at least one transport: tcp, unix, shm"
    else if length ts /= length (nub ts) then Left ("a transport is named twice in " ++ show s)
    else Right ts
  where
    splitCommas str = case break (== ',') str of
      (a, ',' : rest) -> a : splitCommas rest
      (a, _) -> [a]

-- The items of a comma-separated list (spaces also separate).
commaItems :: String -> [String]
commaItems = words . map (\c -> if c == ',' then ' ' else c)

-- A duration: a number with s, ms or us (a bare number is seconds).
durationArg :: ReadM Double
durationArg = eitherReader parseDuration

parseDuration :: String -> Either String Double
parseDuration s =
  let (digits, unit) = span (`elem` "0123456789.") s
      scale = lookup unit [("", 1), ("s", 1), ("ms", 1e-3), ("us", 1e-6)]
  in case (reads digits, scale) of
       ([(x, "")], Just k) | x * k > 0 && x * k <= 3600 -> Right (x * k)
       _ -> Left ("expected a duration above 0 and at most an hour, such as 30ms, 0.5s or 200us, got " ++ show s)

loopListArg :: ReadM [MasterLoop]
loopListArg = eitherReader $ \s ->
  case mapM parseMasterLoop (commaItems s) of
    Right ls@(_ : _) -> Right ls
    Right [] -> Left "expected master loops: threaded, epoll or both, separated by commas"
    Left why -> Left why

-- Durations separated by commas, each as 'durationArg' reads it (at most 10 s: a flush timeout).
durationListArg :: ReadM [Double]
durationListArg = eitherReader $ \s ->
  let items = commaItems s
      one item = case parseDuration item of
        Right d | d <= 10 -> Right d
        Right _ -> Left ("a flush timeout is at most 10s, got " ++ show item)
        Left why -> Left why
  in if null items then Left "expected durations separated by commas, such as 500us,2ms,8ms" else mapM one items

countListArg :: String -> Int -> ReadM [Int]
countListArg what limit = eitherReader $ \s ->
  let items = commaItems s
      ok item = not (null item) && all isDigit item && length item < 10 && read item >= (1 :: Int)
                && read item <= limit
  in if not (null items) && all ok items then Right (map read items)
     else Left ("expected " ++ what ++ ": whole numbers from 1 to " ++ show limit
                ++ " separated by commas, got " ++ show s)

sizeListArg :: ReadM [String]
sizeListArg = eitherReader $ \s ->
  let items = commaItems s
      ok item = case span isDigit item of
        (ds@(_ : _), unit) -> unit `elem` ["k", "m", "K", "M"] && length ds < 6
        _ -> False
  in if not (null items) && all ok items then Right items
     else Left ("expected nursery sizes such as 1m,4m,16m (a number then k or m), got " ++ show s)

-- A whole number from 0 to the limit.
countArg :: String -> Int -> ReadM Int
countArg what limit = eitherReader $ \s ->
  if not (null s) && all isDigit s && length s < 10 && read s <= limit
    then Right (read s)
    else Left ("expected " ++ what ++ ": a whole number from 0 to " ++ show limit ++ ", got " ++ show s)

positiveInt :: String -> Int -> ReadM Int
positiveInt what limit = eitherReader $ \s ->
  if not (null s) && all isDigit s && length s < 10 && read s >= (1 :: Int) && read s <= limit
    then Right (read s)
    else Left ("expected " ++ what ++ ": a whole number from 1 to " ++ show limit ++ ", got " ++ show s)

fibArg :: ReadM Int
fibArg = eitherReader $ \s ->
  if not (null s) && all isDigit s && length s < 4 && read s <= (60 :: Int)
    then Right (read s)
    else Left ("expected a Fibonacci argument from 0 to 60, got " ++ show s)

coreListArg :: ReadM [Int]
coreListArg = eitherReader $ \s -> case parseCpuList s of
  Right cs | not (null cs), all (>= 1) cs, all (<= 4096) cs -> Right cs
  Right _ -> Left ("core counts must be from 1 to 4096, got " ++ show s)
  Left why -> Left ("expected core counts such as 1,2 or 1-4: " ++ why)

secondsArg :: Double -> Double -> ReadM Double
secondsArg lo hi = eitherReader $ \s -> case reads s of
  [(x, "")] | x >= lo && x <= hi -> Right x
  _ -> Left ("expected seconds from " ++ show lo ++ " to " ++ show hi ++ ", got " ++ show s)

cpuArg :: ReadM Int
cpuArg = eitherReader $ \s ->
  if not (null s) && all isDigit s && length s < 6 && read s < (4096 :: Int)
    then Right (read s)
    else Left ("expected a CPU number from 0 to 4095, got " ++ show s)
