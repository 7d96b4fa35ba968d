-- | A host agent's broker of stolen "Herd.Par" children, in front of the
-- master's: a worker of the host that asks for work steals from another
-- worker of the same host when one holds children (over the host's own
-- links, the master not on the path), and from other hosts through the
-- master only when none does. It is the master's broker
-- ("Herd.Core.Steal") over the host's workers, with steal numbers of its
-- own (from 'hostStealBase' on).
--
-- Promises: a worker's message about the master's steals (numbered below
-- 'hostStealBase') is relayed untouched; a worker's word that it holds
-- children is relayed too, so thieves on other hosts can steal from it;
-- an ask for work is either served here or relayed, never both, and a
-- thief this broker cannot serve any more (its holder had nothing left
-- after all) is sent on to the master as its own ask. Pure.
module Herd.Core.Agent.Steal
  ( HostSteals
  , emptyHostSteals
  , hostStealBase
  , HostStealOut (..)
  , hostWorkerSaid
  , hostWorkerGone
  ) where

import Data.Word (Word64)
import Herd.Core.Base (WorkerId)
import Herd.Core.Steal
import Herd.Core.Wire (FromWorker (..), ToWorker)

-- | The host's broker.
newtype HostSteals = HostSteals Steals
  deriving (Eq, Show)

-- | The first steal number a host agent gives: the master's stay below.
hostStealBase :: Word64
hostStealBase = 2 ^ (63 :: Int)

-- | No holders, no thieves.
emptyHostSteals :: HostSteals
emptyHostSteals = HostSteals (emptyStealsFrom hostStealBase)

-- | What a step decides.
data HostStealOut = HostStealOut
  { hsToWorkers :: ![(WorkerId, ToWorker)]    -- ^ messages for this host's workers
  , hsToMaster  :: ![(WorkerId, FromWorker)]  -- ^ messages for the master, each as this worker's own
  , hsConsumed  :: !Bool                      -- ^ the worker's message was this broker's: not relayed
  } deriving (Eq, Show)

-- | A message from one of the host's workers.
hostWorkerSaid :: WorkerId -> FromWorker -> HostSteals -> (HostSteals, HostStealOut)
hostWorkerSaid w msg hs@(HostSteals st) = case msg of
  WantWork
    | hasHolderFor w st -> local (wantWork w) True
    | otherwise -> relay
  ChildrenHeld k -> local (childrenHeld w k) False
  StealGiven n c left ref arg
    | ours n -> local (stealGiven w n c left ref arg) True
    -- the master's steal: what the holder has left is news here too
    | otherwise -> local (childrenHeld w left) False
  StealNone n | ours n -> local (stealNone w n) True
  StolenDone n v | ours n -> local (stolenAnswered w n (Right v)) True
  StolenThrew n why | ours n -> local (stolenAnswered w n (Left why)) True
  StolenDropped n | ours n -> local (stolenDropped w n) True
  -- the host's own steals of them stop here, the master's there
  ChildrenAbandoned cs -> local (childrenAbandoned w cs) False
  _ -> relay
  where
    ours n = n >= hostStealBase
    relay = (hs, HostStealOut [] [] False)
    local f consumed = let (st', out) = f st in settle st' out consumed

-- | One of the host's workers is gone.
hostWorkerGone :: WorkerId -> HostSteals -> (HostSteals, HostStealOut)
hostWorkerGone w (HostSteals st) = let (st', out) = stealLost w st in settle st' out True

-- Thieves this broker left waiting go on to the master.
settle :: Steals -> [(WorkerId, ToWorker)] -> Bool -> (HostSteals, HostStealOut)
settle st out consumed =
  let (waiting, st') = takeIdle st
  in (HostSteals st', HostStealOut out [ (t, WantWork) | t <- waiting ] consumed)
