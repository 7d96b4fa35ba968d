-- | How a cluster is started and run.
--
-- 'Config' is a plain record: start from 'defaultConfig' and change the
-- fields you need with record update. Every field has a default that needs
-- no tuning; 'validateConfig' names the first field that is out of range,
-- and 'Herd.withCluster' calls it before starting anything.
module Herd.Config
  ( Config (..)
  , Pinning (..)
  , Batching (..)
  , defaultConfig
  , defaultWorkerRtsOptions
  , validateConfig
  ) where

import Data.List (nub)
import Herd.Error (HerdError (..))
import System.IO (hPutStrLn, stderr)

-- | Which CPUs local workers are pinned to.
data Pinning
  = PinPhysicalCores   -- ^ one worker per physical core; hyperthread siblings skipped (default)
  | PinLogicalCores    -- ^ one worker per logical CPU, hyperthread siblings included
  | PinCores [Int]     -- ^ exactly these CPU numbers, in this order
  | NoPinning          -- ^ let the kernel place workers
  deriving (Eq, Show)

-- | How many tasks go to a worker at a time.
data Batching
  = Adaptive
    -- ^ sized from measured task times so that a batch takes about
    -- 'configBatchTarget' seconds, and shrinking as the job nears its end
    -- (factoring), so no worker is left with a long tail (default)
  | FixedBatch Int
    -- ^ always this many tasks (the last batch may be smaller)
  deriving (Eq, Show)

-- | Settings of a cluster.
data Config = Config
  { configWorkers          :: Maybe Int
    -- ^ local worker processes to start; 'Nothing' starts one per selected
    -- core, @Just 0@ starts none (workers then join by hand)
  , configPinning          :: Pinning
    -- ^ CPUs the local workers are pinned to
  , configWorkerRtsOptions :: [String]
    -- ^ RTS options of local workers, passed in @GHCRTS@ (so the binary
    -- must be linked with @-rtsopts@ for them to apply)
  , configMaxFrameBytes    :: Int
    -- ^ largest frame accepted from a peer, checked before allocating
  , configBatching         :: Batching
    -- ^ batch sizing policy
  , configBatchTarget      :: Double
    -- ^ seconds of work an adaptive batch aims for
  , configStartTimeout     :: Double
    -- ^ seconds to wait for local workers to connect
  , configHandshakeTimeout :: Double
    -- ^ seconds a new connection gets to complete the handshake
  , configListenHost       :: String
    -- ^ address the master listens on (default loopback)
  , configListenPort       :: Int
    -- ^ port the master listens on; 0 picks a free one
  , configLog              :: String -> IO ()
    -- ^ where log lines go (default: standard error)
  }

-- | RTS options every local worker gets unless told otherwise: one
-- capability (a worker is one core; more made messaging slower here) and a
-- 32 MB nursery. @herd bench nursery@ measured an allocation-heavy farm on
-- a 2-core machine at 1.3-1.7x the best time with -A1m or -A4m, and within
-- about 6% of the best with -A32m; -A64m and -A128m were no better than
-- that noise while doubling and quadrupling each worker's nursery.
defaultWorkerRtsOptions :: [String]
defaultWorkerRtsOptions = ["-N1", "-A32m"]

-- | Sensible defaults: one worker per physical core, pinned, adaptive
-- batches, 64 MiB frame cap, loopback listener on a free port.
defaultConfig :: Config
defaultConfig = Config
  { configWorkers          = Nothing
  , configPinning          = PinPhysicalCores
  , configWorkerRtsOptions = defaultWorkerRtsOptions
  , configMaxFrameBytes    = 64 * 1024 * 1024
  , configBatching         = Adaptive
  , configBatchTarget      = 0.02
  , configStartTimeout     = 30
  , configHandshakeTimeout = 5
  , configListenHost       = "127.0.0.1"
  , configListenPort       = 0
  , configLog              = hPutStrLn stderr
  }

-- | Check every field, naming the first that is invalid.
validateConfig :: Config -> Either HerdError Config
validateConfig c
  | Just n <- configWorkers c, n < 0 =
      bad "configWorkers" ("must be 0 or more, got " ++ show n)
  | Just n <- configWorkers c, n > 4096 =
      bad "configWorkers" ("at most 4096 local workers, got " ++ show n)
  | PinCores [] <- configPinning c =
      bad "configPinning" "PinCores needs at least one CPU number"
  | PinCores cs <- configPinning c, any (< 0) cs =
      bad "configPinning" ("CPU numbers must be 0 or more, got " ++ show cs)
  | PinCores cs <- configPinning c, nub cs /= cs =
      bad "configPinning" ("CPU numbers must not repeat, got " ++ show cs)
  | configMaxFrameBytes c < 4096 || configMaxFrameBytes c > 2 ^ (31 :: Int) - 1 =
      bad "configMaxFrameBytes" ("must be between 4096 and 2147483647, got "
                                 ++ show (configMaxFrameBytes c))
  | FixedBatch n <- configBatching c, n < 1 =
      bad "configBatching" ("a fixed batch needs at least 1 task, got " ++ show n)
  | not (configBatchTarget c > 0 && configBatchTarget c <= 60) =
      bad "configBatchTarget" ("must be in (0, 60] seconds, got " ++ show (configBatchTarget c))
  | not (configStartTimeout c > 0) =
      bad "configStartTimeout" "must be positive"
  | not (configHandshakeTimeout c > 0) =
      bad "configHandshakeTimeout" "must be positive"
  | configListenPort c < 0 || configListenPort c > 65535 =
      bad "configListenPort" ("must be 0..65535, got " ++ show (configListenPort c))
  | null (configListenHost c) =
      bad "configListenHost" "must not be empty"
  | any (\o -> null o || head o /= '-') (configWorkerRtsOptions c) =
      bad "configWorkerRtsOptions" ("each option must start with '-', got "
                                    ++ show (configWorkerRtsOptions c))
  | otherwise = Right c
  where
    bad field why = Left (ConfigError field why)
