-- | A cluster snapshot ("Herd.Core.Monitor.Status") as the dashboard serves it:
-- JSON for @/api/status@ and the page, and Prometheus's text exposition
-- format (version 0.0.4) for @/metrics@. Pure.
--
-- Promises: the JSON is one object (docs/operations.md lists its fields); every
-- metric line is @name{labels} value@ with a @# HELP@ and a @# TYPE@
-- line before the first of its name, label values escaped as the format
-- asks (backslash, double quote, newline), and counters only count
-- ledger figures that never decrease.
module Herd.Master.Monitor.Render
  ( statusJson
  , prometheusText
  , escapeLabel
  ) where

import Data.List (intercalate)
import qualified Data.Map.Strict as M
import Herd.Core.Base (transportName)
import Herd.Core.Session (SessionView (..))
import Herd.Master.Types (ConnectionCounters (..), WorkerInfo (..))
import Herd.Core.Monitor.Ledger (Account (..), Departure (..))
import Herd.Core.Monitor.Status
import Herd.Core.Adapt.Track (AdaptSummary (..))
import Herd.Core.Packet.Policy (flushReasonName)
import Herd.Core.Packet.Stats (PeerStats (..))
import Herd.Core.Report (Json (..), renderJson)
import Numeric (showFFloat)

-- | The snapshot as one JSON object.
statusJson :: Status -> String
statusJson s = renderJson $ JObject
  [ ("uptime_s", JNumber (statusUptime s))
  , ("master_loop", JString (statusLoop s))
  , ("workers_connected", JInt (fromIntegral (length [ () | w <- statusWorkers s, rowState w /= Lost ])))
  , ("workers_joining", JInt (fromIntegral (countJoining (statusCounters s))))
  , ("workers_lost_total", JInt (fromIntegral (statusLostTotal s)))
  , ("tasks_completed_total", JInt (fromIntegral (statusTasksDone s)))
  , ("working_s", JNumber (statusWorkingSeconds s))
  , ("streams_open", JInt (fromIntegral (statusStreams s)))
  , ("workers", JArray (map workerJson (statusWorkers s)))
  , ("jobs", JArray (map job (statusJobs s)))
  , ("evolve", maybe JNull evolve (statusEvolve s))
  , ("connections", connections (statusCounters s))
  , ("packets_by_rule", JObject [ (flushReasonName r, JInt (fromIntegral n)) | (r, n) <- statusFlushes s ])
  , ("log", JArray [ JObject [("t", JNumber t), ("line", JString l)] | (t, l) <- statusLog s ])
  , ("worker_memory_limit_bytes", maybe JNull int (statusMemoryLimit s))
  , ("links", int (statusLinks s))
  , ("shared_values", int (statusShared s))
  , ("shared_sends_total", int (statusSharedSends s))
  , ("shared_bytes_sent_total", int (statusSharedBytes s))
  , ("exchange_parts_relayed_total", int (statusRelayedParts s))
  , ("exchange_bytes_relayed_total", int (statusRelayedBytes s))
  , ("exchange_parts_handed_total", int (statusHandedParts s))
  , ("exchange_bytes_handed_total", int (statusHandedBytes s))
  , ("straggler_copies_total", int (statusCopies s))
  , ("steals_brokered_total", int (statusStealsBrokered s))
  , ("calls", JArray [ JObject [ ("kind", JString (callKind c)), ("function", JString (callFunction c))
                               , ("left", int (callLeft c)), ("workers", JArray (map int (callWorkers c))) ]
                     | c <- statusCalls s ])
  , ("hosts", JArray [ JObject [ ("host", JString (hostRowName h)), ("workers", int (hostRowWorkers h))
                               , ("worker_memory_limit_bytes", maybe JNull int (hostRowLimit h)) ]
                     | h <- statusHosts s ])
  , ("slurm_jobs", maybe JNull adaptJson (statusAdapt s))
  ]
  where
    adaptJson a = JObject
      [ ("pending", JArray (map JString (sumPending a))), ("running", JArray (map JString (sumRunning a)))
      , ("retiring", JArray (map JString (sumRetiring a)))
      , ("submitted_total", int (sumSubmitted a)), ("failed_total", int (sumFailed a)) ]
    int = JInt . fromIntegral
    job j = JObject
      [ ("id", int (jobRowId j)), ("function", JString (jobRowFunction j))
      , ("tasks", int (jobRowTotal j)), ("done", int (jobRowDone j))
      , ("in_flight", int (jobRowInFlight j)), ("pending", int (jobRowPending j))
      , ("elapsed_s", JNumber (jobRowElapsed j)), ("tasks_per_s", JNumber (jobRowRate j))
      , ("left_s", maybe JNull JNumber (jobRowLeft j)) ]
    evolve v = JObject
      [ ("function", JString (viewFunction v)), ("left", int (viewLeft v))
      , ("moved", int (viewMoved v)), ("recovered", int (viewRecovered v))
      , ("states", JObject [ (show w, int n) | (w, n) <- viewStates v ]) ]
    connections c = JObject
      [ ("accepted", int (countAccepted c)), ("refused_busy", int (countBusyRefused c))
      , ("auth_failures", int (countAuthFailures c)), ("handshake_failures", int (countHandshakeFailures c))
      , ("joined", int (countJoined c)), ("worker_messages", int (countWorkerMessages c))
      , ("restarts", int (countRestarts c)) ]

