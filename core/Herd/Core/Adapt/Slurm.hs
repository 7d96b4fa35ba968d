-- | What adaptive scaling reads from and writes to SLURM, as pure text:
-- the @--slurm-adapt MIN..MAX@ range, @sbatch --parsable@'s answer and
-- @squeue@'s job states. Every parser names what it could not read, so a
-- surprising SLURM gives a clear log line rather than a wrong decision.
module Herd.Core.Adapt.Slurm
  ( parseAdaptRange
  , parseSubmitted
  , SlurmState (..)
  , parseQueue
  , squeueFormat
  ) where

import Data.Char (isDigit, isSpace)

-- | @MIN..MAX@ (or a single @N@ for both): the jobs an adaptive cluster
-- keeps at least and at most.
parseAdaptRange :: String -> Either String (Int, Int)
parseAdaptRange text = case break (== '.') (trim text) of
  (lo, "") -> count lo >>= \n -> atLeastOne n >> Right (n, n)
  (lo, '.' : '.' : hi) -> do
    a <- count lo
    b <- count hi
    atLeastOne b
    if a > b then Left ("the fewest jobs exceed the most in " ++ show text) else Right (a, b)
  _ -> Left ("not a job range MIN..MAX: " ++ show text)
  where
    count s
      | not (null s), all isDigit s, length s < 6 = Right (read s :: Int)
      | otherwise = Left ("not a job count: " ++ show s ++ " in " ++ show text)
    atLeastOne b
      | b < 1 = Left ("the most jobs must be at least 1 in " ++ show text)
      | otherwise = Right ()

-- | The job id @sbatch --parsable@ printed (@ID@ or @ID;CLUSTER@).
parseSubmitted :: String -> Either String String
parseSubmitted out = case lines out of
  (l : _) | let i = takeWhile (/= ';') (trim l), not (null i), all isDigit i -> Right i
  _ -> Left ("sbatch did not print a job id: " ++ show (take 200 out))

-- | A job's state as SLURM reports it, folded to what the policy needs.
data SlurmState
  = Queued   -- ^ waiting for resources (PENDING, CONFIGURING, ...)
  | Started  -- ^ RUNNING
  | Ending   -- ^ COMPLETING, or any state on the way out
  deriving (Eq, Show)

-- | The format 'parseQueue' reads: @squeue -h -o "%i %T"@.
squeueFormat :: String
squeueFormat = "%i %T"

-- | @squeue -h -o "%i %T"@'s lines as (job id, state); a line it cannot
-- read is named in its entry's 'Left'.
parseQueue :: String -> [Either String (String, SlurmState)]
parseQueue = map line . filter (not . all isSpace) . lines
  where
    line l = case words l of
      [i, st] | not (null i), all isDigit (takeWhile (/= '_') i) -> Right (i, state st)
      _ -> Left ("squeue printed a line herd cannot read: " ++ show l)
    state st
      | st `elem` queued = Queued
      | st == "RUNNING" = Started
      | otherwise = Ending
    queued = ["PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SUSPENDED"]

trim :: String -> String
trim = reverse . dropWhile isSpace . reverse . dropWhile isSpace
