{-# LANGUAGE ScopedTypeVariables #-}
-- | Carrying out the master core's commands ("Herd.Core.Master.Events"), for
-- the shell ("Herd.Master.Shell"), which calls this with its lock held:
-- sends into each link's packet sender, a farm's staged and accepted
-- results, the answers to callers, dropped links; and the flushes at the
-- end of a step or a reader's round.
--
-- Promises: a command that fails (an argument that throws, a result that
-- does not decode, a send that breaks) comes back as an event for the
-- core, never lost; a send into a link marks it touched, and
-- 'flushTouched' sends what every touched link holds.
module Herd.Master.Execute
  ( execute
  , handOver
  , handOverFarms
  , flushTouched
  ) where

import Control.Concurrent.MVar
import Control.Concurrent.STM
import Control.Exception
import Control.Monad (foldM, forM_, unless, void, when)
import Data.Maybe (isJust)
import qualified Data.Map.Strict as M
import qualified Data.Set as S
import Herd.Settings
import Herd.Core.Error
import Herd.Core.Fault (LinkFault (..), renderBreak)
import Herd.Core.Master.Events
import Herd.Master.Link
import Herd.Master.ShellState
import Herd.Master.Types
import Herd.Core.Monitor.Ledger (keptLost)
import Herd.Sys.Trace (traceHerd)
import Herd.Packet
import Herd.Core.Packet.Policy (Urgency (..))
import Herd.Core.Farm (Range (..), WorkerId, rangeSize)
import Herd.Core.Wire
import Herd.Wire.Encode
import Herd.Wire.HostEntry (controlEncoder, hostSharePiece)
import Herd.Core.Wire.Host (HostControl (..))
import Herd.Core.Shared (sharePieces)
import qualified Data.ByteString as B
import Herd.Wire.ArgTable (ArgTable, argsEncoder, argsFitting)

-- | Carry out one command; events it feeds back are collected, newest first.
execute :: Shell -> (ShellState, [Event]) -> Command -> IO (ShellState, [Event])
execute sh acc@(ss, fed) cmd = case cmd of
  Send {} -> linkCommand acc cmd
  SendAll {} -> linkCommand acc cmd
  SendBatch {} -> linkCommand acc cmd
  ShareTo {} -> shareCommand acc cmd
  Unshared n -> do
    forM_ [ s | (s, ns) <- M.elems (ssHostShares ss), S.member n ns ] $ \s ->
      trySync (sendMessageTail s Urgent (controlEncoder (HostUnshare n)) B.empty)
    pure (ss { ssHostShares = M.map (fmap (S.delete n)) (ssHostShares ss) }, fed)
  Drop w _ -> dropLink sh acc w
  Stage {} -> farmNews acc cmd
  Accept {} -> farmNews acc cmd
  FailTask {} -> farmNews acc cmd
  JobDone {} -> farmNews acc cmd
  StreamOpened {} -> streamCommand acc cmd
  StreamOutput {} -> streamCommand acc cmd
  StreamGrant {} -> streamCommand acc cmd
  StreamEnded {} -> streamCommand acc cmd
  SessionEnded sid outcome -> case M.lookup sid (ssSessions ss) of
    Just answer -> do
      -- the caller's answer puts the outcome where its thread waits
      answer outcome
      pure (ss { ssSessions = M.delete sid (ssSessions ss) }, fed)
    Nothing -> pure acc   -- its caller gave up
  ExchangeEnded xid outcome -> case M.lookup xid (ssExchanges ss) of
    Just answer -> do
      answer outcome
      pure (ss { ssExchanges = M.delete xid (ssExchanges ss) }, fed)
    Nothing -> pure acc   -- its caller gave up
  Note line -> configLog (shConfig sh) line >> pure acc

-- Sends to one worker's link.
linkCommand :: (ShellState, [Event]) -> Command -> IO (ShellState, [Event])
linkCommand acc@(ss, fed) cmd = case cmd of
  -- INV-ONE-WRITER: the link's sender is used here, under the lock, and nowhere else
  -- held: the step ends with flushTouched, which sends what is left
  Send w urgency msg -> withLink w acc $ \l -> sendOn w acc $
    let (enc, tl) = toWorkerParts msg in sendMessageHeld (wlSender l) urgency enc tl
  SendAll w msgs -> withLink w acc $ \l -> sendOn w acc $ sendMessagesHeld (wlSender l) (map toWorkerParts msgs)
  SendBatch w jid bid ref ranges -> case (M.lookup w (ssLinks ss), M.lookup jid (ssFarms ss)) of
    (Just l, Just (spec, _)) -> sendOn w acc $ do
      let sender = wlSender l
      traceHerd ("herd batch " ++ show bid ++ " of job " ++ show jid ++ " to worker " ++ show w ++ ": "
                 ++ show (sum (map rangeSize ranges)) ++ " tasks")
      sendMessage sender Bulk (encodeToWorker (RunBatch bid ref (fromIntegral (sum (map rangeSize ranges)))))
      mapM_ (sendArgs sender (specArgs spec)) ranges
    (Nothing, _) -> pure acc   -- the link is being dropped; the core hears of it next
    (_, Nothing) -> pure (ss, BatchNotSent w bid ClusterClosed : fed)
  _ -> pure acc

-- INV-SHARE-ONCE on the wire: a worker of its own link is sent the
-- value; a host agent's workers get it from their agent, which is sent
-- it once and keeps it for the workers it starts later.
shareCommand :: (ShellState, [Event]) -> Command -> IO (ShellState, [Event])
shareCommand acc@(ss, _) cmd = case cmd of
  ShareTo w n bytes -> withLink w acc $ \l -> case wlHost l of
    Nothing -> sent bytes <$> sendOn w acc (sendMessagesHeld (wlSender l) (map toWorkerParts (sharePieces n bytes)))
    Just (hid, hostSender)
      | maybe False (S.member n . snd) (M.lookup hid (ssHostShares ss)) -> pure acc
      | otherwise -> do
          (ss1, fed1) <- sendOn w acc $ sendMessagesHeld hostSender
            [ hostSharePiece n total piece | SharePart _ total piece <- sharePieces n bytes ]
          let kept = M.insertWith (\_ (s, ns) -> (s, S.insert n ns)) hid (hostSender, S.singleton n) (ssHostShares ss1)
          pure (sent bytes (ss1 { ssHostShares = kept }, fed1))
  _ -> pure acc
  where
    sent bytes (s, f) = (s { ssShareSends = countSend (B.length bytes) (ssShareSends s) }, f)

-- INV-CALLER-CODE: a farm's results go to its caller undecoded, as they
-- came; the caller decodes them and runs its callbacks on its own thread.
-- They are gathered per job and handed over once per step or round
-- ('handOver'): with chunking off every result is a command of its own.
farmNews :: (ShellState, [Event]) -> Command -> IO (ShellState, [Event])
farmNews acc@(ss, fed) cmd = case cmd of
  Stage jid tasks bytes -> tell jid (NewsStaged tasks bytes)
  Accept jid ranges -> tell jid (NewsAccepted ranges)
  FailTask jid i err -> tell jid (NewsFailed i err)
  JobDone jid result -> case M.lookup jid (ssFarms ss) of
    Just (_, queue) -> pure ((gather queue (NewsDone result)) { ssFarms = M.delete jid (ssFarms ss) }, fed)
    Nothing -> pure acc
  _ -> pure acc
  where
    tell jid news = case M.lookup jid (ssFarms ss) of
      Just (_, queue) -> pure (gather queue news, fed)
      Nothing -> pure acc
    gather queue news = ss { ssNews = (queue, news) : ssNews ss, ssNewsCount = ssNewsCount ss + 1 }

-- A stream's opening, output, credit and end, for its caller.
streamCommand :: (ShellState, [Event]) -> Command -> IO (ShellState, [Event])
streamCommand acc@(ss, fed) cmd = case cmd of
  StreamOpened sid result -> do
    -- the caller feeds the stream straight into its worker's sender
    let opened = result >>= \w -> maybe (Left NoWorkers) (\l -> Right (wlSender l, wlBacklog l)) (M.lookup w (ssLinks ss))
    forM_ (M.lookup sid (ssOpening ss)) $ \reply -> tryPutMVar reply opened
    let ss1 = ss { ssOpening = M.delete sid (ssOpening ss) }
    pure (either (const ss1 { ssStreams = M.delete sid (ssStreams ss1) }) (const ss1) result, fed)
  StreamOutput sid k value -> pure (ss { ssGathered = M.insertWith (++) sid [(k, value)] (ssGathered ss) }, fed)
  StreamGrant sid n -> do
    forM_ (M.lookup sid (ssStreams ss)) $ \ends -> atomically $ modifyTVar' (endsCredit ends) (+ n)
    pure acc
  StreamEnded sid why -> do
    forM_ (M.lookup sid (ssStreams ss)) $ \ends -> do
      forM_ (M.lookup sid (ssGathered ss)) $ \elems ->
        atomically $ writeTQueue (endsOutput ends) (StreamElements (reverse elems))
      atomically $ writeTQueue (endsOutput ends) (maybe StreamFinished (StreamBroken . renderBreak) why)
    pure (ss { ssStreams = M.delete sid (ssStreams ss), ssGathered = M.delete sid (ssGathered ss) }, fed)
  _ -> pure acc

-- The core dropped a worker: its link ends, and it is kept for the
-- dashboard's row of the lost worker.
dropLink :: Shell -> (ShellState, [Event]) -> WorkerId -> IO (ShellState, [Event])
dropLink sh acc@(ss, fed) w = case M.lookup w (ssLinks ss) of
  Nothing -> pure acc
  Just l -> do
    wlEnd l
    atomically $ do
      info <- M.lookup w <$> readTVar (shWorkers sh)
      modifyTVar' (shWorkers sh) (M.delete w)
      modifyTVar' (shPeers sh) (M.delete w)
      mapM_ (\i -> modifyTVar' (shDeparted sh) (trim . M.insert w i)) info
    pure (ss { ssLinks = M.delete w (ssLinks ss), ssTouched = S.delete w (ssTouched ss) }, fed)

-- Act on a worker's link, if it is still there.
withLink :: WorkerId -> (ShellState, [Event]) -> (WorkerLink -> IO (ShellState, [Event])) -> IO (ShellState, [Event])
withLink w acc@(ss, _) act = maybe (pure acc) act (M.lookup w (ssLinks ss))
{-# INLINE withLink #-}

-- Send on a worker's link: it is flushed at the step's end; a send that
-- fails is the link's loss, fed back.
sendOn :: WorkerId -> (ShellState, [Event]) -> IO () -> IO (ShellState, [Event])
sendOn w acc@(ss, fed) act = do
  r <- trySync act
  case r of
    -- inserting a worker already there would copy its path of the set
    Right () | S.member w (ssTouched ss) -> pure acc
             | otherwise -> pure (ss { ssTouched = S.insert w (ssTouched ss) }, fed)
    Left ex -> pure (ss, LinkDown w (SendFailed (displayException ex)) : fed)
{-# INLINE sendOn #-}

-- Keep the newest 'keptLost' (worker numbers grow with time).
trim :: M.Map WorkerId a -> M.Map WorkerId a
trim m = if M.size m > keptLost then M.deleteMin m else m

-- Send the arguments of a range as runs, each as long as the packet
-- layer has room for (one argument each with chunking off).
sendArgs :: Sender -> ArgTable -> Range -> IO ()
sendArgs sender table (Range lo hi) = go lo
  where
    go i
      | i >= hi = pure ()
      | otherwise = do
          room <- senderRoom sender
          let k = argsFitting table i hi room
          sendValues sender Bulk k (argsEncoder table i (i + k))
          go (i + k)

-- | Give the callers of farms and stream processes what this step received.
handOver :: ShellState -> IO ShellState
handOver ss0 = handOverStreams ss0 >>= handOverFarms

-- | Give the callers of farms what this step received.
handOverFarms :: ShellState -> IO ShellState
handOverFarms ss
  | null (ssNews ss) = pure ss
  | otherwise = do
      -- each caller's news in one write, in order (usually one job's)
      forM_ (runsByQueue (reverse (ssNews ss))) $ \(queue, news) -> atomically $ writeTQueue queue news
      pure ss { ssNews = [], ssNewsCount = 0 }
  where
    runsByQueue [] = []
    runsByQueue ((q, n) : rest) =
      let (mine, others) = partitionBy q rest in (q, n : mine) : runsByQueue others
    partitionBy q xs = ([ n | (q', n) <- xs, q' == q ], [ x | x@(q', _) <- xs, q' /= q ])

handOverStreams :: ShellState -> IO ShellState
handOverStreams ss
  | M.null (ssGathered ss) = pure ss
  | otherwise = do
      forM_ (M.toList (ssGathered ss)) $ \(sid, elems) ->
        forM_ (M.lookup sid (ssStreams ss)) $ \ends ->
          atomically $ writeTQueue (endsOutput ends) (StreamElements (reverse elems))
      pure ss { ssGathered = M.empty }

-- | Send what is buffered for every link touched since the last flush.
flushTouched :: ShellState -> IO ShellState
flushTouched ss = do
  unless (S.null (ssTouched ss)) $ do
    hosted <- foldM (\anyHost w -> case M.lookup w (ssLinks ss) of
      Nothing -> pure anyHost
      Just l -> do
        void (trySync (flushIdle (wlSender l)))
        pure (anyHost || isJust (wlHost l))) False (S.toList (ssTouched ss))
    -- a host link's packet gathers what its workers' senders just gave it
    when hosted $ do
      let hosts = M.fromList [ h | w <- S.toList (ssTouched ss), Just l <- [M.lookup w (ssLinks ss)], Just h <- [wlHost l] ]
      forM_ (M.elems hosts) $ \s -> void (trySync (flushIdle s))
  pure ss { ssTouched = S.empty }
