{-# LANGUAGE ScopedTypeVariables #-}
-- | The parts of keyed reductions and shuffles that one worker sends
-- another, as the shell passes them on (INV-RELAY): their bytes never
-- reach the master's core. A part on the link ('Forward') is relayed as
-- a 'PartIn'; a part in a file of the parts directory ('ForwardFile') is
-- passed on by name to a worker on this host with a link of its own
-- ('PartInFile'), and read here and relayed to any other.
--
-- Promises: a part for a worker gone, or of a reduction that is over (or
-- never was), goes nowhere, and its file is deleted (the core sends the
-- part again to the partition's next owner); only files of the parts
-- directory are read or deleted; every part passed on is counted, as
-- relayed or as handed over.
module Herd.Master.Relay
  ( isRelayed
  , relay
  ) where

import Control.Concurrent.STM (readTVarIO)
import Control.Exception (IOException, try)
import qualified Data.ByteString as B
import qualified Data.Map.Strict as M
import Data.Maybe (isNothing)
import qualified Data.Text as T
import System.Directory (removeFile)
import Herd.Core.Base (TransportKind (..))
import Herd.Core.Master (coreRunsExchange)
import Herd.Core.Master.Events (Command (..))
import Herd.Core.Master.Workers (WorkerInfo (..))
import Herd.Core.Packet.Policy (Urgency (..))
import Herd.Core.Wire (FromWorker (..), ToWorker (..), inPartsDirectory)
import Herd.Master.Execute (execute)
import Herd.Master.Link (WorkerLink (..))
import Herd.Master.ShellState

-- | Whether a worker's message is a part for another worker.
isRelayed :: FromWorker -> Bool
isRelayed msg = case msg of
  Forward {} -> True
  ForwardFile {} -> True
  _ -> False

-- | Pass a worker's part on to the worker it is for.
relay :: Shell -> ShellState -> FromWorker -> IO ShellState
relay sh ss msg = case msg of
  Forward dest xid g j part
    | wanted dest xid -> relayBytes (fromIntegral dest) xid g j part
  ForwardFile dest xid g j size path
    | wanted dest xid && ours path -> do
        let to = fromIntegral dest
        local <- maybe False (\i -> infoTransport i `elem` [ShmTransport, UnixTransport]) . M.lookup to <$> readTVarIO (shWorkers sh)
        if local && maybe False (isNothing . wlHost) (M.lookup to (ssLinks ss))
          then fst <$> execute sh (ss { ssHanded = countSend (fromIntegral size) (ssHanded ss) }, []) (Send to Urgent (PartInFile xid g j size path))
          else do
            bytes <- try (B.readFile (T.unpack path)) <* removeQuietly path
            either (\(_ :: IOException) -> pure ss) (relayBytes to xid g j) bytes
    | ours path -> ss <$ removeQuietly path
  _ -> pure ss
  where
    wanted dest xid = M.member (fromIntegral dest) (ssLinks ss) && coreRunsExchange xid (ssCore ss)
    ours path = maybe False (`inPartsDirectory` T.unpack path) (shPartsDir sh)
    relayBytes to xid g j part =
      fst <$> execute sh (ss { ssRelayed = countSend (B.length part) (ssRelayed ss) }, []) (Send to Bulk (PartIn xid g j part))

-- Delete a part's file, if it is still there.
removeQuietly :: T.Text -> IO ()
removeQuietly path = try (removeFile (T.unpack path)) >>= \r -> case r of
  Left (_ :: IOException) -> pure ()
  Right () -> pure ()
