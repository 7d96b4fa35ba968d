{-# LANGUAGE ScopedTypeVariables #-}
-- | Moving a two-level population's states between hosts, at the master:
-- the states of a lost host to the live ones ('rehomed', remade there from
-- the lineage the master keeps), and states of a host that would run
-- long to hosts that would idle ('balanced', their bytes through the
-- master). The decisions are the pure 'rehome' and 'hostMoves'; this
-- module sends the messages and waits for each host's end.
--
-- Promises: every message waits for its host's end or loss, so no host
-- is still moving when a call starts; a state is placed, in the registry
-- returned, on the host that holds it (one a host could not give stays
-- where it was); a moved state's bytes become its origin, so its lineage
-- starts again there.
module Herd.Master.Job.HostMoves
  ( Traffic (..)
  , withCall
  , openHosts
  , liveHosts
  , awaitEnds
  , rehomed
  , balanced
  ) where

import Control.Concurrent.STM
import Control.Exception (finally, throwIO)
import Control.Monad (forM_)
import Data.List (foldl')
import Data.IORef
import qualified Data.ByteString as B
import qualified Data.Map.Strict as M
import qualified Data.Set as S
import qualified Data.Text as T
import Data.Word (Word64)
import Herd.Core.Error (HerdError (..))
import Herd.Core.Evolve.HostBalance
import Herd.Core.Evolve.Hosts
import Herd.Core.Evolve.Registry (Origin (..), Placed (..), Registry (..))
import Herd.Core.Evolve.StateMap (StateId (..))
import qualified Herd.Core.Evolve.StateMap as SM
import Herd.Core.Wire.HostCall
import Herd.Master.Cluster (Cluster (..), freshId)
import Herd.Master.ShellState (HostHandle (..), Shell (..))
import Herd.Sys.Clock (monotonicSeconds)

-- | The open hosts that have workers, with their handles and worker counts.
liveHosts :: Cluster -> IO [(HostId, HostHandle, Int)]
liveHosts cluster = filter (\(_, _, n) -> n > 0) <$> openHosts cluster

-- | The open hosts, with their handles and worker counts.
openHosts :: Cluster -> IO [(HostId, HostHandle, Int)]
openHosts cluster = do
  hosts <- M.toList <$> readTVarIO (shHosts (clShell cluster))
  mapM (\(h, handle) -> (,,) h handle <$> hostMembers handle) hosts

-- | Run a call: its queue registered while the body runs.
withCall :: Cluster -> (Word64 -> TQueue (HostId, Either String HostCallMessage) -> IO a) -> IO a
withCall cluster body = do
  n <- freshId cluster
  q <- newTQueueIO
  let calls = shHostCalls (clShell cluster)
  atomically (modifyTVar' calls (M.insert n q))
  body n q `finally` atomically (modifyTVar' calls (M.delete n))

-- | Every host's end of an upload: a refusal or a loss fails it.
awaitEnds :: TQueue (HostId, Either String HostCallMessage) -> Word64 -> S.Set HostId -> IO ()
awaitEnds q n open = awaitEndsLosing q n open >>= \lost -> case lost of
  (h, why) : _ -> throwIO (LaunchError ("host " ++ show h ++ " was lost while taking its states: " ++ why))
  [] -> pure ()

-- Every host's end of an upload or adoption, and the hosts lost before
-- they ended; a refusal throws.
awaitEndsLosing :: TQueue (HostId, Either String HostCallMessage) -> Word64 -> S.Set HostId -> IO [(HostId, String)]
awaitEndsLosing q n = go []
  where
    go lost open
      | S.null open = pure lost
      | otherwise = do
          (h, said) <- atomically (readTQueue q)
          case said of
            Left why | S.member h open -> go ((h, why) : lost) (S.delete h open)
            Right (HostCallEnded n' (Left why)) | n' == n ->
              throwIO (LaunchError ("host " ++ show h ++ " could not take its states: " ++ T.unpack why))
            Right (HostCallEnded n' (Right _)) | n' == n -> go lost (S.delete h open)
            _ -> go lost open

-- | Give every state of a host that is no longer open to the open hosts
-- with workers ('rehome'): one message per adopting host, and again if
-- an adopting host is lost meanwhile. Throws 'StatesLost' when no host
-- with a worker is left.
rehomed :: Cluster -> IORef Traffic -> Registry -> IO Registry
rehomed cluster traffic reg = withCall cluster $ \n q -> do
  -- read after the call's queue is registered: a host lost from now on is
  -- heard of on the queue, one lost before is no longer listed
  hosts <- openHosts cluster
  case rehome [ (h, c) | (h, _, c) <- hosts ] (HostPlacement (regStates reg)) (regOrigin reg) of
    Left err -> throwIO err
    Right (_, []) -> pure reg
    Right (placement, adoptions) -> do
      let handles = M.fromList [ (h, handle) | (h, handle, _) <- hosts ]
      forM_ adoptions $ \a -> forM_ (M.lookup (adoptHost a) handles) $ \handle ->
        hostCallTo handle (HostStatesAdopt n [ (k, o) | (StateId k, o) <- adoptOrigins a ] [ k | StateId k <- adoptStates a ])
      modifyIORef' traffic (\t -> t { trafficMessages = trafficMessages t + length adoptions
                                    , trafficRehomed = trafficRehomed t + sum (map (length . adoptStates) adoptions) })
      lost <- awaitEndsLosing q n (S.fromList (map adoptHost adoptions))
      let reg' = reg { regStates = placementStates placement }
      if null lost then pure reg' else rehomed cluster traffic reg'

-- | What the master sent the hosts for one call.
data Traffic = Traffic
  { trafficMessages :: !Int   -- ^ host-call messages: one per host and round, and one per adoption or move
  , trafficRehomed  :: !Int   -- ^ states of lost hosts given to others
  , trafficMoved    :: !Int   -- ^ states moved between live hosts
  } deriving (Eq, Show)


-- | Move some of the call's states from hosts that would run long to
-- hosts that would idle ('hostMoves'): each giving host answers with the
-- bytes of those it could give, each receiving host holds them. The slack
-- is the whole steps of the registry's last move round trip over its mean
-- step ('moveSlack'); the round trip of this move is kept for the next.
balanced :: Cluster -> IORef Traffic -> [StateId] -> Registry -> IO Registry
balanced cluster traffic callStates reg = do
  hosts <- liveHosts cluster
  let onHost = M.fromListWith (++) [ (fromIntegral (placedOn p), [s]) | s <- reverse callStates, Just p <- [SM.lookup s (regStates reg)] ]
      loads = [ HostLoad h c (M.findWithDefault [] h onHost) | (h, _, c) <- hosts ]
      moves = hostMoves (moveSlack (regRoundTrip reg) (regMeanCost reg)) loads
      handles = M.fromList [ (h, handle) | (h, handle, _) <- hosts ]
      byDonor = M.fromListWith (++) [ (from, [s]) | (s, from, _) <- reverse moves ]
      target = M.fromList [ (s, to) | (s, _, to) <- moves ]
  if null moves then pure reg else do
    started <- monotonicSeconds
    got <- withCall cluster $ \n q -> do
      forM_ (M.toList byDonor) $ \(h, ss) -> forM_ (M.lookup h handles) $ \handle ->
        hostCallTo handle (HostStatesGive n [ k | StateId k <- ss ])
      collectGiven q n (M.keysSet byDonor)
    let byReceiver = M.fromListWith (++) [ (to, [(k, b)]) | (k, b) <- got, Just to <- [M.lookup (StateId k) target] ]
    _ <- withCall cluster $ \n q -> do
      forM_ (M.toList byReceiver) $ \(h, states) -> forM_ (M.lookup h handles) $ \handle ->
        hostCallTo handle (HostStatesPut n states)
      awaitEndsLosing q n (M.keysSet byReceiver)
    finished <- monotonicSeconds
    modifyIORef' traffic (\t -> t { trafficMessages = trafficMessages t + M.size byDonor + M.size byReceiver
                                  , trafficMoved = trafficMoved t + length got })
    let placed = foldl' (\m (k, _) -> maybe m (\to -> SM.insert (StateId k) (Placed (fromIntegral to) 0) m) (M.lookup (StateId k) target))
                        (regStates reg) got
        origins = foldl' (\m (k, b) -> SM.insert (StateId k) (Seen b) m) (regOrigin reg) got
    pure reg { regStates = placed, regOrigin = origins, regRoundTrip = Just (finished - started) }

-- Every giving host's states and end; a host lost meanwhile gives nothing
-- (its states are remade elsewhere, as any lost host's).
collectGiven :: TQueue (HostId, Either String HostCallMessage) -> Word64 -> S.Set HostId -> IO [(Word64, B.ByteString)]
collectGiven q n = go []
  where
    go acc open
      | S.null open = pure acc
      | otherwise = do
          (h, said) <- atomically (readTQueue q)
          case said of
            Left _ | S.member h open -> go acc (S.delete h open)
            Right (HostStatesGiven n' states) | n' == n, S.member h open -> go (states ++ acc) open
            Right (HostCallEnded n' _) | n' == n -> go acc (S.delete h open)
            _ -> go acc open
