{-# LANGUAGE ScopedTypeVariables #-}
-- | Two-level evolve's IO at the master ('Herd.Settings.configHostScheduling'):
-- a population placed on hosts, and calls of one message per host. The
-- decisions are the pure "Herd.Core.Evolve.Hosts" (the master's half) and
-- "Herd.Core.Agent.Evolve" (each agent's); this module registers a call
-- with the shell, sends each host its message and feeds the call what the
-- hosts say until every host has ended its part.
--
-- Promises: a call returns only once every host has ended its part or been
-- lost, so no host still runs it when the next call starts; a failed call
-- forgets its states, as a one-level call does; a lost host is one event:
-- every state it held goes to the live hosts with its lineage (kept here
-- per call), each adopting host remakes them, and the states the lost
-- host had not answered are evolved there, so the call's answer is the
-- one it would have been. A call fails naming the states only when no
-- host with a worker is left.
module Herd.Master.Job.HostEvolve
  ( hostScheduled
  , hostedReset
  , hostedEvolve
  , HostedOutcome (..)
  , Traffic (..)
  ) where

import Control.Concurrent.STM
import Control.Exception (throwIO, try)
import Control.Monad (forM_, when)
import Data.IORef
import qualified Data.ByteString as B
import qualified Data.Map.Strict as M
import qualified Data.Set as S
import Herd.Core.Base (TaskRef (..))
import Herd.Core.Error (HerdError (..))
import Herd.Core.Evolve.Hosts
import Herd.Core.Evolve.Registry (Origin (..), Placed (..), Registry (..), emptyRegistry, keepOrigins)
import Herd.Core.Evolve.StateMap (StateId (..), StateMap)
import qualified Herd.Core.Evolve.StateMap as SM
import Herd.Core.Wire.HostCall
import Herd.Master.Cluster (Cluster (..))
import Herd.Master.Job.HostMoves
import Herd.Master.ShellState (HostHandle (..), Shell (..))
import Herd.Settings (Config (..))

-- | Whether this cluster's evolve calls go through its hosts: two-level
-- scheduling is on and some host link is open.
hostScheduled :: Cluster -> IO Bool
hostScheduled cluster
  | configHostScheduling (clConfig cluster) = not . M.null <$> readTVarIO (shHosts (clShell cluster))
  | otherwise = pure False

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
    , regOrigin = SM.fromList [ (i, Seen b) | (i, b, _) <- placed ]
    , regNextId = fromIntegral (length encoded) + 1
    , regHosted = True }

-- | What a call on the hosts gave: each evolved state's children, what
-- each host said of its part, and what the master sent.
data HostedOutcome = HostedOutcome
  { outcomeOutputs   :: !(StateMap [(StateId, B.ByteString)])
  , outcomeSummaries :: ![(HostId, CallSummary)]
  , outcomeTraffic   :: !Traffic
  }

-- | One call on the hosts: the registry after it (also after a failure:
-- the call's states are then forgotten, as a one-level call's), and each
-- evolved state's children with what each host said of its part, or the
-- call's error. The states of hosts lost before or during the call are
-- rehomed and those not yet answered evolved again, a round at a time.
hostedEvolve :: Cluster -> TaskRef -> Registry -> StateMap B.ByteString
             -> IO (Registry, Either HerdError HostedOutcome)
hostedEvolve cluster ref reg0 inputs0 = do
  traffic <- newIORef (Traffic 0 0 0)
  let inputMap = inputs0
      rounds reg inputs outputs summaries = do
        rehome' <- try (rehomed cluster traffic reg)
        case rehome' of
          Left (err :: HerdError) -> pure (forgetCall outputs reg, Left err)
          Right reg1 -> do
            -- a host that would run long gives some of the call's states to one that would idle
            reg1' <- balanced cluster traffic (SM.keys inputs) reg1
            (reg2, result) <- hostedRound cluster traffic ref reg1' inputs
            case result of
              Left err -> pure (forgetCall outputs reg2, Left err)
              Right (call, unanswered) -> do
                let outputs' = SM.foldlWithKey' (\m k v -> SM.insert k v m) outputs (hostCallOutputs call)
                    summaries' = hostCallSummaries call ++ summaries
                    again = SM.fromList [ (s, SM.findWithDefault B.empty s inputMap) | (s, _) <- unanswered ]
                if SM.null again
                  then (,) (withMeanStep (SM.size outputs') summaries' reg2) . Right . HostedOutcome outputs' summaries' <$> readIORef traffic
                  else rounds reg2 again outputs' summaries'
      -- a failed call's states are in an unknown state: forgotten, with the
      -- children its earlier rounds made
      forgetCall outputs reg =
        let made = S.fromList [ c | kids <- SM.elems outputs, (c, _) <- kids ]
        in reg { regStates = SM.filterWithKey (\s _ -> not (SM.member s inputMap || S.member s made)) (regStates reg) }
  rounds reg0 inputs0 SM.empty []

-- The mean step the hosts measured, for the next call's balance.
withMeanStep :: Int -> [(HostId, CallSummary)] -> Registry -> Registry
withMeanStep evolved summaries reg
  | evolved > 0 = reg { regMeanCost = Just (fromIntegral busyNs / 1e9 / fromIntegral evolved) }
  | otherwise = reg
  where busyNs = sum [ ns | (_, c) <- summaries, (_, ns) <- summaryBusy c ]

-- One round of a call: the finished call and the states lost hosts did not
-- answer (still placed on those hosts), or the call's error.
hostedRound :: Cluster -> IORef Traffic -> TaskRef -> Registry -> StateMap B.ByteString
            -> IO (Registry, Either HerdError (HostCall, [(StateId, HostId)]))
hostedRound cluster traffic ref reg inputs = withCall cluster $ \n q -> do
  let placement = HostPlacement (regStates reg)
      deaths = configMaxTaskDeaths (clConfig cluster)
  case startHostCall n (refName ref) ref deaths placement inputs of
    Left unknown -> pure (reg, Left (UnknownStates (map show unknown)))
    Right (call0, opening) -> do
      handles <- readTVarIO (shHosts (clShell cluster))
      let absent = [ h | (h, _) <- opening, not (M.member h handles) ]
      forM_ [ (handle, m) | (h, m) <- opening, Just handle <- [M.lookup h handles] ] $ \(handle, m) -> hostCallTo handle m
      modifyIORef' traffic (\t -> t { trafficMessages = trafficMessages t + length opening })
      let -- a host gone before the call could start is a loss like any other
          call1 = foldl (\acc h -> acc >>= Right . hostCallLost h "its link was closed") (Right call0) absent
          loop open state
            | S.null open = pure state
            | otherwise = do
                (h, said) <- atomically (readTQueue q)
                let open' = case said of
                      Left _ -> S.delete h open
                      Right (HostCallEnded n' _) | n' == n -> S.delete h open
                      _ -> open
                -- the first error stands; the hosts' parts still end first.
                -- Each report is taken in now, while the hosts still work,
                -- not all after the last one came
                loop open' $! (state >>= either (\why -> Right . hostCallLost h why) (hostCallReport h) said)
      final <- loop (S.difference (S.fromList (map fst opening)) (S.fromList absent)) call1
      pure $ case final of
        Left err -> (reg, Left err)
        Right call ->
          let placement' = placementAfter call placement
              origins = originsAfter call (regOrigin reg)
          in ( keepOrigins (placementStates placement') origins reg { regStates = placementStates placement' }
             , Right (call, hostCallUnanswered call) )