-- One worker's row of the JSON snapshot.
workerJson :: WorkerRow -> Json
workerJson r =
  let a = rowAccount r
      info = rowInfo r
      int = JInt . fromIntegral
  in JObject $
       [ ("id", int (rowWorker r))
       , ("state", JString (workerStateName (rowState r)))
       , ("host", maybe JNull (JString . infoHost) info)
       , ("pid", maybe JNull (int . infoPid) info)
       , ("cpu", maybe JNull int (info >>= infoCpu))
       , ("transport", maybe JNull (JString . transportName . infoTransport) info)
       , ("peer", maybe JNull (JString . infoPeer) info)
       , ("launch", maybe JNull (JString . infoGroup) info)
       , ("tasks", int (accountTasks a))
       , ("batches", int (accountBatches a))
       , ("evolved", int (accountEvolved a))
       , ("busy_s", JNumber (accountBusy a))
       , ("waiting_s", JNumber (rowWaiting r))
       , ("in_flight", int (rowInFlight r))
       , ("streams", int (rowStreams r))
       , ("states", int (rowStates r))
       , ("lost_why", maybe JNull (JString . departedWhy) (accountLeft a))
       , ("memory_bytes", maybe JNull int (rowMemory r))
       , ("shared", int (rowShared r))
       , ("shared_spilled", int (rowSpilled r))
       , ("children_spawned", int (countSpawned (rowSteals r)))
       , ("children_stolen", int (countStolen (rowSteals r)))
       , ("stolen_children_ran", int (countRan (rowSteals r)))
       , ("children_rerun", int (countRerun (rowSteals r)))
       , ("stolen_children_stopped", int (countStopped (rowSteals r)))
       ] ++ maybe [] linkJson (rowLink r)

-- A worker's link's counters, in its row.
linkJson :: PeerStats -> [(String, Json)]
linkJson p =
  [ ("packets_sent", int (packetsSent p)), ("messages_sent", int (messagesSent p))
  , ("values_sent", int (valuesSent p)), ("bytes_sent", int (bytesSent p))
  , ("packets_received", int (packetsReceived p)), ("messages_received", int (messagesReceived p))
  , ("values_received", int (valuesReceived p)), ("bytes_received", int (bytesReceived p))
  , ("flushes", JObject [ (flushReasonName r, int n) | (r, n) <- M.toList (flushesBy p) ]) ]
  where int = JInt . fromIntegral

