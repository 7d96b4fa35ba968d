-- | Which CPUs this process may use, and which of them are distinct
-- physical cores.
--
-- Reads Linux's @/proc/self/status@ (the affinity mask, so a run inside
-- @taskset@ or a SLURM allocation sees only its own CPUs) and
-- @/sys/devices/system/cpu/cpuN/topology/thread_siblings_list@. Elsewhere,
-- or when those files are missing, every CPU the runtime reports counts as
-- a core. The list parser is pure and total.
module Herd.Node.Topology
  ( allowedCpus
  , physicalCores
  , parseCpuList
  ) where

import Control.Exception (IOException, try)
import Data.Char (isDigit, isSpace)
import Data.List (isPrefixOf, nub, sort)
import GHC.Conc (getNumProcessors)

-- | Parse a Linux CPU list such as @0-3,8,10-11@.
parseCpuList :: String -> Either String [Int]
parseCpuList text
  | null trimmed = Left "empty CPU list"
  | otherwise = fmap (sort . nub . concat) (mapM item (splitOn ',' trimmed))
  where
    trimmed = filter (not . isSpace) text
    item part = case break (== '-') part of
      (a, "") -> (: []) <$> number a
      (a, '-' : b) -> do
        lo <- number a
        hi <- number b
        if lo <= hi && hi - lo < 65536 then Right [lo .. hi]
                                       else Left ("bad CPU range " ++ part)
      _ -> Left ("bad CPU list item " ++ part)
    number s
      | not (null s), all isDigit s, length s < 7 = Right (read s)
      | otherwise = Left ("not a CPU number: " ++ show s)

splitOn :: Char -> String -> [String]
splitOn c s = case break (== c) s of
  (a, []) -> [a]
  (a, _ : rest) -> a : splitOn c rest

-- | CPUs this process is allowed to run on.
allowedCpus :: IO [Int]
allowedCpus = do
  status <- try (readFile "/proc/self/status") :: IO (Either IOException String)
  let fromStatus = case status of
        Right text -> [ v | l <- lines text, "Cpus_allowed_list:" `isPrefixOf` l
                          , Right v <- [parseCpuList (drop (length "Cpus_allowed_list:") l)] ]
        Left _ -> []
  case fromStatus of
    (cpus : _) | not (null cpus) -> pure cpus
    _ -> (\n -> [0 .. n - 1]) <$> getNumProcessors

-- | One CPU per physical core among the allowed CPUs: the lowest-numbered
-- allowed hyperthread sibling of each core.
physicalCores :: IO [Int]
physicalCores = do
  cpus <- allowedCpus
  reps <- mapM (representative cpus) cpus
  pure (nub [ c | (c, r) <- zip cpus reps, c == r ])
  where
    representative cpus cpu = do
      let path = "/sys/devices/system/cpu/cpu" ++ show cpu ++ "/topology/thread_siblings_list"
      sib <- try (readFile path) :: IO (Either IOException String)
      pure $ case sib of
        Right text | Right siblings <- parseCpuList text
                   , (first : _) <- filter (`elem` cpus) siblings -> first
        _ -> cpu
