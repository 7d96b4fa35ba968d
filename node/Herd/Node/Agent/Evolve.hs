-- | Two-level evolve in the host agent's IO: the agent's scheduler
-- ("Herd.Core.Agent.Evolve", pure) driven from the agent's links. The
-- master's host-call messages step it; under two levels, the evolve
-- answers in a local worker's packets are taken out for it, and what it
-- reports after each packet goes up the host link.
--
-- Promise: until the master first speaks of a host call, nothing here
-- touches a worker's packets; the driver steps the scheduler under the
-- agent's lock, so its steps never interleave.
module Herd.Node.Agent.Evolve
  ( AgentEvolve
  , newAgentEvolve
  , evolveStep
  , evolveMasterSaid
  , takeEvolveAnswers
  ) where

import Control.Monad (forM_, unless)
import qualified Data.ByteString as B
import Data.IORef
import Herd.Core.Agent.Evolve
import Herd.Core.Wire (ToWorker, decodeFromWorker)
import Herd.Core.Wire.HostCall (HostCallMessage)
import Herd.Packet (splitPacket)
import Herd.Sys.Clock (monotonicSeconds)
import Herd.Wire.HostEntry (workerPacket)

-- | The agent's population and how to reach its workers and the master.
data AgentEvolve = AgentEvolve
  { aePopulation :: !(IORef HostPopulation)
  , aeHosted     :: !(IORef Bool)
  , aeToLocal    :: Int -> ToWorker -> IO ()
  , aeToMaster   :: HostCallMessage -> IO ()
  , aeDrop       :: Int -> String -> IO ()
  }

-- | A scheduler with no states, given how to send to a worker, to the
-- master, and how to end a worker that broke the protocol.
newAgentEvolve :: (Int -> ToWorker -> IO ()) -> (HostCallMessage -> IO ()) -> (Int -> String -> IO ()) -> IO AgentEvolve
newAgentEvolve toLocal toMaster dropLocal =
  AgentEvolve <$> newIORef newHostPopulation <*> newIORef False <*> pure toLocal <*> pure toMaster <*> pure dropLocal

-- | One step of the scheduler, carried out.
evolveStep :: AgentEvolve -> HostEvent -> IO ()
evolveStep ae ev = do
  now <- monotonicSeconds
  pop <- readIORef (aePopulation ae)
  let (pop', outs) = stepHost now ev pop
  writeIORef (aePopulation ae) $! pop'
  forM_ outs $ \o -> case o of
    ToLocal w m -> aeToLocal ae (fromIntegral w) m
    ToMasterCall m -> aeToMaster ae m
    DropLocal w why -> aeDrop ae (fromIntegral w) why

-- | A host-call message from the master: from now on the workers' evolve
-- answers are the scheduler's.
evolveMasterSaid :: AgentEvolve -> HostCallMessage -> IO ()
evolveMasterSaid ae m = writeIORef (aeHosted ae) True >> evolveStep ae (MasterSaid m)

-- | A local worker's packet: under two levels its evolve answers go to
-- the scheduler (which then reports what is new), and the rest of the
-- packet, if any, is given back for the master; before that, the packet
-- as it came.
takeEvolveAnswers :: AgentEvolve -> Int -> Int -> B.ByteString -> IO (Maybe B.ByteString)
takeEvolveAnswers ae cap w packet = do
  hosted <- readIORef (aeHosted ae)
  if not hosted then pure (Just packet) else case splitPacket cap packet of
    Left _ -> pure (Just packet)   -- the master names what is wrong with it
    Right msgs -> do
      pop <- readIORef (aePopulation ae)
      let judged = [ (m, either (const Nothing) answer (decodeFromWorker m)) | m <- msgs ]
          -- a Ref call's answers are the master's
          answer msg = if isEvolveAnswer msg && hostClaims pop w msg then Just msg else Nothing
          mine = [ a | (_, Just a) <- judged ]
          rest = [ m | (m, Nothing) <- judged ]
      unless (null mine) $ do
        mapM_ (evolveStep ae . LocalSaid (fromIntegral w)) mine
        evolveStep ae RoundEnded
      pure (if null rest then Nothing else if null mine then Just packet else Just (workerPacket rest))
