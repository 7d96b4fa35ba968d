{-# LANGUAGE ScopedTypeVariables #-}
-- | One worker's link as the master's shell writes it: a packet sender
-- ("Herd.Packet") whose packets go out from the sending thread when the
-- kernel takes them at once, and through the link's own writer thread
-- otherwise, so a slow worker never blocks the shell.
--
-- Promises: sending never blocks the caller; packets leave in the order
-- they were made; a send that fails, or more than 64 MiB (or twice the
-- frame cap) waiting for a worker that stopped reading, beyond an
-- allowance for shared values (whose pieces wait as slices of the values
-- the master holds anyway, so they cost no memory), breaks the link,
-- and the writer thread reports it once through the action given; closing
-- lets the writer drain what waits and end.
module Herd.Master.Link
  ( LinkHandle (..)
  , openLink
  , openLinkWith
  , WorkerLink (..)
  , stopWriting
  , trySync
  , sendHoldBudget
  , sendPartsDirectory
  , sendTaskDeadline
  ) where

import Control.Concurrent (forkIO)
import Control.Concurrent.STM
import Control.Exception
import Control.Monad (void)
import qualified Data.ByteString as B
import qualified Data.Text as T
import Herd.Settings
import Herd.Core.Packet.Policy (PacketPolicy)
import Herd.Packet
import Herd.Core.Launch.MemoryPolicy (heldBudget)
import Herd.Core.Packet.Policy (Urgency (..))
import Herd.Core.Wire (ToWorker (..))
import Herd.Wire.Encode (toWorkerParts)
import Herd.Transport

-- | A worker's link as the shell drives it.
data LinkHandle = LinkHandle
  { lhConn    :: !Connection
  , lhSender  :: !Sender
  , lhOutbox  :: !(TQueue (Maybe [B.ByteString]))  -- ^ for the writer thread; 'Nothing' ends it
  , lhBacklog :: !(TVar Int)
    -- ^ bytes waiting for the writer thread (the kernel or ring took no
    -- more): a stream's feeder waits while there are many
  }

-- | A worker's link as the shell's commands use it: a link of its own, or
-- its share of a host agent's ("Herd.Master.HostLink").
data WorkerLink = WorkerLink
  { wlSender  :: !Sender
    -- ^ where the worker's messages are gathered
  , wlBacklog :: !(TVar Int)
    -- ^ bytes waiting for the link's writer thread ('lhBacklog')
  , wlHost    :: !(Maybe (Int, Sender))
    -- ^ the host link the worker's packets travel on, by its number: its
    -- sender is flushed after the workers' ('Nothing': a link of its own)
  , wlEnd     :: IO ()
    -- ^ stop reading the worker and let it go: close its own link, or
    -- tell its host agent to end it
  , wlStopWriting :: IO ()
    -- ^ let the writer send what waits, then end ('stopWriting')
  }

-- | Set up a link's sender and start its writer thread; the action is
-- called from that thread, once, if the link breaks.
openLink :: Config -> Connection -> (String -> IO ()) -> IO LinkHandle
openLink cfg conn onBroken = do
  none <- newTVarIO 0
  openLinkWith (packetPolicyOf cfg) cfg none conn onBroken

-- | 'openLink' with packets gathered by this policy (a host link's are
-- larger than a worker's: they carry many workers' packets), and the
-- bytes of shared values live now, which may wait beyond the cap.
openLinkWith :: PacketPolicy -> Config -> TVar Int -> Connection -> (String -> IO ()) -> IO LinkHandle
openLinkWith policy cfg allowance conn onBroken = do
  let base = max (64 * 1024 * 1024) (2 * configMaxFrameBytes cfg)
  outbox <- newTQueueIO
  failed <- newTVarIO Nothing
  queued <- newTVarIO (0 :: Int)
  let breakLink why = atomically $ modifyTVar' failed (maybe (Just why) Just)
      enqueue [] = pure ()
      enqueue parts = do
        let size = sum (map B.length parts)
        over <- atomically $ do
          q <- (+ size) <$> readTVar queued
          cap <- (+ base) <$> readTVar allowance
          writeTVar queued q
          if q > cap then pure (Just q) else Nothing <$ writeTQueue outbox (Just parts)
        mapM_ (\q -> breakLink ("stopped reading: " ++ show q ++ " bytes waiting to be sent to it")) over
      -- with nothing waiting for the writer thread, send from this thread
      -- what the kernel takes at once (no hand-off between threads per
      -- packet); the writer sends the rest. The first part is the
      -- sender's buffer, so what is queued of it is copied; the other
      -- parts are values, queued as they are (a large message's tail)
      out [] = pure ()
      out parts@(borrowed : kept) = do
        waiting <- readTVarIO queued
        if waiting > 0 then enqueue (B.copy borrowed : kept) else do
          rest <- trySync (sendAvailableParts conn parts)
          case rest of
            Left e -> breakLink ("send failed: " ++ displayException e)
            Right left
              | length left > length kept -> enqueue (map B.copy (take 1 left) ++ drop 1 left)
              | otherwise -> enqueue left
      next = (Left <$> (readTVar failed >>= maybe retry pure)) `orElse` (Right <$> readTQueue outbox)
      writer = do
        item <- atomically next
        case item of
          Left why -> pure (Just why)
          Right Nothing -> pure Nothing
          Right (Just parts) -> do
            sendRawParts conn parts
            atomically $ modifyTVar' queued (subtract (sum (map B.length parts)))
            writer
  sender <- newSender policy out
  void $ forkIO $ do
    outcome <- trySync writer
    case outcome of
      Left e -> onBroken ("send failed: " ++ displayException e)
      Right (Just why) -> onBroken why
      Right Nothing -> pure ()
  pure (LinkHandle conn sender outbox queued)

-- | Let the writer send what waits, then end.
stopWriting :: LinkHandle -> IO ()
stopWriting l = atomically $ writeTQueue (lhOutbox l) Nothing

-- | Tell a worker the seconds a farm task may compute ('TaskDeadline').
sendTaskDeadline :: WorkerLink -> Double -> IO ()
sendTaskDeadline l secs =
  let (enc, tl) = toWorkerParts (TaskDeadline (max 1 (round (secs * 1000)))) in sendMessageTail (wlSender l) Urgent enc tl

-- | Tell a worker on the master's host where to hand large parts to the
-- others ('PartsDirectory').
sendPartsDirectory :: WorkerLink -> FilePath -> IO ()
sendPartsDirectory l dir =
  let (enc, tl) = toWorkerParts (PartsDirectory (T.pack dir)) in sendMessageTail (wlSender l) Urgent enc tl

-- | Tell a worker on a link of its own its budget for the shared values
-- it keeps in memory under this memory limit ('heldBudget').
sendHoldBudget :: WorkerLink -> Int -> IO ()
sendHoldBudget l limit =
  let (enc, tl) = toWorkerParts (HoldBudget (fromIntegral (heldBudget limit))) in sendMessageTail (wlSender l) Urgent enc tl
