-- | The stream processes as a feature of the master's core
-- ("Herd.Core.Master", "Herd.Core.Master.Feature"): a caller's stream
-- opens on the worker with the fewest, its input's end, credit and close
-- go to that worker, and its output comes back within the credit the
-- caller gave (a worker that sends beyond it, or answers for a stream
-- that is not its own, is dropped). A stream breaks with its worker.
-- Pure.
module Herd.Core.Master.Streams
  ( streamFeature
  , streamEvent
  ) where

import Data.List (sortOn)
import qualified Data.Map.Strict as M
import qualified Data.Text as T
import Herd.Core.Base (WorkerId)
import Herd.Core.Error (HerdError (..))
import Herd.Core.Fault (StreamBreak (..), Violation (..))
import Herd.Core.Master.Events
import Herd.Core.Master.Feature
import Herd.Core.Master.State
import Herd.Core.Packet.Policy (Urgency (..))
import Herd.Core.Wire (FromWorker (..), ToWorker (..))

-- | The open streams: their workers' output, and their breaking with a
-- lost worker or a stopping cluster.
streamFeature :: Feature
streamFeature = (quiet "stream")
  { featureOwns = ownsStream
  , featureReceived = received
  , featureLost = \_ _ w loss core ->
      let (broken, kept) = M.partition ((== w) . streamWorker) (coreStreams core)
      in (core { coreStreams = kept }, [ StreamEnded sid (Just (StreamWorkerLost w (lossFault loss))) | sid <- M.keys broken ])
  , featureStop = \_ core ->
      (core { coreStreams = M.empty }, [ StreamEnded sid (Just StreamClusterClosed) | sid <- M.keys (coreStreams core) ])
  , featureBusy = not . M.null . coreStreams
  , featureCalls = \core -> [ CallView "stream" "" 0 [streamWorker s] | s <- M.elems (coreStreams core) ]
  }

ownsStream :: FromWorker -> Bool
ownsStream msg = case msg of
  StreamOut {} -> True
  StreamDone {} -> True
  StreamAborted {} -> True
  StreamTaken {} -> True
  _ -> False

-- | A caller's stream: its opening, the end of its input, its credit and its close.
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

-- The worker with the fewest open streams (lowest number on a tie).
leastLoaded :: Core -> Maybe WorkerId
leastLoaded core = case sortOn load (M.keys (coreLinks core)) of
  w : _ -> Just w
  [] -> Nothing
  where load w = (length (filter ((== w) . streamWorker) (M.elems (coreStreams core))), w)

-- A stream's worker's word.
received :: Hooks -> Double -> WorkerId -> FromWorker -> Core -> (Core, [Command])
received hooks _ w msg core = case msg of
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
  _ -> (core, [])
  where
    bad violation = hookDropPeer hooks w violation core
    -- INV-ROUTE: a stream's messages come from its own worker
    ownStream sid act = case M.lookup sid (coreStreams core) of
      Just s | streamWorker s == w -> act s
             | otherwise -> bad (ForeignStream sid)
      Nothing -> (core, [])   -- closed by its caller: late messages are dropped
