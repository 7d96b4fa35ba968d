-- | Two-level evolve's IO at the master ('Herd.Settings.configHostScheduling'):
-- a population placed on hosts, and calls of one message per host. The
-- decisions are the pure "Herd.Core.Evolve.Hosts" (the master's half) and
-- "Herd.Core.Agent.Evolve" (each agent's); this module registers a call
-- with the shell, sends each host its message and feeds the call what the
-- hosts say until every host has ended its part.
--
-- Promises: a call returns only once every host has ended its part or been
-- lost, so no host still runs it when the next call starts; a failed call
-- forgets its states, as a one-level call does; a lost host fails the
-- call naming its states (recovering a lost host's states elsewhere is
-- not done yet).
module Herd.Master.Job.HostEvolve
  ( hostScheduled
  , hostedReset
  , hostedEvolve
  ) where

import Control.Concurrent.STM
import Control.Exception (finally, throwIO)
import Control.Monad (forM_, when)
import qualified Data.ByteString as B
import qualified Data.Map.Strict as M
import qualified Data.Set as S
import qualified Data.Text as T
import Data.Word (Word64)
import Herd.Core.Base (TaskRef (..))
import Herd.Core.Error (HerdError (..))
import Herd.Core.Evolve.Hosts
import Herd.Core.Evolve.Registry (Placed (..), Registry (..), emptyRegistry)
import Herd.Core.Evolve.StateMap (StateId (..), StateMap)
import qualified Herd.Core.Evolve.StateMap as SM
import Herd.Core.Wire.HostCall
import Herd.Master.Cluster (Cluster (..), freshId)
import Herd.Master.ShellState (HostHandle (..), Shell (..))
import Herd.Settings (Config (..))

-- | Whether this cluster's evolve calls go through its hosts: two-level
-- scheduling is on and some host link is open.
hostScheduled :: Cluster -> IO Bool
hostScheduled cluster
  | configHostScheduling (clConfig cluster) = not . M.null <$> readTVarIO (shHosts (clShell cluster))
  | otherwise = pure False

-- The open hosts that have workers, with their handles and worker counts.
liveHosts :: Cluster -> IO [(HostId, HostHandle, Int)]
liveHosts cluster = do
  hosts <- M.toList <$> readTVarIO (shHosts (clShell cluster))
  counted <- mapM (\(h, handle) -> (,,) h handle <$> hostMembers handle) hosts
  pure [ x | x@(_, _, n) <- counted, n > 0 ]

-- Run a call: its queue registered while the body runs.
withCall :: Cluster -> (Word64 -> TQueue (HostId, Either String HostCallMessage) -> IO a) -> IO a
withCall cluster body = do
  n <- freshId cluster
  q <- newTQueueIO
  let calls = shHostCalls (clShell cluster)
  atomically (modifyTVar' calls (M.insert n q))
  body n q `finally` atomically (modifyTVar' calls (M.delete n))

-- | Replace the population with these encoded states, spread over the
-- hosts by their worker counts; each host places its share on its workers.
hostedReset :: Cluster -> [B.ByteString] -> IO Registry
hostedReset cluster encoded = do
  hosts <- liveHosts cluster
  when (null hosts) (throwIO NoWorkers)
  let ids = [ StateId k | k <- [1 .. fromIntegral (length encoded)] ]
      -- host slots in turn, as many per host as it has workers
      slots = cycle (concat [ replicate c h | (h, _, c) <- hosts ])
      placed = zip3 ids encoded slots
      byHost = M.fromListWith (++) [ (h, [(k, b)]) | (StateId k, b, h) <- reverse placed ]
  withCall cluster $ \n q -> do
    forM_ hosts $ \(h, handle, _) -> hostCallTo handle (HostStatesAdd n (M.findWithDefault [] h byHost))
    awaitEnds q n (S.fromList [ h | (h, _, _) <- hosts ])
  pure emptyRegistry
    { regStates = SM.fromList [ (i, Placed (fromIntegral h) 0) | (i, _, h) <- placed ]
    , regNextId = fromIntegral (length encoded) + 1
    , regHosted = True }

-- Every host's end of an upload: a refusal or a loss fails it.
awaitEnds :: TQueue (HostId, Either String HostCallMessage) -> Word64 -> S.Set HostId -> IO ()
awaitEnds q n open
  | S.null open = pure ()
  | otherwise = do
      (h, said) <- atomically (readTQueue q)
      case said of
        Left why -> throwIO (LaunchError ("host " ++ show h ++ " was lost while taking its states: " ++ why))
        Right (HostCallEnded n' (Left why)) | n' == n ->
          throwIO (LaunchError ("host " ++ show h ++ " could not take its states: " ++ T.unpack why))
        Right (HostCallEnded n' (Right _)) | n' == n -> awaitEnds q n (S.delete h open)
        _ -> awaitEnds q n open

-- | One call on the hosts: the registry after it (also after a failure:
-- the call's states are then forgotten, as a one-level call's), and each
-- evolved state's children with what each host said of its part, or the
-- call's error.
hostedEvolve :: Cluster -> TaskRef -> Registry -> [(StateId, B.ByteString)]
             -> IO (Registry, Either HerdError (StateMap [(StateId, B.ByteString)], [(HostId, CallSummary)]))
hostedEvolve cluster ref reg inputs = withCall cluster $ \n q -> do
  let placement = HostPlacement (regStates reg)
      deaths = configMaxTaskDeaths (clConfig cluster)
  case startHostCall n (refName ref) ref deaths placement inputs of
    Left unknown -> pure (reg, Left (UnknownStates (map show unknown)))
    Right (call0, opening) -> do
      handles <- readTVarIO (shHosts (clShell cluster))
      let absent = [ h | (h, _) <- opening, not (M.member h handles) ]
      forM_ [ (handle, m) | (h, m) <- opening, Just handle <- [M.lookup h handles] ] $ \(handle, m) -> hostCallTo handle m
      let -- a host gone before the call could start is a loss like any other
          call1 = foldl (\acc h -> acc >>= hostCallLost h "its link was closed") (Right call0) absent
          loop open state
            | S.null open = pure state
            | otherwise = do
                (h, said) <- atomically (readTQueue q)
                let open' = case said of
                      Left _ -> S.delete h open
                      Right (HostCallEnded n' _) | n' == n -> S.delete h open
                      _ -> open
                -- the first error stands; the hosts' parts still end first
                loop open' (state >>= either (hostCallLost h) (hostCallReport h) said)
      final <- loop (S.difference (S.fromList (map fst opening)) (S.fromList absent)) call1
      pure $ case final of
        Left err ->
          let own = S.fromList (map fst inputs)
          in (reg { regStates = SM.filterWithKey (\s _ -> not (S.member s own)) (regStates reg) }, Left err)
        Right call ->
          ( reg { regStates = placementStates (placementAfter call placement) }
          , Right (hostCallOutputs call, hostCallSummaries call) )
