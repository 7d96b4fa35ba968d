-- | What adaptive scaling reads from and writes to SLURM, as pure text:
-- the @--slurm-adapt MIN..MAX@ range, @sbatch --parsable@'s answer and
-- @squeue@'s job states. Every parser names what it could not read, so a
-- surprising SLURM gives a clear log line rather than a wrong decision.
-- Also the adaptive settings ('SlurmAdapt'), their check, and the job a
-- submission asks for ('sbatchArguments', 'agentScript').
module Herd.Core.Adapt.Slurm
  ( parseAdaptRange
  , parseWalltime
  , SlurmAdapt (..)
  , defaultSlurmAdapt
  , validSlurmAdapt
  , AgentJob (..)
  , sbatchArguments
  , agentScript
  , adaptGroupPrefix
  , parseSubmitted
  , SlurmState (..)
  , parseQueue
  , squeueFormat
  ) where

import Data.Char (isDigit, isSpace)
import Herd.Core.Adapt (AdaptLimits (..), defaultAdaptLimits, validAdaptLimits)

-- | Adaptive scaling under SLURM: the policy's limits, and what each
-- submitted job asks SLURM for.
data SlurmAdapt = SlurmAdapt
  { slurmAdaptLimits    :: !AdaptLimits   -- ^ jobs, workers per job, the waits
  , slurmAdaptPartition :: !(Maybe String)  -- ^ @--partition@, if any
  , slurmAdaptWalltime  :: !(Maybe String)  -- ^ @--time@, in SLURM's form (@MM@, @HH:MM:SS@, @D-HH@, ...)
  , slurmAdaptLead      :: !Double          -- ^ seconds before its walltime a job stops taking work
  , slurmAdaptOptions   :: ![String]        -- ^ more @sbatch@ options, each whole (@--account=x@)
  } deriving (Eq, Show)

-- | The default limits, no partition, walltime or extra option, and a
-- lead of 60 s.
defaultSlurmAdapt :: SlurmAdapt
defaultSlurmAdapt = SlurmAdapt defaultAdaptLimits Nothing Nothing 60 []

-- | The settings, or what is wrong with them.
validSlurmAdapt :: SlurmAdapt -> Either String SlurmAdapt
validSlurmAdapt a = do
  _ <- validAdaptLimits (slurmAdaptLimits a)
  case slurmAdaptPartition a of
    Just p | null p || any isSpace p -> Left ("not a partition name: " ++ show p)
    _ -> Right ()
  wall <- maybe (Right Nothing) (fmap Just . parseWalltime) (slurmAdaptWalltime a)
  case wall of
    Just w | not (slurmAdaptLead a >= 0 && slurmAdaptLead a < fromIntegral w) ->
      Left ("the lead before the walltime (" ++ show (slurmAdaptLead a) ++ " s) must be from 0 to less than the walltime ("
            ++ show w ++ " s)")
    _ | slurmAdaptLead a < 0 -> Left "the lead before the walltime must not be negative"
      | otherwise -> Right ()
  case filter (\o -> null o || head o /= '-' || '\n' `elem` o) (slurmAdaptOptions a) of
    (o : _) -> Left ("an sbatch option must start with '-' and be one line: " ++ show o)
    [] -> Right a

-- | SLURM's time limit forms as seconds: @M@, @M:S@, @H:M:S@, @D-H@,
-- @D-H:M@, @D-H:M:S@.
parseWalltime :: String -> Either String Int
parseWalltime text = case break (== '-') t of
  (d, '-' : rest) -> do
    days <- num d
    parts <- mapM num (splitOn rest)
    case parts of
      [h] -> total [days * 24 + h, 0, 0]
      [h, m] -> total [days * 24 + h, m, 0]
      [h, m, s] -> total [days * 24 + h, m, s]
      _ -> bad
  _ -> do
    parts <- mapM num (splitOn t)
    case parts of
      [m] -> total [0, m, 0]
      [m, s] -> total [0, m, s]
      [h, m, s] -> total [h, m, s]
      _ -> bad
  where
    t = trim text
    bad = Left ("not a SLURM time limit (M, M:S, H:M:S, D-H, D-H:M or D-H:M:S): " ++ show text)
    num s | not (null s), all isDigit s, length s < 7 = Right (read s :: Int)
          | otherwise = bad
    total [h, m, s] | h * 3600 + m * 60 + s > 0 = Right (h * 3600 + m * 60 + s)
    total _ = Left ("a time limit must be positive: " ++ show text)
    splitOn s = case break (== ':') s of
      (a, ':' : b) -> a : splitOn b
      (a, _) -> [a]

-- | The group an adaptive job's workers report: this and the job id.
adaptGroupPrefix :: String
adaptGroupPrefix = "slurm-adapt:"

-- | What one submitted job runs: a host agent of this executable.
data AgentJob = AgentJob
  { agentName       :: !String     -- ^ the SLURM job name, the same for every job of one master
  , agentLogDir     :: !FilePath   -- ^ where each job's output goes
  , agentExecutable :: !FilePath
  , agentEnv        :: ![(String, String)]  -- ^ what the agent is told (address, secret file, workers, ...)
  } deriving (Eq, Show)

-- | @sbatch@'s arguments for one job (the script comes on its standard
-- input): parsable output, the job's name and output file, one task with
-- a CPU per worker, then the partition, walltime and the user's options.
sbatchArguments :: SlurmAdapt -> AgentJob -> [String]
sbatchArguments a job =
  [ "--parsable", "--job-name=" ++ agentName job, "--output=" ++ agentLogDir job ++ "/%j.log"
  , "--ntasks=1", "--cpus-per-task=" ++ show (adaptHostSlots (slurmAdaptLimits a)) ]
  ++ [ "--partition=" ++ p | Just p <- [slurmAdaptPartition a] ]
  ++ [ "--time=" ++ w | Just w <- [slurmAdaptWalltime a] ]
  ++ slurmAdaptOptions a

-- | The batch script: export the agent's settings (its group names the
-- job, from @SLURM_JOB_ID@) and run the executable, which serves as the
-- agent before anything of the program runs.
agentScript :: AgentJob -> String
agentScript job = unlines $
  [ "#!/bin/sh" ]
  ++ [ "export " ++ k ++ "=" ++ quote v | (k, v) <- agentEnv job ]
  ++ [ "export HERD_GROUP=\"" ++ adaptGroupPrefix ++ "$SLURM_JOB_ID\""
     , "exec " ++ quote (agentExecutable job) ]
  where
    quote v = "'" ++ concatMap (\c -> if c == '\'' then "'\\''" else [c]) v ++ "'"

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
