{-# LANGUAGE BangPatterns #-}
-- | The vocabulary every part of herd shares, with no behaviour: numbers of
-- workers, batches and jobs, task ranges, the choices a configuration
-- names (batching, master loop, transport), how a function is named on the
-- wire ('TaskRef'), and hex for build identities.
--
-- Promise: this module imports nothing of herd; the pure library
-- (@herd-core@) builds on it, and its package dependencies hold no IO
-- library.
module Herd.Core.Base
  ( -- * Numbers
    WorkerId
  , BatchId
  , JobId
  , StreamId
    -- * Tasks
  , Range (..)
  , rangeSize
  , rangeIndices
  , takeTasks
  , Batching (..)
  , TaskRef (..)
    -- * Choices
  , MasterLoop (..)
  , parseMasterLoop
  , masterLoopName
  , TransportKind (..)
  , transportName
  , parseTransportKind
    -- * Hex
  , hexEncode
  , shortBuildId
  ) where

import qualified Data.ByteString as B
import Data.Sequence (Seq, ViewL (..), viewl, (<|))
import Data.List (intercalate)
import Data.Word (Word64)
import GHC.Fingerprint (Fingerprint)
import GHC.StaticPtr (StaticKey)

-- | A worker's number, unique for the life of a cluster.
type WorkerId = Int

-- | A batch's number, unique for the life of a cluster.
type BatchId = Word64

-- | A job's number, unique for the life of a cluster.
type JobId = Word64

-- | A stream process's number, unique for the life of a cluster.
type StreamId = Word64

-- | Task indices @[lo, hi)@.
data Range = Range !Int !Int
  deriving (Eq, Show)

-- | How many tasks a range holds.
rangeSize :: Range -> Int
rangeSize (Range lo hi) = hi - lo

-- | The task indices of some ranges, in order.
rangeIndices :: [Range] -> [Int]
rangeIndices = concatMap (\(Range lo hi) -> [lo .. hi - 1])

-- | Take up to n tasks from the front of some ranges: the ranges taken,
-- how many tasks they hold, and what is left.
takeTasks :: Int -> Seq Range -> ([Range], Int, Seq Range)
takeTasks want = go [] 0
  where
    go acc !got q
      | got >= want = (reverse acc, got, q)
      | otherwise = case viewl q of
          EmptyL -> (reverse acc, got, q)
          r@(Range lo hi) :< rest
            | rangeSize r <= want - got -> go (r : acc) (got + rangeSize r) rest
            | otherwise ->
                let cut = lo + (want - got)
                in (reverse (Range lo cut : acc), want, Range cut hi <| rest)

-- | How many tasks go to a worker at a time.
data Batching
  = Adaptive
    -- ^ sized from measured task times so that a batch takes about
    -- 'Herd.Settings.configBatchTarget' seconds, and shrinking as the job
    -- nears its end (factoring), so no worker is left with a long tail
    -- (default)
  | FixedBatch Int
    -- ^ always this many tasks (the last batch may be smaller)
  deriving (Eq, Show)

-- | What the master sends to name a function: its static key, a readable
-- name, and the fingerprints of its argument and result types (a task's,
-- or a stream process's element types).
data TaskRef = TaskRef
  { refKey        :: !StaticKey
  , refName       :: !String
  , refArgType    :: !Fingerprint
  , refResultType :: !Fingerprint
  } deriving (Eq, Ord, Show)

-- | How the master reads its workers' links, for every API.
data MasterLoop
  = ThreadedLoop  -- ^ one thread per worker over GHC's IO manager, sharing the core under a lock
  | EpollLoop     -- ^ one thread over @epoll@ directly (Linux; elsewhere the threaded loop)
  deriving (Eq, Show, Read, Enum, Bounded)

-- | The name used on the command line and in reports: @threaded@ or @epoll@.
masterLoopName :: MasterLoop -> String
masterLoopName l = case l of
  ThreadedLoop -> "threaded"
  EpollLoop -> "epoll"

-- | Parse @threaded@ or @epoll@, naming what is wrong.
parseMasterLoop :: String -> Either String MasterLoop
parseMasterLoop = parseNamed "master loop" masterLoopName

-- Parse one of a type's values by the name it goes by; the error names the
-- choices.
parseNamed :: (Enum a, Bounded a) => String -> (a -> String) -> String -> Either String a
parseNamed what nameOf s = case [ x | x <- [minBound .. maxBound], nameOf x == s ] of
  [x] -> Right x
  _ -> Left ("unknown " ++ what ++ " " ++ show s ++ " (expected " ++ choices ++ ")")
  where
    names = map nameOf [minBound .. maxBound]
    choices = case reverse names of
      lastName : before@(_ : _) -> intercalate ", " (reverse before) ++ " or " ++ lastName
      _ -> concat names

-- | The ways a master and a worker can be linked.
data TransportKind
  = TcpTransport    -- ^ TCP: across hosts, and the fallback on one
  | UnixTransport   -- ^ a Unix-domain socket: one host, through the kernel
  | ShmTransport    -- ^ shared-memory rings: one host, no kernel on the data path
  deriving (Eq, Ord, Show, Enum, Bounded)

-- | The name used on the command line and in reports: @tcp@, @unix@, @shm@.
transportName :: TransportKind -> String
transportName k = case k of
  TcpTransport -> "tcp"
  UnixTransport -> "unix"
  ShmTransport -> "shm"

-- | Parse a transport's name, naming the choices when it is none of them.
parseTransportKind :: String -> Either String TransportKind
parseTransportKind = parseNamed "transport" transportName

-- | Lower-case hex of some bytes.
hexEncode :: B.ByteString -> String
hexEncode = concatMap (\w -> [digits !! fromIntegral (w `div` 16), digits !! fromIntegral (w `mod` 16)]) . B.unpack
  where digits = "0123456789abcdef"

-- | The first 16 hex digits of a build identity: enough to tell builds
-- apart in messages and file names.
shortBuildId :: B.ByteString -> String
shortBuildId = take 16 . hexEncode
