-- | The keyed reductions' side of the master's core ("Herd.Core.Master"):
-- hosting any number of exchanges ("Herd.Core.Exchange") beside farm
-- jobs, streams and the evolve session, handing each the workers' words
-- that are its own and every link's arrival and loss, and turning what
-- it decides into the core's commands. Pure.
module Herd.Core.Master.Exchanges
  ( exchangeFeature
  , startExchange
  , cancelExchange
  ) where

import Data.Maybe (isJust)
import qualified Data.Map.Strict as M
import Data.Word (Word64)
import Herd.Core.Base (WorkerId)
import Herd.Core.Error (HerdError (..))
import Herd.Core.Exchange
import Herd.Core.Master.State
import Herd.Core.Master.Events
import Herd.Core.Master.Feature
import qualified Herd.Core.Farm as S
import Herd.Core.Wire (FromWorker, ToWorker (..), toWorkerUrgency)

-- | The running reductions: each hears of its workers' words, and of
-- every arrival, loss and hold; with no worker live and none coming, each
-- fails.
exchangeFeature :: Feature
exchangeFeature = (quiet "exchange")
  { featureOwns = isJust . exchangeOf
  , featureReceived = \_ _ w msg core -> case exchangeOf msg of
      Just xid -> exchangeReceived xid w msg core
      Nothing -> (core, [])
  , featureJoined = \_ _ w -> exchangesJoined w
  , featureLost = \_ _ w loss -> exchangesLost w (lossDied loss) (lossWhy loss)
  , featureHeld = \_ w held -> exchangesHeld w held
  , featureStarved = \_ _ core -> if S.awaitedWorkers (coreSched core) == 0 then exchangesStarved core else (core, [])
  , featureStop = \_ -> stopExchanges
  , featureBusy = not . M.null . coreExchanges
  , featureCalls = \core -> [ let (name, left, ws) = exchangeView x in CallView "reduce" name left ws
                            | x <- M.elems (coreExchanges core) ]
  }

-- | Start a reduction on the live workers.
startExchange :: Word64 -> ExchangeJob -> Core -> (Core, [Command])
startExchange xid job core
  | coreStopping core = (core, [ExchangeEnded xid (Left ClusterClosed)])
  | otherwise = case exchangeStart xid job (M.keys (coreLinks core)) of
      Left err -> (core, [ExchangeEnded xid (Left err)])
      Right (x, outs) -> (core { coreExchanges = M.insert xid x (coreExchanges core) }, commands xid outs)

-- | Its caller gave up: no answer is due, the workers drop what they hold.
cancelExchange :: Word64 -> Core -> (Core, [Command])
cancelExchange xid core
  | M.member xid (coreExchanges core) =
      (core { coreExchanges = M.delete xid (coreExchanges core) }, [ Send w (toWorkerUrgency m) m | w <- M.keys (coreLinks core), let m = ExchangeEnd xid ])
  | otherwise = (core, [])

-- A worker's word for this reduction (dropped quietly if it ended).
exchangeReceived :: Word64 -> WorkerId -> FromWorker -> Core -> (Core, [Command])
exchangeReceived xid w msg core = case M.lookup xid (coreExchanges core) of
  Nothing -> (core, [])
  Just x -> settle xid (exchangeMessage w msg x) core

-- A worker joined: every reduction may use it.
exchangesJoined :: WorkerId -> Core -> (Core, [Command])
exchangesJoined w core = foldl one (core, []) (M.toList (coreExchanges core))
  where one (c, out) (xid, x) = let (c', o) = settle xid (let (x', outs) = exchangeJoined w x in (Just x', outs)) c in (c', out ++ o)

-- A worker was lost (@died@: the group it ran is charged).
exchangesLost :: WorkerId -> Bool -> String -> Core -> (Core, [Command])
exchangesLost w died why core = foldl one (core, []) (M.toList (coreExchanges core))
  where one (c, out) (xid, x) = let (c', o) = settle xid (exchangeLost w died why x) c in (c', out ++ o)

-- A worker is near its memory limit, or fell back: reductions feed it
-- accordingly.
exchangesHeld :: WorkerId -> Bool -> Core -> (Core, [Command])
exchangesHeld w held core = foldl one (core, []) (M.toList (coreExchanges core))
  where one (c, out) (xid, x) = let (c', o) = settle xid (let (x', outs) = exchangeHeld w held x in (Just x', outs)) c in (c', out ++ o)

-- No worker is live and none is being restarted: every reduction fails.
exchangesStarved :: Core -> (Core, [Command])
exchangesStarved core
  | M.null (coreLinks core) =
      let ended = [ ExchangeEnded xid r | (xid, x) <- M.toList (coreExchanges core), Just (XEnded r) <- [exchangeStarved x] ]
      in (core { coreExchanges = M.filter ((== Nothing) . exchangeStarved) (coreExchanges core) }, ended)
  | otherwise = (core, [])

-- The cluster stops: every reduction is answered.
stopExchanges :: Core -> (Core, [Command])
stopExchanges core = (core { coreExchanges = M.empty }, [ ExchangeEnded xid (Left ClusterClosed) | xid <- M.keys (coreExchanges core) ])

settle :: Word64 -> (Maybe Exchange, [XOut]) -> Core -> (Core, [Command])
settle xid (mx, outs) core =
  ( core { coreExchanges = maybe (M.delete xid) (M.insert xid) mx (coreExchanges core) }
  , [ c | c <- commands xid outs, live c ] )
  where
    live (Send w _ _) = M.member w (coreLinks core)
    live _ = True

commands :: Word64 -> [XOut] -> [Command]
commands xid = map one
  where
    one (XSend w m) = Send w (toWorkerUrgency m) m
    one (XEnded r) = ExchangeEnded xid r
