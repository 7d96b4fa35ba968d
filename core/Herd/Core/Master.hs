-- | The master's one functional core: every decision the master makes, for
-- farm jobs, stream processes and evolve sessions alike, as a pure state
-- machine @Event -> Core -> (Core, [Command])@.
--
-- Each kind of work (farm jobs, streams, shared values, evolve sessions,
-- keyed reductions) lives in it as one 'Herd.Core.Master.Feature.Feature':
-- this module hands the cluster's events to every feature alike and each
-- worker's message to the one that owns it.
--
-- A driver ("Herd.Master.Shell" with one of the readers) feeds it what
-- happened ("Herd.Core.Master.Events") (a link came up or went down, a worker's message, a caller's
-- request) and carries out the commands it returns (send, stage a result,
-- answer a caller, drop a link). The core never does IO, so every
-- interleaving of workers, losses and concurrent jobs can be replayed in a
-- QuickCheck property without a socket.
--
-- Invariants (besides the scheduler's, "Herd.Core.Farm"):
--
-- * INV-ORDER: a worker answers the batches of a link in the order they
--   were sent; the core tracks, per link, which tasks each run of results is for,
--   and a message that breaks that order drops the link ('Drop').
-- * INV-ONCE: each farm job, stream and session is answered exactly once
--   ('JobDone', 'StreamEnded', 'SessionEnded'), also when its workers are
--   lost or the cluster stops.
-- * INV-SHARE-BEFORE: a worker that joins is sent every shared value
--   ("Herd.Core.Shared") before any other message of the core.
-- * INV-ROUTE: a worker's message reaches only the job, stream or session
--   it belongs to; a message for one that ended is dropped quietly, a
--   message that belongs to nothing it was sent is a protocol error.
module Herd.Core.Master
  ( -- * The machine
    Core
  , emptyCore
  , step
  , features
    -- * Inspection
  , coreSched
  , coreStopping
  , coreFarmJobs
  , coreLedger
  , coreJobView
  , coreStreamCount
  , coreSessionView
  , coreRunsExchange
  , coreShares
  , coreSteals
  , coreCalls
  , CallView (..)
  ) where

import Data.List (find)
import qualified Data.Map.Strict as M
import Herd.Core.Fault
import Herd.Core.Master.Events
import Herd.Core.Master.Expect (noneExpected)
import Herd.Core.Master.Exchanges (cancelExchange, exchangeFeature, startExchange)
import Herd.Core.Master.Stages (cancelStage, dropDatasets, stageFeature, startStage)
import Herd.Core.Master.Farms (farmEvent, farmFeature)
import Herd.Core.Master.Feature
import Herd.Core.Master.Sessions (cancelSession, sessionFeature, startSession)
import Herd.Core.Master.Shares (shareEvent, shareFeature)
import Herd.Core.Master.Steals (stealFeature)
import Herd.Core.Master.State
import Herd.Core.Master.Streams (streamEvent, streamFeature)
import Herd.Core.Monitor.Ledger
import Herd.Core.Packet.Policy (Urgency (..))
import Herd.Core.Base (WorkerId, rangeSize)
import Herd.Core.Farm (outstandingFor)
import Herd.Core.Step (Step, emit, runStep, transition, update)
import Control.Monad (forM_)
import Herd.Core.Wire (ToWorker (..))

-- | The kinds of work the core hosts, in the order each hears the
-- cluster's events (the shared values first: INV-SHARE-BEFORE).
features :: [Feature]
features = [shareFeature, farmFeature, streamFeature, sessionFeature, exchangeFeature, stageFeature, stealFeature]

-- | Advance the core by one event at the given time (seconds from any
-- fixed origin).
step :: Double -> Event -> Core -> (Core, [Command])
step now ev core =
  -- the ledger's clock counts working time up to now by the state before
  -- the event, and from now by the state after it
  -- (only a change between having work and not touches it: no new core
  -- is built for the ledger on almost every event)
  let (core', out) = advance now ev core
      working = hasWork core'
  in if working == ledgerWorking (coreLedger core') then (core', out)
     else (core' { coreLedger = ledgerTick now working (coreLedger core') }, out)

-- | Every running call, of every kind, in the features' order.
coreCalls :: Core -> [CallView]
coreCalls core = concatMap (`featureCalls` core) features

-- Whether the cluster has work: a farm job, a stream, a session or a
-- reduction.
hasWork :: Core -> Bool
hasWork core = any (`featureBusy` core) features

