-- | Parsing the addresses and host lists a cluster is configured with:
-- @HOST:PORT@ (the master's address, the dashboard's), @HOST[:N],...@
-- and hosts files. Pure; every error names the entry and says what was
-- expected.
module Herd.Core.Config.Parse
  ( HostSpec (..)
  , parseHostList
  , parseHostsFile
  , parseHostPortFrom
  , parseDashboardAddress
  , maxSimulatedPerHost
  , parseSimulatedCount
  , parseTasksPerNode
  ) where

import Data.Char (isDigit, isSpace)

-- | Parse @HOST:PORT@ (an IPv6 host in brackets, @[::1]:4000@), with the
-- port from the given lowest value to 65535.
parseHostPortFrom :: Int -> String -> Either String (String, Int)
parseHostPortFrom lowest s = case break (== ':') (reverse s) of
  (rport, ':' : rhost)
    | null rhost -> Left ("no host in " ++ show s ++ " (expected HOST:PORT)")
    | port <- reverse rport, not (null port), all isDigit port, length port <= 5
    , p <- read port, p >= lowest, p < 65536 -> Right (stripBrackets (reverse rhost), p)
    | otherwise -> Left ("bad port in " ++ show s ++ " (expected a number " ++ show lowest ++ "..65535)")
  _ -> Left ("no port in " ++ show s ++ " (expected HOST:PORT)")
  where
    stripBrackets h@('[' : rest) | not (null rest), last rest == ']' = init rest
                                 | otherwise = h
    stripBrackets h = h

-- | Parse a dashboard address, @HOST:PORT@, naming what is wrong; port 0
-- asks for a free port.
parseDashboardAddress :: String -> Either String (String, Int)
parseDashboardAddress = parseHostPortFrom 0

-- | The most workers one simulated host plays.
maxSimulatedPerHost :: Int
maxSimulatedPerHost = 65536

-- | A simulated host's worker count, as its process is told it: a whole
-- number from 1 to 'maxSimulatedPerHost'.
parseSimulatedCount :: String -> Either String Int
parseSimulatedCount s
  | not (null s), all isDigit s, length s < 10, n <- read s, n >= 1, n <= maxSimulatedPerHost = Right n
  | otherwise = Left ("expected a worker count from 1 to " ++ show maxSimulatedPerHost ++ ", got " ++ show s)

-- | A host to start workers on over ssh: @[USER\@]HOST@ and how many
-- workers (by default one per physical core of that host).
data HostSpec = HostSpec
  { hostTarget :: String      -- ^ what ssh connects to, e.g. @node7@ or @alice\@node7@
  , hostSlots  :: Maybe Int   -- ^ workers to start there
  } deriving (Eq, Show)

-- | Parse @a:8,b:8,c@ (a host without a count gets one worker per physical
-- core), naming the entry that does not parse; an empty entry (two commas,
-- or one at an end) is refused, naming its place.
parseHostList :: String -> Either String [HostSpec]
parseHostList s = case splitOn ',' (filter (not . isSpace) s) of
  [""] -> Left "no hosts given (expected HOST[:WORKERS],...)"
  entries -> case [ i | (i, "") <- zip [1 :: Int ..] entries ] of
    i : _ -> Left ("entry " ++ show i ++ " of " ++ show (length entries) ++ " in the host list is empty"
                   ++ " (two commas, or one at an end; expected HOST[:WORKERS],...)")
    [] -> mapM (parseEntry ':') entries

-- | Parse a hosts file: one host per line, @HOST [WORKERS]@ or
-- @HOST:WORKERS@; blank lines and text after @#@ are ignored. Errors name
-- the line.
parseHostsFile :: String -> Either String [HostSpec]
parseHostsFile text = do
  specs <- sequence
    [ either (\why -> Left ("line " ++ show n ++ ": " ++ why)) Right (parseLine l)
    | (n, raw) <- zip [1 :: Int ..] (lines text)
    , let l = unwords (words (takeWhile (/= '#') raw))
    , not (null l) ]
  if null specs then Left "the hosts file lists no host" else Right specs
  where
    parseLine l = case words l of
      [one] -> parseEntry ':' one
      [h, n] -> parseEntry ':' (h ++ ":" ++ n)
      _ -> Left ("expected HOST [WORKERS], got " ++ show l)

parseEntry :: Char -> String -> Either String HostSpec
parseEntry sep entry = case break (== sep) entry of
  (host, []) -> HostSpec <$> checkHost host <*> pure Nothing
  (host, _ : count)
    | not (null count), all isDigit count, length count < 6, read count >= (1 :: Int) ->
        HostSpec <$> checkHost host <*> pure (Just (read count))
    | otherwise -> Left ("bad worker count in host entry " ++ show entry
                         ++ " (expected HOST:N with N a whole number from 1)")
  where
    checkHost h
      | null h = Left ("no host name in entry " ++ show entry)
      | head h == '-' = Left ("host name may not start with '-': " ++ show entry)
      | any (\c -> isSpace c || c `elem` "'\"`$;&|<>()\\") h =
          Left ("host name has a character that is not allowed: " ++ show entry)
      | otherwise = Right h

splitOn :: Char -> String -> [String]
splitOn c s = case break (== c) s of
  (a, []) -> [a]
  (a, _ : rest) -> a : splitOn c rest

-- | Parse SLURM's @SLURM_TASKS_PER_NODE@ (@2(x3),1@: three nodes of two
-- tasks, then one of one) into each node's task count, in node order.
parseTasksPerNode :: String -> Either String [Int]
parseTasksPerNode s = concat <$> mapM group (splitOn ',' s)
  where
    group g = case break (== '(') g of
      (n, "") -> (: []) <$> count n
      (n, '(' : 'x' : rest) | not (null rest), last rest == ')' -> replicate <$> count (init rest) <*> count n
      _ -> bad
    count n | not (null n), all isDigit n, length n < 7, read n >= (1 :: Int) = Right (read n)
            | otherwise = bad
    bad = Left ("expected task counts like 2(x3),1, got " ++ show s)
    splitOn c xs = case break (== c) xs of
      (a, []) -> [a]
      (a, _ : rest) -> a : splitOn c rest

