-- | Why a worker's link ends, and why a stream breaks, as values: the
-- shell and the core pass these, and they become text only where a person
-- reads them (a log line, the dashboard, a 'Herd.Core.Error.HerdError'
-- sentence), through 'renderFault' and 'renderBreak'.
--
-- Promise: every fault renders to one line that names what went wrong,
-- and the rendering is the text herd has always shown for it.
module Herd.Core.Fault
  ( LinkFault (..)
  , Violation (..)
  , StreamBreak (..)
  , renderFault
  , renderViolation
  , renderBreak
  ) where

import Data.Word (Word64)
import Herd.Core.Base (WorkerId)

-- | Why a worker's link ended.
data LinkFault
  = PeerLost !String
    -- ^ the link or the worker's process failed; the system's words
  | SendFailed !String
    -- ^ a send to the worker failed; the system's words
  | BadPacket !String !String
    -- ^ a packet from this peer (its address) failed the packet layer's
    -- checks: what was wrong
  | BadMessage !String !String
    -- ^ a message from this peer (its address) did not decode: why
  | ProtocolViolation !Violation
    -- ^ a well-formed message the protocol does not allow at that point
  | MemoryExceeded !Int !Int
    -- ^ the worker's resident memory (bytes) was over its limit (bytes):
    -- the master killed it
  deriving (Eq, Show)

-- | A well-formed message that the protocol does not allow where it came.
data Violation
  = UnexpectedResults !Int
    -- ^ a run of this many results that no batch was waiting for
  | EarlyBatchEnd !Word64 !Int !Int
    -- ^ this batch ended after this many of that many results
  | MisplacedFailure !Word64 !Int !Int
    -- ^ this batch failed at this position after that many results
  | UnknownBatchEnd !Word64
    -- ^ the end of a batch that is not the one in progress
  | OverCredit !Word64 !Int !Int
    -- ^ this stream sent this many elements with credit for that many
  | ForeignStream !Word64
    -- ^ a message for a stream of another worker
  | SessionViolation !String
    -- ^ what an evolve session found wrong in its worker's answer
  deriving (Eq, Show)

-- | Why a stream process ended before its output did.
data StreamBreak
  = StreamClusterClosed                   -- ^ the cluster was closed
  | StreamWorkerLost !WorkerId !LinkFault  -- ^ its worker was lost
  | StreamProcessFailed !String            -- ^ the process failed on its worker: why
  deriving (Eq, Show)

-- | A link fault as one line of text.
renderFault :: LinkFault -> String
renderFault f = case f of
  PeerLost why -> why
  SendFailed why -> "send failed: " ++ why
  BadPacket peer why -> "bad packet from " ++ peer ++ ": " ++ why
  BadMessage peer why -> "bad message from " ++ peer ++ ": " ++ why
  ProtocolViolation v -> "bad message: " ++ renderViolation v
  MemoryExceeded rss limit ->
    "it exceeded its memory limit (" ++ show (mib rss) ++ " MiB resident, limit " ++ show (mib limit) ++ " MiB)"
  where mib b = b `div` (1024 * 1024)

-- | A protocol violation as text.
renderViolation :: Violation -> String
renderViolation v = case v of
  UnexpectedResults k -> "a run of " ++ show k ++ " results that no batch was waiting for"
  EarlyBatchEnd bid got total ->
    "batch " ++ show bid ++ " ended after " ++ show got ++ " of " ++ show total ++ " results"
  MisplacedFailure bid pos got ->
    "batch " ++ show bid ++ " failed at position " ++ show pos ++ " after " ++ show got ++ " results"
  UnknownBatchEnd bid -> "an end of batch " ++ show bid ++ ", which is not the batch in progress"
  OverCredit sid n allowed ->
    "stream " ++ show sid ++ " sent " ++ show n ++ " elements with credit for " ++ show allowed
  ForeignStream sid -> "message for stream " ++ show sid ++ " of another worker"
  SessionViolation why -> why

-- | A stream's break as text.
renderBreak :: StreamBreak -> String
renderBreak b = case b of
  StreamClusterClosed -> "the cluster was closed"
  StreamWorkerLost w f -> "its worker " ++ show w ++ " was lost: " ++ renderFault f
  StreamProcessFailed why -> why