advance :: Double -> Event -> Core -> (Core, [Command])
advance now ev core = case ev of
  LinkUp w -> linkUp now w core
  LinkDown w why -> linkDown now w True why core
  LinkBroken w why -> linkDown now w False why core
  WorkersAwaited n -> flip runStep core $ do
    forM_ features $ \f -> transition (featureAwaited f now n)
    starved now
  Tick -> everyFeature (\f -> featureTick f now) core
  WorkerHeld w held
    | M.member w (coreLinks core) -> everyFeature (\f -> featureHeld f now w held) core
    | otherwise -> (core, [])
  Received w msg
    | M.member w (coreLinks core) -> case find (`featureOwns` msg) features of
        Just f -> featureReceived f (hooks now) now w msg core
        Nothing -> (core, [])
    | otherwise -> (core, [])   -- dropped already: its messages go with it
  FarmSubmit {} -> farmEvent now ev core
  FarmCancel {} -> farmEvent now ev core
  FarmBroken {} -> farmEvent now ev core
  BatchNotSent {} -> farmEvent now ev core
  OpenStream {} -> streamEvent ev core
  EndStreamInput {} -> streamEvent ev core
  ConsumedStream {} -> streamEvent ev core
  CloseStream {} -> streamEvent ev core
  SessionStart sid req -> startSession (hooks now) sid req core
  -- INV-ONCE: a caller that gave up is not answered; its workers' late
  -- answers are dropped as those of an ended session
  SessionCancel sid -> (cancelSession sid core, [])
  ShareValue {} -> shareEvent ev core
  Unshare {} -> shareEvent ev core
  ExchangeStart xid job -> startExchange xid job core
  ExchangeCancel xid -> cancelExchange xid core
  StageStart sid job -> startStage sid job core
  StageCancel sid -> cancelStage sid core
  DatasetsDrop dids -> dropDatasets dids core
  Stop -> stopAll now core

-- Every feature takes this transition, in the list's order.
everyFeature :: (Feature -> Core -> (Core, [Command])) -> Core -> (Core, [Command])
everyFeature t core = runStep (forM_ features (transition . t)) core

-- Work whose workers are all gone learns whether any is coming.
starved :: Double -> StepOf ()
starved now = forM_ features $ \f -> transition (featureStarved f (hooks now) now)

type StepOf a = Step Core Command a

-- What a feature is given to act on the cluster with.
hooks :: Double -> Hooks
hooks now = Hooks { hookDropPeer = \w violation -> linkDown now w False (ProtocolViolation violation) }

-- A worker's link is up: every feature takes it up (the shared values
-- first, INV-SHARE-BEFORE).
linkUp :: Double -> WorkerId -> Core -> (Core, [Command])
linkUp now w core
  | coreStopping core || M.member w (coreLinks core) = (core, [])
  | otherwise = flip runStep core $ do
      update (\c -> c { coreLinks = M.insert w noneExpected (coreLinks c), coreLedger = ledgerJoin now w (coreLedger c) })
      forM_ features $ \f -> transition (featureJoined f (hooks now) now w)

-- The cluster stops: every caller is answered, every worker told to stop.
stopAll :: Double -> Core -> (Core, [Command])
stopAll now core = flip runStep core $ do
  forM_ features $ \f -> transition (featureStop f now)
  emit [ Send w Urgent Shutdown | w <- M.keys (coreLinks core) ]
  update (\c -> c { coreStopping = True })

-- A worker's link is gone: every feature hears (its batches run
-- elsewhere, its streams break, its sessions learn of it), then work left
-- with no worker learns whether any is coming. A link that died (not one
-- the core dropped) charges the tasks that may have been running on it
-- (INV-POISON).
linkDown :: Double -> WorkerId -> Bool -> LinkFault -> Core -> (Core, [Command])
linkDown now w died fault core = case M.lookup w (coreLinks core) of
  Nothing -> (core, [])
  Just due ->
    let why = renderFault fault
        unfinished = concatMap snd (outstandingFor w (coreSched core))
        note = [ Note ("herd: worker " ++ show w ++ " lost: " ++ why
                       ++ (if null unfinished then "" else "; its " ++ show (sum (map rangeSize unfinished))
                                                            ++ " unfinished tasks will run elsewhere"))
               | not (coreStopping core) ]
        loss = Loss { lossDied = died, lossFault = fault, lossDue = due }
    in flip runStep core $ do
         emit (note ++ [Drop w fault])
         update (\c -> c { coreLinks = M.delete w (coreLinks c), coreLedger = ledgerLose now w why (coreLedger c) })
         forM_ features $ \f -> transition (featureLost f (hooks now) now w loss)
         starved now
