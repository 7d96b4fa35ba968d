-- | The master's one functional core: every decision the master makes, for
-- farm jobs, stream processes and evolve sessions alike, as a pure state
-- machine @Event -> Core -> (Core, [Command])@.
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
  ) where

import Data.List (sortOn)

import qualified Data.Map.Strict as M
import qualified Data.Text as T
import Herd.Core.Error (HerdError (..))
import Herd.Core.Fault
import Herd.Core.Master.Events
import Herd.Core.Master.State
import Herd.Core.Master.Expect
import Herd.Core.Session
import Herd.Core.Master.Farms (endFarm, sched)
import Herd.Core.Master.Exchanges
import Herd.Core.Master.Sessions
import Herd.Core.Exchange (exchangeOf)
import Herd.Core.Monitor.Ledger
import Herd.Core.Packet.Policy (Urgency (..))
import Herd.Core.Base (WorkerId, rangeSize)
import Herd.Core.Farm (outstandingFor)
import Herd.Core.Shared
import Herd.Core.Step (current, emit, runStep, transition, update)
import Control.Monad (forM_, when)
import qualified Herd.Core.Farm as S
import Herd.Core.Wire (FromWorker (..), ToWorker (..))

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

advance :: Double -> Event -> Core -> (Core, [Command])
advance now ev core = case ev of
  LinkUp w -> linkUp now w core
  LinkDown w why -> linkDown now w True why core
  LinkBroken w why -> linkDown now w False why core
  WorkersAwaited n -> flip runStep core $ do
    transition (sched now (S.WorkersAwaited n))
    transition (sessionStarved (dropPeer now) now)
    when (n == 0) $ transition exchangesStarved
  Tick | M.null (coreFarms core) -> (core, [])
       | otherwise -> sched now S.Tick core
  WorkerHeld w held
    | M.member w (coreLinks core) -> flip runStep core $ do
        transition (sched now (S.WorkerHeld w held))
        transition (exchangesHeld w held)
    | otherwise -> (core, [])
  Received w msg
    | M.member w (coreLinks core) -> received now w msg core
    | otherwise -> (core, [])   -- dropped already: its messages go with it
  FarmSubmit {} -> farmEvent now ev core
  FarmCancel {} -> farmEvent now ev core
  FarmBroken {} -> farmEvent now ev core
  BatchNotSent {} -> farmEvent now ev core
  OpenStream {} -> streamEvent ev core
  EndStreamInput {} -> streamEvent ev core
  ConsumedStream {} -> streamEvent ev core
  CloseStream {} -> streamEvent ev core
  SessionStart sid req -> startSession (dropPeer now) sid req core
  -- INV-ONCE: a caller that gave up is not answered; its workers' late
  -- answers are dropped as those of an ended session
  SessionCancel sid -> (cancelSession sid core, [])
  ShareValue {} -> shareEvent ev core
  Unshare {} -> shareEvent ev core
  ExchangeStart xid job -> startExchange xid job core
  ExchangeCancel xid -> cancelExchange xid core
  Stop -> stopAll now core

-- A worker's link is up: the shared values go first (INV-SHARE-BEFORE),
-- then the scheduler, the sessions and the exchanges take it up.
linkUp :: Double -> WorkerId -> Core -> (Core, [Command])
linkUp now w core
  | coreStopping core || M.member w (coreLinks core) = (core, [])
  | otherwise =
      let (shares, shared) = shareJoined w (coreShares core)
      in flip runStep core $ do
           emit [ ShareTo w n bytes | (n, bytes) <- shared ]
           update (\c -> c { coreLinks = M.insert w noneExpected (coreLinks c), coreLedger = ledgerJoin now w (coreLedger c)
                           , coreShares = shares })
           transition (sched now (S.WorkerJoined w))
           transition (sessionJoined (dropPeer now) now w)
           transition (exchangesJoined w)

-- A farm job's submission, cancel or breakage, and a batch that could not be sent.
farmEvent :: Double -> Event -> Core -> (Core, [Command])
farmEvent now ev core = case ev of
  FarmSubmit jid job
    | coreStopping core -> (core, [JobDone jid (Left ClusterClosed)])
    | otherwise -> sched now (S.JobSubmitted jid (farmTasks job) (farmBatching job) (farmTarget job) (farmMaxDeaths job) (farmKeepGoing job))
                         core { coreFarms = M.insert jid job (coreFarms core) }
  FarmCancel jid -> sched now (S.JobCancelled jid) core { coreFarms = M.delete jid (coreFarms core) }
  FarmBroken jid err -> endFarm now jid err core
  BatchNotSent w bid err -> case M.lookup w (coreLinks core) of
    Nothing -> (core, [])
    Just l ->
      let (gone, kept) = forgetBatch bid l
      in flip runStep core $ do
           update (\c -> c { coreLinks = M.insert w kept (coreLinks c) })
           forM_ gone $ \jid -> do
             transition (endFarm now jid err)
             -- the batch is stale now: the scheduler forgets it
             transition (sched now (S.BatchCompleted w bid 0 Nothing))
  _ -> (core, [])

