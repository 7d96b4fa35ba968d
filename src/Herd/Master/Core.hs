{-# LANGUAGE ExistentialQuantification #-}
-- | The master's one functional core: every decision the master makes, for
-- farm jobs, stream processes and evolve sessions alike, as a pure state
-- machine @Event -> Core -> (Core, [Command])@.
--
-- A driver ("Herd.Master.Shell" with one of the readers) feeds it what
-- happened (a link came up or went down, a worker's message, a caller's
-- request) and carries out the commands it returns (send, stage a result,
-- answer a caller, drop a link). The core never does IO, so every
-- interleaving of workers, losses and concurrent jobs can be replayed in a
-- QuickCheck property without a socket.
--
-- Invariants (besides the scheduler's, "Herd.Scheduler"):
--
-- * INV-ORDER: a worker answers the batches of a link in the order they
--   were sent; the core tracks, per link, which task each 'Result' is for,
--   and a message that breaks that order drops the link ('Drop').
-- * INV-ONCE: each farm job, stream and session is answered exactly once
--   ('JobDone', 'StreamEnded', 'SessionEnded'), also when its workers are
--   lost or the cluster stops.
-- * INV-ROUTE: a worker's message reaches only the job, stream or session
--   it belongs to; a message for one that ended is dropped quietly, a
--   message that belongs to nothing it was sent is a protocol error.
module Herd.Master.Core
  ( -- * The machine
    Core
  , emptyCore
  , Event (..)
  , Command (..)
  , FarmJob (..)
  , step
    -- * Inspection
  , coreSched
  , coreStopping
  , coreWorkers
  , coreStreamWorker
  , coreSessionRunning
  , coreFarmJobs
  ) where

import Data.Foldable (toList)
import Data.List (partition, sortOn)
import qualified Data.Map.Strict as M
import Data.Sequence (Seq, ViewL (..), (|>))
import qualified Data.Sequence as Seq
import qualified Data.Set as S
import qualified Data.Text as T
import Data.Word (Word64)
import qualified Data.ByteString as B
import Herd.Config (Batching)
import Herd.Error (HerdError (..))
import Herd.Master.Session (Machine (..), Out (..), SessionEnd (..), SessionRequest (..), isEvolveMessage)
import Herd.Packet (Encoder)
import Herd.Packet.Policy (Urgency (..))
import Herd.Scheduler (BatchId, JobId, Range (..), Sched, WorkerId, emptySched, outstandingFor, rangeIndices, rangeSize)
import qualified Herd.Scheduler as S
import Herd.Task (TaskRef (..))
import Herd.Wire (FromWorker (..), ToWorker (..))

-- | A farm job as the core knows it.
data FarmJob = FarmJob
  { farmRef      :: !TaskRef
  , farmTasks    :: !Int
  , farmBatching :: !Batching
  , farmTarget   :: !Double    -- ^ seconds of work per batch
  }

-- | Something that happened, or that a caller asks for.
data Event
  = LinkUp !WorkerId                    -- ^ a worker passed the handshake
  | LinkDown !WorkerId !String          -- ^ its link broke, or it broke the protocol
  | Received !WorkerId !FromWorker      -- ^ one message from a worker
  | FarmSubmit !JobId !FarmJob
  | FarmCancel !JobId                   -- ^ the caller gave up (no answer is due)
  | FarmBroken !JobId !HerdError        -- ^ an argument or a result failed in the driver: end the job
  | BatchNotSent !WorkerId !BatchId !HerdError
    -- ^ the driver could not send a batch (an argument threw): end its job
  | OpenStream !Word64 !TaskRef !Int    -- ^ a stream process, and its flow window
  | FeedStream !Word64 !Encoder         -- ^ one input element
  | EndStreamInput !Word64
  | ConsumedStream !Word64 !Int         -- ^ the caller read this many more output elements
  | FlushStream !Word64                 -- ^ the caller waits: send what is buffered
  | CloseStream !Word64                 -- ^ the caller wants no more output
  | SessionStart !SessionRequest
  | Stop                                -- ^ the cluster stops: answer everyone, stop the workers

-- | What the driver must do, in order.
data Command
  = Send !WorkerId !Urgency !ToWorker
  | SendInput !WorkerId !Word64 !Encoder
  | SendBatch !WorkerId !JobId !BatchId !TaskRef ![Int]
    -- ^ check and encode these tasks' arguments and send them as one batch
    -- (if one throws, feed back 'BatchNotSent')
  | Flush !WorkerId
  | Stage !JobId !Int !B.ByteString
    -- ^ a task's encoded result (a task may be staged twice when its
    -- first worker was lost)
  | Accept !JobId ![Range]              -- ^ these tasks' staged results are final
  | JobDone !JobId !(Either HerdError S.JobStats)
  | StreamOpened !Word64 !(Either HerdError WorkerId)
  | StreamOutput !Word64 !B.ByteString
  | StreamGrant !Word64 !Int            -- ^ the caller may send this many more input elements
  | StreamEnded !Word64 !(Maybe String) -- ^ finished ('Nothing') or broken, with why
  | SessionEnded (IO ())                -- ^ answer the session's caller
  | Drop !WorkerId !String              -- ^ close this link; stop reading it
  | Note !String                        -- ^ a line for the log

-- What the core knows of one link: the batches sent on it whose results
-- are due, oldest first (INV-ORDER).
newtype Link = Link { linkExpect :: Seq Expect }

data Expect = Expect
  { expJob   :: !JobId
  , expBatch :: !BatchId
  , expNext  :: ![Int]   -- ^ tasks whose results are still to come, in order
  , expGot   :: !Int
  }

data Stream = Stream
  { streamWorker  :: !WorkerId
  , streamAllowed :: !Int    -- ^ output elements the worker may still send
  }

-- A running session: its machine and state, its workers, those lost, its
-- error, and how to answer its caller.
data Session = forall st. Session !(Machine st) !st !(S.Set WorkerId) !(M.Map WorkerId String)
                                  !(Maybe HerdError) (Either HerdError (SessionEnd st) -> IO ())

-- | The master's state.
data Core = Core
  { coreSched    :: !Sched                      -- ^ the farm's scheduler
  , coreLinks    :: !(M.Map WorkerId Link)
  , coreFarms    :: !(M.Map JobId FarmJob)
  , coreStreams  :: !(M.Map Word64 Stream)
  , coreSession  :: !(Maybe Session)
  , coreStopping :: !Bool
  , coreRequeued :: ![(WorkerId, Double, [Range])]  -- ^ a lost worker's tasks not yet re-sent, for the log
  }

-- | No links, no jobs.
emptyCore :: Core
emptyCore = Core emptySched M.empty M.empty M.empty Nothing False []

-- | The workers with a live link.
coreWorkers :: Core -> [WorkerId]
coreWorkers = M.keys . coreLinks

-- | The worker a stream process runs on.
coreStreamWorker :: Word64 -> Core -> Maybe WorkerId
coreStreamWorker sid = fmap streamWorker . M.lookup sid . coreStreams

-- | Whether an evolve session is running.
coreSessionRunning :: Core -> Bool
coreSessionRunning = maybe False (const True) . coreSession

-- | The farm jobs running.
coreFarmJobs :: Core -> [JobId]
coreFarmJobs = M.keys . coreFarms

-- | Advance the core by one event at the given time (seconds from any
-- fixed origin).
step :: Double -> Event -> Core -> (Core, [Command])
step now ev core = case ev of
  LinkUp w
    | coreStopping core || M.member w (coreLinks core) -> (core, [])
    | otherwise -> sched now (S.WorkerJoined w) core { coreLinks = M.insert w (Link Seq.empty) (coreLinks core) }
  LinkDown w why -> linkDown now w why core
  Received w msg
    | M.member w (coreLinks core) -> received now w msg core
    | otherwise -> (core, [])   -- dropped already: its messages go with it
  FarmSubmit jid job
    | coreStopping core -> (core, [JobDone jid (Left ClusterClosed)])
    | otherwise -> sched now (S.JobSubmitted jid (farmTasks job) (farmBatching job) (farmTarget job))
                         core { coreFarms = M.insert jid job (coreFarms core) }
  FarmCancel jid -> sched now (S.JobCancelled jid) core { coreFarms = M.delete jid (coreFarms core) }
  FarmBroken jid err -> endFarm now jid err core
  BatchNotSent w bid err -> case M.lookup w (coreLinks core) of
    Nothing -> (core, [])
    Just l ->
      let (gone, kept) = Seq.partition ((== bid) . expBatch) (linkExpect l)
          core1 = core { coreLinks = M.insert w (Link kept) (coreLinks core) }
      in case toList gone of
           e : _ -> let (core2, out1) = endFarm now (expJob e) err core1
                        -- the batch is stale now: the scheduler forgets it
                        (core3, out2) = sched now (S.BatchCompleted w bid 0 Nothing) core2
                    in (core3, out1 ++ out2)
           [] -> (core1, [])
  OpenStream sid ref window
    | coreStopping core -> (core, [StreamOpened sid (Left ClusterClosed)])
    | otherwise -> case leastLoaded core of
        Nothing -> (core, [StreamOpened sid (Left NoWorkers)])
        Just w -> ( core { coreStreams = M.insert sid (Stream w window) (coreStreams core) }
                  , [Send w Bulk (StreamOpen sid ref), StreamOpened sid (Right w)] )
  FeedStream sid enc -> withStream sid $ \s -> (core, [SendInput (streamWorker s) sid enc])
  EndStreamInput sid -> withStream sid $ \s -> (core, [Send (streamWorker s) Urgent (StreamEnd sid)])
  ConsumedStream sid k -> withStream sid $ \s ->
    ( core { coreStreams = M.insert sid s { streamAllowed = streamAllowed s + k } (coreStreams core) }
    , [Send (streamWorker s) Urgent (StreamCredit sid (fromIntegral k))] )
  FlushStream sid -> withStream sid $ \s -> (core, [Flush (streamWorker s)])
  CloseStream sid -> withStream sid $ \s ->
    (core { coreStreams = M.delete sid (coreStreams core) }, [Send (streamWorker s) Urgent (StreamClose sid)])
  SessionStart req -> startSession now req core
  Stop ->
    let farms = [ JobDone jid (Left ClusterClosed) | jid <- M.keys (coreFarms core) ]
        streams = [ StreamEnded sid (Just "the cluster was closed") | sid <- M.keys (coreStreams core) ]
        stops = [ Send w Urgent Shutdown | w <- M.keys (coreLinks core) ]
        (core1, ended) = case coreSession core of
          Just (Session m st ws lost _ answer) -> (core { coreSession = Nothing }, [finishSession (Session m st ws lost (Just ClusterClosed) answer)])
          Nothing -> (core, [])
    in ( core1 { coreStopping = True, coreFarms = M.empty, coreStreams = M.empty
               , coreSched = foldr (\jid s -> fst (S.step now (S.JobCancelled jid) s)) (coreSched core)
                                   (M.keys (coreFarms core)) }
       , farms ++ streams ++ ended ++ stops )
  where
    withStream sid act = maybe (core, []) act (M.lookup sid (coreStreams core))

-- The worker with the fewest open streams (lowest number on a tie).
leastLoaded :: Core -> Maybe WorkerId
leastLoaded core = case sortOn load (M.keys (coreLinks core)) of
  w : _ -> Just w
  [] -> Nothing
  where load w = (length (filter ((== w) . streamWorker) (M.elems (coreStreams core))), w)

-- End a farm job with an error.
endFarm :: Double -> JobId -> HerdError -> Core -> (Core, [Command])
endFarm now jid err core
  | M.member jid (coreFarms core) =
      let (core1, out) = sched now (S.JobCancelled jid) core { coreFarms = M.delete jid (coreFarms core) }
      in (core1, JobDone jid (Left err) : out)
  | otherwise = (core, [])

-- A worker's link is gone: its batches run elsewhere, its streams break,
-- its session learns of it.
linkDown :: Double -> WorkerId -> String -> Core -> (Core, [Command])
linkDown now w why core
  | not (M.member w (coreLinks core)) = (core, [])
  | otherwise =
      let unfinished = concatMap snd (outstandingFor w (coreSched core))
          (broken, kept) = M.partition ((== w) . streamWorker) (coreStreams core)
          note = [ Note ("herd: worker " ++ show w ++ " lost: " ++ why
                         ++ (if null unfinished then "" else "; its " ++ show (sum (map rangeSize unfinished))
                                                              ++ " unfinished tasks will run elsewhere"))
                 | not (coreStopping core) ]
          ends = [ StreamEnded sid (Just ("its worker " ++ show w ++ " was lost: " ++ why)) | sid <- M.keys broken ]
          core1 = core { coreLinks = M.delete w (coreLinks core), coreStreams = kept
                       , coreRequeued = [ (w, now, unfinished) | not (null unfinished), not (coreStopping core) ]
                                        ++ coreRequeued core }
          (core2, sessionOut) = sessionLost now w why core1
          (core3, schedOut) = sched now (S.WorkerLost w) core2
      in (core3, note ++ [Drop w why] ++ ends ++ sessionOut ++ schedOut)

-- A message from a live worker.
received :: Double -> WorkerId -> FromWorker -> Core -> (Core, [Command])
received now w msg core = case msg of
  Result value -> case viewExpect of
    Just (e, later) | (i : next) <- expNext e ->
      ( setExpect (e { expNext = next, expGot = expGot e + 1 } Seq.<| later)
      , [ Stage (expJob e) i value | M.member (expJob e) (coreFarms core) ] )
    _ -> bad "a result that no batch was waiting for"
  BatchDone bid busyNs -> popExpect bid $ \e core1 ->
    if not (null (expNext e))
      then badIn core1 ("batch " ++ show bid ++ " ended after " ++ show (expGot e) ++ " of "
                        ++ show (expGot e + length (expNext e)) ++ " results")
      else sched now (S.BatchCompleted w bid (fromIntegral busyNs / 1e9) Nothing) core1
  TaskThrew bid pos why -> popExpect bid $ \e core1 ->
    if fromIntegral pos /= expGot e
      then badIn core1 ("batch " ++ show bid ++ " failed at position " ++ show pos ++ " after "
                        ++ show (expGot e) ++ " results")
      else sched now (S.BatchCompleted w bid 0 (Just (fromIntegral pos, T.unpack why))) core1
  BatchRejected bid why -> popExpect bid $ \_ core1 -> sched now (S.BatchRefused w bid (T.unpack why)) core1
  StreamOut sid value -> ownStream sid $ \s ->
    if streamAllowed s <= 0 then bad ("stream " ++ show sid ++ " sent more elements than its credit")
    else ( core { coreStreams = M.insert sid s { streamAllowed = streamAllowed s - 1 } (coreStreams core) }
         , [StreamOutput sid value] )
  StreamDone sid -> ownStream sid $ \_ -> (core { coreStreams = M.delete sid (coreStreams core) }, [StreamEnded sid Nothing])
  StreamAborted sid why -> ownStream sid $ \_ ->
    (core { coreStreams = M.delete sid (coreStreams core) }, [StreamEnded sid (Just (T.unpack why))])
  StreamTaken sid n -> ownStream sid $ \_ -> (core, [StreamGrant sid (fromIntegral n)])
  Pong _ -> (core, [])
  _ | isEvolveMessage msg -> sessionMessage now w msg core
    | otherwise -> (core, [])
  where
    link = M.findWithDefault (Link Seq.empty) w (coreLinks core)
    viewExpect = case Seq.viewl (linkExpect link) of
      e :< later -> Just (e, later)
      EmptyL -> Nothing
    setExpect q = core { coreLinks = M.insert w (Link q) (coreLinks core) }
    popExpect bid act = case viewExpect of
      Just (e, later) | expBatch e == bid -> act e (setExpect later)
      _ -> bad ("an end of batch " ++ show bid ++ ", which is not the batch in progress")
    bad = badIn core
    badIn c why = linkDown now w ("bad message: " ++ why) c
    ownStream sid act = case M.lookup sid (coreStreams core) of
      Just s | streamWorker s == w -> act s
             | otherwise -> bad ("message for stream " ++ show sid ++ " of another worker")
      Nothing -> (core, [])   -- closed by its caller: late messages are dropped

-- Step the scheduler and turn its commands into the core's.
sched :: Double -> S.Event -> Core -> (Core, [Command])
sched now ev core =
  let (s', cmds) = S.step now ev (coreSched core)
  in foldl run (core { coreSched = s' }, []) cmds
  where
    run (c, out) cmd = case cmd of
      S.SendBatch w bid ranges -> case (S.batchJobOf w bid (coreSched c), M.lookup w (coreLinks c)) of
        (Just jid, Just l) | Just job <- M.lookup jid (coreFarms c) ->
          let indices = rangeIndices ranges
              c1 = c { coreLinks = M.insert w (Link (linkExpect l |> Expect jid bid indices 0)) (coreLinks c) }
              (c2, notes) = noteRerun w ranges c1
          in (c2, out ++ notes ++ [SendBatch w jid bid (farmRef job) indices])
        _ -> (c, out)
      S.AcceptResults jid _ ranges
        | M.member jid (coreFarms c) -> (c, out ++ [Accept jid ranges])
        | otherwise -> (c, out)
      S.DropResults _ -> (c, out)
      S.FinishJob jid stats -> answer c out jid (Right stats)
      S.AbortJob jid failure _ -> case M.lookup jid (coreFarms c) of
        Just job -> answer c out jid (Left (failureError (refName (farmRef job)) failure))
        Nothing -> (c, out)
    answer c out jid result
      | M.member jid (coreFarms c) = (c { coreFarms = M.delete jid (coreFarms c) }, out ++ [JobDone jid result])
      | otherwise = (c, out)
    noteRerun w ranges c =
      let overlaps rs = or [ lo < hi' && lo' < hi | Range lo hi <- ranges, Range lo' hi' <- rs ]
          (hit, rest) = partition (\(_, _, rs) -> overlaps rs) (coreRequeued c)
      in ( c { coreRequeued = rest }
         , [ Note ("herd: tasks of lost worker " ++ show lost ++ " re-sent to worker " ++ show w ++ " "
                   ++ show (round ((now - at) * 1000) :: Int) ++ " ms after the loss was noticed")
           | (lost, at, _) <- hit ] )

failureError :: String -> S.JobFailure -> HerdError
failureError name failure = case failure of
  S.TaskError i msg -> TaskFailed i name msg
  S.FunctionRefused why -> RemoteFunctionError name why
  S.NoWorkersLeft -> AllWorkersLost "the cluster has no live worker"

-- Start a session on the live workers (the lowest numbered, up to its limit).
startSession :: Double -> SessionRequest -> Core -> (Core, [Command])
startSession now (SessionRequest limit start answer) core
  | coreStopping core = (core, [SessionEnded (answer (Left ClusterClosed))])
  | Just _ <- coreSession core =
      (core, [SessionEnded (answer (Left (EvolveFailed "" "" "another evolve call is running on this cluster")))])
  | otherwise = case start workers of
      Left err -> (core, [SessionEnded (answer (Left err))])
      Right (machine, st0, outs) ->
        settle now (Session machine st0 (S.fromList workers) M.empty Nothing answer) outs core
  where workers = maybe id take limit (M.keys (coreLinks core))

-- Hand a worker's evolve message to the session, if it is one of its workers.
sessionMessage :: Double -> WorkerId -> FromWorker -> Core -> (Core, [Command])
sessionMessage now w msg core = case coreSession core of
  Just (Session machine st ws lost err answer) | S.member w ws, not (M.member w lost) ->
    let (st', outs) = machineMessage machine w msg st
    in settle now (Session machine st' ws lost err answer) outs core
  _ -> (core, [])   -- a late answer of a call that ended

sessionLost :: Double -> WorkerId -> String -> Core -> (Core, [Command])
sessionLost now w why core = case coreSession core of
  Just (Session machine st ws lost err answer) | S.member w ws, not (M.member w lost) ->
    let (st', outs) = machineLost machine w why st
    in settle now (Session machine st' ws (M.insert w why lost) err answer) outs core
  _ -> (core, [])

-- Carry out a session's outs and end it if it is over. Messages to one
-- worker go out together, the last one urgent.
settle :: Double -> Session -> [Out] -> Core -> (Core, [Command])
settle now s0 outs core0 =
  let failed = case (s0, [ e | Fail e <- outs ]) of
        (Session m st ws lost Nothing answer, e : _) -> Session m st ws lost (Just e) answer
        _ -> s0
      live w = case failed of
        Session _ _ ws lost _ _ -> S.member w ws && not (M.member w lost) && M.member w (coreLinks core0)
      perWorker = M.fromListWith (flip (++)) [ (w, [m]) | SendTo w m <- outs, live w ]
      sends = concat [ [ Send w Bulk m | m <- init ms ] ++ [Send w Urgent (last ms)]
                     | (w, ms) <- M.toList perWorker, not (null ms) ]
      drops = [ (w, "bad message: " ++ why) | DropPeer w why <- outs ]
      core1 = core0 { coreSession = Just failed }
      -- a dropped peer is a lost worker for the session too
      (core2, dropOut) = foldl (\(c, acc) (w, why) -> let (c', o) = stepLinkDown w why c in (c', acc ++ o))
                               (core1, []) drops
  in case coreSession core2 of
       Just s | over s -> (core2 { coreSession = Nothing }, sends ++ dropOut ++ [finishSession s])
       _ -> (core2, sends ++ dropOut)
  where
    stepLinkDown w why c = linkDown now w why c
    over (Session machine st ws lost err _) =
      maybe False (const True) err || machineDone machine st || S.null (S.difference ws (M.keysSet lost))

finishSession :: Session -> Command
finishSession (Session _ st _ lost err answer) =
  SessionEnded (answer (Right (SessionEnd st err (M.toList lost))))
