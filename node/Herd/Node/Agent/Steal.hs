-- | A host agent's part in stealing "Herd.Par" children: the host's own
-- broker ("Herd.Core.Agent.Steal") takes its workers' asks for work and
-- answers to its own steals out of their packets, and what it decides
-- goes to the host's workers directly or up the host link as a worker's
-- own message.
--
-- Promise: a worker's packet with no message about steals is relayed as
-- it came, untouched (one walk of its tags, nothing allocated); one with
-- such messages loses exactly those the host's broker took, the rest
-- keeping their order.
module Herd.Node.Agent.Steal
  ( HostStealer
  , newHostStealer
  , takeSteals
  , stealerGone
  ) where

import qualified Data.ByteString as B
import Data.IORef
import Data.List (foldl')
import Data.Word (Word8)
import Herd.Core.Agent (AgentCommand (..))
import Herd.Core.Agent.Steal
import Herd.Core.Base (WorkerId)
import Herd.Core.Steal (stealReport)
import Herd.Core.Packet.Split (splitPacket)
import Herd.Core.Wire (FromWorker, decodeFromWorker)
import Herd.Core.Wire.Tags
import Herd.Node.Agent.Exchange (anyTagged)
import Herd.Wire.Encode (encodeFromWorker)
import Herd.Wire.HostEntry (workerPacket, workerPacketOf)
import Herd.Wire.Writer (encoderBytes)

-- | The host's broker, stepped under the agent's lock.
newtype HostStealer = HostStealer (IORef HostSteals)

-- | No holders, no thieves.
newHostStealer :: IO HostStealer
newHostStealer = HostStealer <$> newIORef emptyHostSteals

-- | A worker's packet (at most this many messages) through the host's
-- broker: what is left of it to relay ('Nothing': nothing), and what to
-- do for the broker's decisions.
takeSteals :: HostStealer -> Int -> WorkerId -> B.ByteString -> IO (Maybe B.ByteString, [AgentCommand B.ByteString])
takeSteals (HostStealer ref) maxMessages w packet
  | not (anyTagged isStealTag packet) = pure (Just packet, [])
  | otherwise = case splitPacket maxMessages packet of
      Left _ -> pure (Just packet, [])   -- the master judges a bad packet
      Right msgs -> do
        hs <- readIORef ref
        let step (h, kept, outs) m = case decodeFromWorker m of
              Right msg | stealReport msg ->
                let (h', out) = hostWorkerSaid w msg h
                in (h', if hsConsumed out then kept else m : kept, out : outs)
              _ -> (h, m : kept, outs)
            (hs', keptRev, outsRev) = foldl' step (hs, [], []) msgs
            kept = reverse keptRev
        writeIORef ref hs'
        cmds <- concat <$> mapM commands (reverse outsRev)
        let left | null kept = Nothing
                 | length kept == length msgs = Just packet
                 | otherwise = Just (workerPacket kept)
        pure (left, cmds)

-- | One of the host's workers is gone: what to do for it.
stealerGone :: HostStealer -> WorkerId -> IO [AgentCommand B.ByteString]
stealerGone (HostStealer ref) w = do
  (hs', out) <- hostWorkerGone w <$> readIORef ref
  writeIORef ref hs'
  commands out

commands :: HostStealOut -> IO [AgentCommand B.ByteString]
commands out = do
  toWorkers <- mapM (\(d, m) -> ToWorker d <$> workerPacketOf m) (hsToWorkers out)
  toMaster <- mapM (\(t, m) -> ToMaster t <$> asPacket m) (hsToMaster out)
  pure (toWorkers ++ toMaster)
  where
    asPacket :: FromWorker -> IO B.ByteString
    asPacket m = workerPacket . (: []) <$> encoderBytes (encodeFromWorker m)

isStealTag :: Word8 -> Bool
isStealTag t = t >= tagWantWork && t <= tagStolenDropped