-- A caller's stream: its opening, the end of its input, its credit and its close.
streamEvent :: Event -> Core -> (Core, [Command])
streamEvent ev core = case ev of
  OpenStream sid ref window
    | coreStopping core -> (core, [StreamOpened sid (Left ClusterClosed)])
    | otherwise -> case leastLoaded core of
        Nothing -> (core, [StreamOpened sid (Left NoWorkers)])
        Just w -> ( core { coreStreams = M.insert sid (Stream w window) (coreStreams core) }
                  , [Send w Bulk (StreamOpen sid ref), StreamOpened sid (Right w)] )
  EndStreamInput sid -> withStream sid $ \s -> (core, [Send (streamWorker s) Urgent (StreamEnd sid)])
  ConsumedStream sid k -> withStream sid $ \s ->
    ( core { coreStreams = M.insert sid s { streamAllowed = streamAllowed s + k } (coreStreams core) }
    , [Send (streamWorker s) Urgent (StreamCredit sid (fromIntegral k))] )
  CloseStream sid -> withStream sid $ \s ->
    (core { coreStreams = M.delete sid (coreStreams core) }, [Send (streamWorker s) Urgent (StreamClose sid)])
  _ -> (core, [])
  where
    withStream sid act = maybe (core, []) act (M.lookup sid (coreStreams core))

-- A value shared or unshared ("Herd.Core.Shared").
shareEvent :: Event -> Core -> (Core, [Command])
shareEvent ev core = case ev of
  ShareValue n bytes
    | coreStopping core -> (core, [])
    | otherwise ->
        let (shares, sends) = shareAdd n bytes (M.keys (coreLinks core)) (coreShares core)
        in (core { coreShares = shares }, [ ShareTo w n bytes | w <- sends ])
  Unshare n ->
    let (shares, sends) = shareRemove n (M.keys (coreLinks core)) (coreShares core)
    in (core { coreShares = shares }, [ Send w Urgent m | (w, m) <- sends ] ++ [ Unshared n | n `elem` sharesLive (coreShares core) ])
  _ -> (core, [])

-- The cluster stops: every caller is answered, every worker told to stop.
stopAll :: Double -> Core -> (Core, [Command])
stopAll now core =
  let farms = [ JobDone jid (Left ClusterClosed) | jid <- M.keys (coreFarms core) ]
      streams = [ StreamEnded sid (Just StreamClusterClosed) | sid <- M.keys (coreStreams core) ]
      stops = [ Send w Urgent Shutdown | w <- M.keys (coreLinks core) ]
  in flip runStep core $ do
       emit (farms ++ streams)
       transition (stopSessions ClusterClosed)
       transition stopExchanges
       emit stops
       update (\c -> c { coreStopping = True, coreFarms = M.empty, coreStreams = M.empty
                       , coreSched = foldr (\jid sc -> fst (S.step now (S.JobCancelled jid) sc)) (coreSched core)
                                           (M.keys (coreFarms core)) })

-- The worker with the fewest open streams (lowest number on a tie).
leastLoaded :: Core -> Maybe WorkerId
leastLoaded core = case sortOn load (M.keys (coreLinks core)) of
  w : _ -> Just w
  [] -> Nothing
  where load w = (length (filter ((== w) . streamWorker) (M.elems (coreStreams core))), w)

-- A worker's link is gone: its batches run elsewhere, its streams break,
-- its session learns of it. A link that died (not one the core dropped)
-- charges the tasks that may have been running on it (INV-POISON).
linkDown :: Double -> WorkerId -> Bool -> LinkFault -> Core -> (Core, [Command])
linkDown now w died fault core
  | not (M.member w (coreLinks core)) = (core, [])
  | otherwise =
      let why = renderFault fault
          unfinished = concatMap snd (outstandingFor w (coreSched core))
          (broken, kept) = M.partition ((== w) . streamWorker) (coreStreams core)
          note = [ Note ("herd: worker " ++ show w ++ " lost: " ++ why
                         ++ (if null unfinished then "" else "; its " ++ show (sum (map rangeSize unfinished))
                                                              ++ " unfinished tasks will run elsewhere"))
                 | not (coreStopping core) ]
          ends = [ StreamEnded sid (Just (StreamWorkerLost w fault)) | sid <- M.keys broken ]
          death = [ S.Death bid got why | died, Just (bid, got) <- [oldestDue (coreLinks core M.! w)] ]
      in flip runStep core $ do
           emit (note ++ [Drop w fault] ++ ends)
           update (\c -> c { coreLinks = M.delete w (coreLinks c), coreStreams = kept
                           , coreShares = shareLost w (coreShares c)
                           , coreLedger = ledgerLose now w why (coreLedger c)
                           , coreRequeued = [ (w, now, unfinished) | not (null unfinished), not (coreStopping c) ]
                                            ++ coreRequeued c })
           transition (sessionLost (dropPeer now) now w why)
           transition (sched now (S.WorkerLost w (case death of { d : _ -> Just d; [] -> Nothing })))
           transition (sessionStarved (dropPeer now) now)
           transition (exchangesLost w died why)
           awaited <- S.awaitedWorkers . coreSched <$> current
           when (awaited == 0) $ transition exchangesStarved