-- | The snapshot in Prometheus's text format.
prometheusText :: Status -> String
prometheusText s = concat
  [ metric "herd_workers" "gauge" "Workers connected now." [([], count (/= Lost))]
  , metric "herd_workers_busy" "gauge" "Connected workers with work to run now." [([], count (== Busy))]
  , metric "herd_workers_joining" "gauge" "Handshakes in progress now."
      [([], fromIntegral (countJoining (statusCounters s)))]
  , metric "herd_workers_lost_total" "counter" "Workers lost since the cluster started."
      [([], fromIntegral (statusLostTotal s))]
  , metric "herd_tasks_completed_total" "counter" "Farm tasks answered since the cluster started."
      [([], fromIntegral (statusTasksDone s))]
  , metric "herd_jobs_running" "gauge" "Farm jobs running now." [([], fromIntegral (length (statusJobs s)))]
  , metric "herd_streams_open" "gauge" "Stream processes open now." [([], fromIntegral (statusStreams s))]
  , metric "herd_working_seconds_total" "counter" "Seconds during which the cluster had work."
      [([], statusWorkingSeconds s)]
  , metric "herd_connections_accepted_total" "counter" "Connections accepted at the master's port."
      [([], fromIntegral (countAccepted (statusCounters s)))]
  , metric "herd_auth_failures_total" "counter" "Peers that could not prove the cluster secret."
      [([], fromIntegral (countAuthFailures (statusCounters s)))]
  , metric "herd_handshake_failures_total" "counter" "Other failed handshakes."
      [([], fromIntegral (countHandshakeFailures (statusCounters s)))]
  , perWorker "herd_worker_busy_seconds_total" "counter" "Seconds the worker spent computing, as it measured."
      (accountBusy . rowAccount)
  , perWorker "herd_worker_waiting_seconds_total" "counter"
      "Seconds the worker was present while the cluster had work, not computing."
      rowWaiting
  , perWorker "herd_worker_tasks_total" "counter" "Farm tasks the worker answered."
      (fromIntegral . accountTasks . rowAccount)
  , perWorker "herd_worker_evolved_total" "counter" "Evolve steps the worker answered."
      (fromIntegral . accountEvolved . rowAccount)
  , perWorker "herd_worker_tasks_in_flight" "gauge" "Farm tasks sent to the worker, not yet answered."
      (fromIntegral . rowInFlight)
  , metric "herd_worker_resident_bytes" "gauge" "The worker's resident memory, as the master last read it."
      [ (workerLabels r, fromIntegral m) | r <- statusWorkers s, Just m <- [rowMemory r] ]
  , metric "herd_worker_memory_limit_bytes" "gauge" "The resident memory a watched worker may hold."
      [ ([], fromIntegral m) | Just m <- [statusMemoryLimit s] ]
  , metric "herd_links_open" "gauge" "Links the master keeps open (a host agent's carries all its workers)."
      [ ([], fromIntegral (statusLinks s)) ]
  , metric "herd_shared_values" "gauge" "Shared values live now." [ ([], fromIntegral (statusShared s)) ]
  , metric "herd_shared_sends_total" "counter" "Times a shared value was sent to a worker."
      [ ([], fromIntegral (statusSharedSends s)) ]
  , metric "herd_host_workers" "gauge" "Herd workers on each host, sharing its memory budget."
      [ ([("host", hostRowName h)], fromIntegral (hostRowWorkers h)) | h <- statusHosts s ]
  , metric "herd_calls_running" "gauge" "Calls running now, by kind (farm, stream, evolve for evolve and Ref calls, reduce)."
      [ ([("kind", k)], fromIntegral (length [ () | c <- statusCalls s, callKind c == k ])) | k <- ["farm", "stream", "evolve", "reduce", "dataset"] ]
  , metric "herd_steals_brokered_total" "counter" "Herd.Par children the master handed from one worker to another (a host agent's own steals are not among them)."
      [([], fromIntegral (statusStealsBrokered s))]
  , metric "herd_straggler_copies_total" "counter" "Straggler copies of farm batches started since the cluster started."
      [([], fromIntegral (statusCopies s))]
  , metric "herd_slurm_jobs" "gauge" "Adaptive SLURM jobs now, by phase (pending: not yet joined; retiring: cancelled or near their walltime)."
      [ ([("phase", ph)], fromIntegral (length (f a))) | Just a <- [statusAdapt s]
      , (ph, f) <- [("pending", sumPending), ("running", sumRunning), ("retiring", sumRetiring)] ]
  , metric "herd_slurm_jobs_submitted_total" "counter" "Adaptive SLURM jobs submitted since the cluster started."
      [ ([], fromIntegral (sumSubmitted a)) | Just a <- [statusAdapt s] ]
  , metric "herd_slurm_job_failures_total" "counter" "Adaptive SLURM jobs refused, never connected or lost while working."
      [ ([], fromIntegral (sumFailed a)) | Just a <- [statusAdapt s] ]
  , metric "herd_exchange_parts_relayed_total" "counter" "Keyed reductions' parts the master relayed between workers."
      [ ([], fromIntegral (statusRelayedParts s)) ]
  , metric "herd_exchange_bytes_handed_total" "counter" "Bytes of reduction and shuffle parts workers on the master's host handed each other in files."
      [ ([], fromIntegral (statusHandedBytes s)) ]
  , perWorker "herd_worker_shared_values" "gauge" "Shared values the worker said it holds."
      (fromIntegral . rowShared)
  , perWorker "herd_worker_shared_spilled" "gauge" "Shared values the worker said it keeps on its disk."
      (fromIntegral . rowSpilled)
  , perWorker "herd_worker_children_spawned_total" "counter" "Herd.Par children the worker spawned that others could steal (spawnTask)."
      (fromIntegral . countSpawned . rowSteals)
  , perWorker "herd_worker_children_stolen_total" "counter" "Herd.Par children of the worker's that other workers stole."
      (fromIntegral . countStolen . rowSteals)
  , perWorker "herd_worker_stolen_children_ran_total" "counter" "Herd.Par children the worker stole from others and ran."
      (fromIntegral . countRan . rowSteals)
  , perWorker "herd_worker_children_rerun_total" "counter" "Herd.Par children the worker ran again itself after their thief was lost."
      (fromIntegral . countRerun . rowSteals)
  , perWorker "herd_worker_stolen_children_stopped_total" "counter" "Herd.Par children the worker stole and stopped because the computation that spawned them ended."
      (fromIntegral . countStopped . rowSteals)
  , perLink "herd_packets_sent_total" "Packets the master sent to the worker." packetsSent
  , perLink "herd_messages_sent_total" "Messages the master sent to the worker." messagesSent
  , perLink "herd_bytes_sent_total" "Bytes the master sent to the worker." bytesSent
  , perLink "herd_packets_received_total" "Packets the master received from the worker." packetsReceived
  , perLink "herd_messages_received_total" "Messages the master received from the worker." messagesReceived
  , perLink "herd_bytes_received_total" "Bytes the master received from the worker." bytesReceived
  , metric "herd_packets_flushed_total" "counter" "Packets the master sent, by the rule that sent them."
      [ ([("rule", flushReasonName r)], fromIntegral n) | (r, n) <- statusFlushes s ]
  ]
  where
    count p = fromIntegral (length [ () | w <- statusWorkers s, p (rowState w) ])
    workerLabels r = [("worker", show (rowWorker r)), ("host", maybe "" infoHost (rowInfo r))]
    perWorker name kind help f = metric name kind help [ (workerLabels r, f r) | r <- statusWorkers s ]
    perLink name help f = metric name "counter" help
      [ (workerLabels r, fromIntegral (f p)) | r <- statusWorkers s, Just p <- [rowLink r] ]

-- One metric family: help and type, then one line per sample (none: the
-- family is left out, as the format allows).
metric :: String -> String -> String -> [([(String, String)], Double)] -> String
metric _ _ _ [] = ""
metric name kind help samples =
  "# HELP " ++ name ++ " " ++ help ++ "\n# TYPE " ++ name ++ " " ++ kind ++ "\n"
  ++ concat [ name ++ labels ls ++ " " ++ number v ++ "\n" | (ls, v) <- samples ]
  where
    labels [] = ""
    labels ls = "{" ++ intercalate "," [ k ++ "=\"" ++ escapeLabel v ++ "\"" | (k, v) <- ls ] ++ "}"

-- A sample value: integers without a fraction, others with up to 6 decimals.
number :: Double -> String
number v
  | isNaN v || isInfinite v = "NaN"
  | v == fromIntegral r = show r
  | otherwise = showFFloat (Just 6) v ""
  where r = round v :: Integer

-- | A label value escaped for the text format: backslash, double quote
-- and newline.
escapeLabel :: String -> String
escapeLabel = concatMap esc
  where esc c = case c of
          '\\' -> "\\\\"
          '"' -> "\\\""
          '\n' -> "\\n"
          _ -> [c]
