-- | A stream process on a worker ("Herd.Master.Job.Stream"): its own thread, which
-- reads its input runs as the master sends them, returns credit as it
-- consumes them, and sends its output as the master's credit allows,
-- gathered into runs. The worker's loop ("Herd.Node.Worker") starts one
-- per 'StreamOpen' and feeds its slot.
--
-- Promise: the process ends with exactly one 'StreamDone' or
-- 'StreamAborted', and leaves the worker's table of streams when it does.
module Herd.Node.Worker.Streams
  ( Slot (..)
  , StreamHost (..)
  , runStream
  ) where

import Control.Concurrent (ThreadId)
import Control.Concurrent.MVar (MVar)
import Control.Concurrent.STM
import Control.Monad (unless, when)
import qualified Data.ByteString as B
import Data.IORef
import qualified Data.Map.Strict as M
import qualified Data.Text as T
import Data.Word (Word64)
import Herd.Core.Packet.Policy (Urgency (..), policyEarlyCapacity)
import Herd.Core.Wire
import Herd.Core.Wire.Tags (tagStreamOut)
import Herd.Packet
import Herd.Task.Process (ProcessRunner (..))
import Herd.Task.StreamSend (newStreamSink)
import Herd.Task.StreamFlow (flowAcked, flowOpen, grantDue, newFlow, streamWindowBytes)
import Herd.Task (tryUser)
import Herd.Wire.Encode
import Herd.Wire.Staging (newStaging)
import System.IO.Unsafe (unsafeInterleaveIO)

-- | A stream process running on this worker.
data Slot = Slot
  { slotInput  :: !(TQueue (Maybe [(Int, B.ByteString)]))  -- ^ runs of input elements; 'Nothing' ends it
  , slotCredit :: !(TVar Int)                        -- ^ output elements the master took, not yet counted by the process
  , slotThread :: !(MVar ThreadId)                   -- ^ its thread, to stop it
  }

-- | What a stream process needs of the worker that runs it.
data StreamHost = StreamHost
  { shSender :: !Sender                         -- ^ the link to the master
  , shBusy   :: !(IORef Int)                    -- ^ stream threads computing (not waiting): at 0 the buffer is flushed
  , shWindow :: !Int                            -- ^ the stream window the master sent
  , shSlots  :: !(IORef (M.Map Word64 Slot))    -- ^ the worker's streams
  }

-- | One stream process: its output, element by element as credit allows,
-- appended to the run buffered for the master (ready ones in batches,
-- "Herd.Task.StreamSend"); its input, read
-- lazily a run at a time, with credit returned as it is consumed.
runStream :: StreamHost -> Word64 -> ProcessRunner -> Slot -> IO ()
runStream sv sid pr slot = do
  taken <- newIORef (0 :: Int, 0 :: Int)
  flow <- newFlow (shWindow sv) streamWindowBytes
  let waiting act = do
        -- Eden's rule: when no stream thread can go on, send what is buffered
        n <- atomicModifyIORef' (shBusy sv) (\k -> (k - 1, k - 1))
        when (n == 0) $ flushIdle (shSender sv)
        r <- act
        atomicModifyIORef' (shBusy sv) (\k -> (k + 1, ()))
        pure r
      nextChunk = do
        ready <- atomically (tryReadTQueue (slotInput slot))
        chunk <- maybe (waiting (atomically (readTQueue (slotInput slot)))) pure ready
        case chunk of
          Nothing -> pure []
          Just xs -> do
            let add (t, b) = (t + sum (map fst xs), b + sum (map (B.length . snd) xs))
            (k, bytes) <- atomicModifyIORef' taken (\tb -> let tb' = add tb in (tb', tb'))
            when (grantDue (shWindow sv) streamWindowBytes k bytes) $ do
              writeIORef taken (0, 0)
              sendMessage (shSender sv) Urgent (encodeFromWorker (StreamTaken sid (fromIntegral k)))
            rest <- unsafeInterleaveIO nextChunk
            pure (xs ++ rest)
      -- the master's acknowledgements are taken from the shared counter
      -- all at once, when the window is full
      waitOpen = do
        open <- flowOpen flow
        unless open $ do
          acked <- atomically $ swapTVar (slotCredit slot) 0
          a <- if acked > 0 then pure acked else waiting $ atomically $ do
            c <- readTVar (slotCredit slot)
            when (c <= 0) retry
            writeTVar (slotCredit slot) 0
            pure c
          flowAcked flow a
          waitOpen
  sink <- newStreamSink flow (policyEarlyCapacity (senderPolicy (shSender sv))) waitOpen
            (appendValuesToRun (shSender sv) tagStreamOut sid) (flushIdle (shSender sv))
  inputs <- unsafeInterleaveIO nextChunk
  staging <- newStaging
  outcome <- tryUser (prRun pr inputs staging sink)
  modifyIORef' (shSlots sv) (M.delete sid)
  atomicModifyIORef' (shBusy sv) (\k -> (k - 1, ()))
  sendMessage (shSender sv) Urgent $ encodeFromWorker $ case outcome of
    Right () -> StreamDone sid
    Left why -> StreamAborted sid (T.pack why)