-- A message from a live worker.
received :: Double -> WorkerId -> FromWorker -> Core -> (Core, [Command])
received now w msg core = case msg of
  -- INV-ORDER: a run of results is for the next tasks of the oldest batch due on its link
  Results k value -> case nextResults (fromIntegral k) link of
    Just (jid, tasks, link') -> (setExpect link', [ Stage jid tasks value | M.member jid (coreFarms core) ])
    Nothing -> bad (UnexpectedResults (fromIntegral k))
  BatchDone bid busyNs -> popExpect bid $ \e core1 ->
    if expLeft e > 0
      then badIn core1 (EarlyBatchEnd bid (expGot e) (expGot e + expLeft e))
      else let busy = fromIntegral busyNs / 1e9
           in sched now (S.BatchCompleted w bid busy Nothing)
                    core1 { coreLedger = ledgerCredit w (expGot e) 1 0 busy (coreLedger core1) }
  TaskThrew bid pos why -> popExpect bid $ \e core1 ->
    if fromIntegral pos /= expGot e
      then badIn core1 (MisplacedFailure bid (fromIntegral pos) (expGot e))
      else sched now (S.BatchCompleted w bid 0 (Just (fromIntegral pos, T.unpack why))) core1
  BatchRejected bid why -> popExpect bid $ \_ core1 -> sched now (S.BatchRefused w bid (T.unpack why)) core1
  StreamOut sid k value -> ownStream sid $ \s ->
    let n = fromIntegral k
    in if n < 1 || streamAllowed s < n
         then bad (OverCredit sid n (streamAllowed s))
         else ( core { coreStreams = M.insert sid s { streamAllowed = streamAllowed s - n } (coreStreams core) }
              , [StreamOutput sid n value] )
  StreamDone sid -> ownStream sid $ \_ -> (core { coreStreams = M.delete sid (coreStreams core) }, [StreamEnded sid Nothing])
  StreamAborted sid why -> ownStream sid $ \_ ->
    (core { coreStreams = M.delete sid (coreStreams core) }, [StreamEnded sid (Just (StreamProcessFailed (T.unpack why)))])
  StreamTaken sid n -> ownStream sid $ \_ -> (core, [StreamGrant sid (fromIntegral n)])
  Pong _ -> (core, [])
  ShareHeld _ -> (core { coreShares = shareAnswer w msg (coreShares core) }, [])
  ShareDropped _ -> (core { coreShares = shareAnswer w msg (coreShares core) }, [])
  ShareSpilled _ -> (core { coreShares = shareAnswer w msg (coreShares core) }, [])
  StateEvolved _ busyNs _ ->
    sessionMessage (dropPeer now) now w msg core { coreLedger = ledgerCredit w 0 0 1 (fromIntegral busyNs / 1e9) (coreLedger core) }
  _ | Just xid <- exchangeOf msg -> exchangeReceived xid w msg core
    | isEvolveMessage msg -> sessionMessage (dropPeer now) now w msg core
    | otherwise -> (core, [])
  where
    link = M.findWithDefault noneExpected w (coreLinks core)
    setExpect l = core { coreLinks = M.insert w l (coreLinks core) }
    -- INV-ORDER: a batch's end must be the oldest batch's
    popExpect bid act = case endOfBatch bid link of
      Just (e, later) -> act e (setExpect later)
      Nothing -> bad (UnknownBatchEnd bid)
    bad = badIn core
    badIn c violation = linkDown now w False (ProtocolViolation violation) c
    -- INV-ROUTE: a stream's messages come from its own worker
    ownStream sid act = case M.lookup sid (coreStreams core) of
      Just s | streamWorker s == w -> act s
             | otherwise -> bad (ForeignStream sid)
      Nothing -> (core, [])   -- closed by its caller: late messages are dropped

-- A session's peer that broke its protocol: dropped as a link that did
-- (what ran there is not charged).
dropPeer :: Double -> DropPeer
dropPeer now w why = linkDown now w False (ProtocolViolation (SessionViolation why))
