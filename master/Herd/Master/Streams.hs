-- | The caller's side of stream processes ("Herd.Master.Job.Stream"): opening one on
-- the least loaded worker, feeding its input straight into that worker's
-- packet sender, and the control messages (end of input, consumed output,
-- close) that go through the master's core.
--
-- Promise: a feeder never queues more than 'streamBacklogLimit' bytes on a
-- link ahead of its writer thread, so a window of large elements cannot
-- push the link past the limit at which the master drops a worker as one
-- that stopped reading.
module Herd.Master.Streams
  ( StreamInput
  , streamId
  , openStream
  , feedStream
  , streamBacklogLimit
  , endStreamInput
  , consumedStream
  , flushStream
  , streamEarlyCapacity
  , closeStream
  ) where

import Control.Concurrent.MVar (newEmptyMVar, takeMVar)
import Control.Concurrent.STM
import Control.Exception (throwIO)
import Control.Monad (when)
import Data.Word (Word64, Word8)
import Foreign.Ptr (Ptr)
import Herd.Settings (Config (..))
import Herd.Master.Cluster
import Herd.Core.Master.Events (Event (..))
import Herd.Master.Shell
import Herd.Master.Types (StreamEnds)
import Herd.Packet
import Herd.Core.Packet.Policy (policyEarlyCapacity)
import Herd.Task (TaskRef)
import Herd.Core.Wire.Tags (tagStreamIn)

-- | Where an open stream's input goes: its number and its worker's
-- packet sender.
data StreamInput = StreamInput
  { streamId      :: !Word64   -- ^ the stream's number
  , streamSender  :: !Sender
  , streamBacklog :: !(TVar Int)  -- ^ bytes queued for the link's writer thread
  }

-- | Open a stream process of this reference on the least loaded worker,
-- with this flow window.
openStream :: Cluster -> TaskRef -> StreamEnds -> IO StreamInput
openStream cluster ref ends = do
  awaitSomeWorker cluster
  sid <- freshId cluster
  reply <- newEmptyMVar
  shellRegister (clShell cluster) True (RegisterStream sid ends reply)
    [OpenStream sid ref (configStreamWindow (clConfig cluster))]
  either throwIO (\(sender, backlog) -> pure (StreamInput sid sender backlog)) =<< takeMVar reply

-- | Send input elements of a stream, encoded back to back (these bytes,
-- this many elements): appended to the run of elements buffered for its
-- worker ('appendValuesToRun'), without a step of the core
-- (which only routes the stream's other messages). The caller counts the
-- credit. Waits first while the worker's link has more than
-- 'streamBacklogLimit' bytes queued that the kernel or ring would not take:
-- the window counts elements, and a window of large elements would
-- otherwise pile up past the link's limit, and the worker would be
-- dropped as one that stopped reading.
feedStream :: StreamInput -> Ptr Word8 -> Int -> Int -> IO ()
feedStream input p n k = do
  queued <- readTVarIO (streamBacklog input)
  when (queued > streamBacklogLimit) $
    atomically $ readTVar (streamBacklog input) >>= \q -> check (q <= streamBacklogLimit `div` 2)
  appendValuesToRun (streamSender input) tagStreamIn (streamId input) p n k

-- | The packet capacity behind the stream's early sends
-- ('Herd.Stream.Flow.EarlyFlushes') and its batches of ready elements:
-- none with chunking off.
streamEarlyCapacity :: StreamInput -> Int
streamEarlyCapacity = policyEarlyCapacity . senderPolicy . streamSender

-- | Bytes a stream's worker link may hold queued before its feeder waits:
-- 8 MiB, an eighth of the 64 MiB after which a link counts as stopped.
streamBacklogLimit :: Int
streamBacklogLimit = 8 * 1024 * 1024

-- | The stream's input ended.
endStreamInput :: Cluster -> Word64 -> IO ()
endStreamInput cluster sid = shellStep (clShell cluster) True [EndStreamInput sid]

-- | The caller read this many more output elements: the worker may send
-- as many more.
consumedStream :: Cluster -> Word64 -> Int -> IO ()
consumedStream cluster sid k = shellStep (clShell cluster) True [ConsumedStream sid k]

-- | The caller has no more input to send for now: send what is buffered
-- for the stream's worker.
flushStream :: StreamInput -> IO ()
flushStream = flushIdle . streamSender

-- | Stop a stream process early: its worker stops it, and late output is
-- dropped.
closeStream :: Cluster -> Word64 -> IO ()
closeStream cluster sid = shellRegister (clShell cluster) True (Forget Nothing (Just sid)) [CloseStream sid]
