-- | Keyed reductions with an exchange between workers, as the master's
-- core runs them ("Herd.Master.Job.Reduce" is the caller's side). The inputs are cut
-- into groups; a worker maps and combines a group by key, cuts the
-- result into one part per partition of the keys, and sends each part
-- straight to the worker that owns the partition (the master's links
-- relay it without the core seeing its bytes). An owner keeps one part
-- per group; once every group's part reached it, it combines them in
-- group order and only that partition's final map comes to the master.
--
-- A reduction to one value ('xjTree') is a tree instead: the groups are
-- cut in order into one block per partition, each group's whole result
-- goes to its block's owner, the owners combine their blocks at once,
-- and the caller combines the few blocks' results in order.
--
-- Pure: the plan (which group runs where, which worker owns which
-- partition, what is delivered) as a state machine over the workers'
-- words, their losses and joins.
--
-- Promises (checked by properties in "ExchangeSpec" under random losses
-- and joins):
--
-- * every partition is combined from exactly one part of every group, all
--   delivered to the worker that combines it, so the answer is the one a
--   single process gives;
-- * a lost worker costs only what it held: the groups whose parts did not
--   all reach their owners run again, and a lost owner's partitions go to
--   live workers and are sent again by every group;
-- * a group that was running on more than the allowed number of workers
--   that died fails the reduction naming it; the exchange ends once, with
--   every partition's bytes or an error.
module Herd.Core.Exchange
  ( ExchangeJob (..)
  , HeldShuffle (..)
  , Exchange
  , XOut (..)
  , exchangeStart
  , exchangeMessage
  , exchangeLost
  , exchangeJoined
  , exchangeStarved
  , exchangeHeld
  , exchangeOf
  , exchangeOwners
  , exchangeDelivered
  , exchangeRunning
  , exchangeView
  , runsPerWorker
  ) where

import Data.List (foldl')
import qualified Data.Map.Strict as M
import qualified Data.Set as S
import qualified Data.Text as T
import Data.Word (Word64)
import Herd.Core.Base (TaskRef (..), WorkerId)
import Herd.Core.Error (HerdError (..))
import Herd.Core.Wire (FromWorker (..))
import Herd.Core.Exchange.Plan

-- | Start an exchange on these live workers: as many partitions as the
-- job asks for, else one per worker (at least one), partition @j@ owned
-- by the @j@-th worker (round the workers again if there are more).
exchangeStart :: Word64 -> ExchangeJob -> [WorkerId] -> Either HerdError (Exchange, [XOut])
exchangeStart xid job workers
  | null workers = Left NoWorkers
  | Just hs <- xjShuffle job, lost <- heldElsewhere hs, not (null lost) =
      Left (PartitionsLost (refName (xjRef job)) lost "their workers are gone")
  | otherwise = Right (x2, runs ++ combines)
  where
    -- a held shuffle's inputs and outputs whose worker is not live
    heldElsewhere hs = S.toList (S.fromList [ p | (p, w) <- M.toList (hsGroupAt hs) ++ M.toList (hsOwners hs), w `notElem` workers ])
    (x1, runs) = dispatch x
    -- (a tree's partition may take no group: it is ready at once)
    (x2, combines) = combineReady [0 .. parts - 1] x1
    parts = case xjShuffle job of
      Just hs -> M.size (hsOwners hs)
      Nothing -> max 1 (maybe (length workers) id (xjPartitions job))
    x = Exchange
      { xId = xid, xRef = xjRef job
      , xArgs = M.fromList (zip [0 ..] (xjGroups job))
      , xParts = parts
      , xOwner = maybe (M.fromList (zip [0 .. parts - 1] (cycle workers))) hsOwners (xjShuffle job)
      , xDelivered = M.fromList [ (j, S.empty) | j <- [0 .. parts - 1] ]
      , xRuns = M.empty, xPending = S.fromList [0 .. length (xjGroups job) - 1], xSent = S.empty, xCombining = S.empty, xDone = M.empty, xDeaths = M.empty
      , xLive = S.fromList workers, xHeld = S.empty, xMaxDeaths = xjMaxDeaths job, xTree = xjTree job
      , xShuffle = xjShuffle job }

-- | The exchange a worker's message belongs to, if it is an exchange's.
exchangeOf :: FromWorker -> Maybe Word64
exchangeOf msg = case msg of
  GroupSent xid _ -> Just xid
  GroupThrew xid _ _ -> Just xid
  PartHeld xid _ _ -> Just xid
  PartitionDone xid _ _ -> Just xid
  PartitionThrew xid _ _ -> Just xid
  GroupMissing xid _ -> Just xid
  _ -> Nothing

-- | Each partition's owner.
exchangeOwners :: Exchange -> M.Map Int WorkerId
exchangeOwners = xOwner

-- | Each partition's groups whose part its owner holds.
exchangeDelivered :: Exchange -> M.Map Int (S.Set Int)
exchangeDelivered = xDelivered

-- | The groups each worker was sent to run and has not finished.
exchangeRunning :: Exchange -> M.Map WorkerId [Int]
exchangeRunning = M.map (map fst) . xRuns

-- | What a watcher is shown: the reducer's name, the partitions not yet
-- combined, and the workers running its groups or combining its partitions.
exchangeView :: Exchange -> (String, Int, [WorkerId])
exchangeView x =
  ( refName (xRef x)
  , xParts x - M.size (xDone x)
  , S.toList (S.fromList ([ w | (w, runs) <- M.toList (xRuns x), not (null runs) ]
                          ++ [ o | j <- S.toList (xCombining x), not (M.member j (xDone x)), Just o <- [M.lookup j (xOwner x)] ])) )

-- | A worker's word. 'Nothing' when the exchange is over (its 'XEnded'
-- is among the outs).
exchangeMessage :: WorkerId -> FromWorker -> Exchange -> (Maybe Exchange, [XOut])
exchangeMessage w msg x = case msg of
  GroupSent _ g ->
    let runs = M.findWithDefault [] w (xRuns x)
        sent = case lookup (fromIntegral g) runs of
          Just targets -> S.union (xSent x) (S.fromList [ (fromIntegral g, j, o) | (j, o) <- targets ])
          Nothing -> xSent x
    in continue (dispatch x { xRuns = M.adjust (dropFirst g) w (xRuns x), xSent = sent })
  GroupThrew _ g why ->
    end (Left (TaskFailed (fromIntegral g) (refName (xRef x)) (T.unpack why))) x
  PartHeld _ g j
    | M.lookup (fromIntegral j) (xOwner x) == Just w, M.member (fromIntegral g) (xArgs x) ->
        continue (combineReady [fromIntegral j] x { xDelivered = M.adjust (S.insert (fromIntegral g)) (fromIntegral j) (xDelivered x) })
    | otherwise -> (Just x, [])   -- a part sent to an owner since lost, or again
  PartitionDone _ j bytes
    | M.lookup (fromIntegral j) (xOwner x) == Just w, S.member (fromIntegral j) (xCombining x) ->
        let x1 = x { xDone = M.insert (fromIntegral j) bytes (xDone x), xCombining = S.delete (fromIntegral j) (xCombining x) }
        in if M.size (xDone x1) == xParts x1 then end (Right (M.elems (xDone x1))) x1 else (Just x1, [])
    | otherwise -> (Just x, [])
  PartitionThrew _ j why ->
    end (Left (TaskFailed 0 (refName (xRef x)) ("combining partition " ++ show j ++ ": " ++ T.unpack why))) x
  GroupMissing _ g ->
    end (Left (PartitionsLost (refName (xRef x)) [fromIntegral g] ("worker " ++ show w ++ " no longer holds it"))) x
  _ -> (Just x, [])
  where
    continue (x', outs) = (Just x', outs)
    dropFirst g runs = case break ((== fromIntegral g) . fst) runs of
      (before, _ : after) -> before ++ after
      (before, []) -> before

-- | A worker was lost (@died@: its process or link died, so the group it
-- was running is charged).
exchangeLost :: WorkerId -> Bool -> String -> Exchange -> (Maybe Exchange, [XOut])
exchangeLost w died why x0
  | not (S.member w (xLive x0)) = (Just x0, [])
  | Just hs <- xShuffle x0 =
      -- what was held there cannot be made elsewhere
      case [ p | (p, o) <- M.toList (hsGroupAt hs) ++ M.toList (hsOwners hs), o == w ] of
        [] -> (Just x0 { xLive = S.delete w (xLive x0), xHeld = S.delete w (xHeld x0) }, [])
        lost -> end (Left (PartitionsLost (refName (xRef x0)) (S.toList (S.fromList lost)) why)) x0 { xLive = S.delete w (xLive x0) }
  | otherwise =
      let running = M.findWithDefault [] w (xRuns x0)
          charged = [ g | died, (g, _) : _ <- [running] ]
          deaths = foldl' (\m g -> M.insertWith (+) g 1 m) (xDeaths x0) charged
          killer = [ (g, n) | g <- charged, let n = M.findWithDefault 0 g deaths, n > xMaxDeaths x0 ]
          x1 = x0 { xLive = S.delete w (xLive x0), xHeld = S.delete w (xHeld x0), xRuns = M.delete w (xRuns x0), xDeaths = deaths
                  , xSent = S.filter (\(_, _, o) -> o /= w) (xSent x0)
                  , xPending = S.union (xPending x0) (S.fromList (map fst running)) }
          orphaned = [ j | (j, o) <- M.toList (xOwner x1), o == w, not (M.member j (xDone x1)) ]
          x2 = foldl' (\x j -> reown j x) x1 orphaned
      in case killer of
           (g, n) : _ -> end (Left (TaskKilledWorkers g (refName (xRef x0)) n why)) x2
           [] -> let (x3, runs) = dispatch x2
                     (x4, combines) = combineReady orphaned x3
                 in (Just x4, runs ++ combines)
  where
    -- the partition's parts went with its owner: a live worker owns it
    -- now, and every group sends its part again
    reown j x = (needing [j] x) { xOwner = maybe (M.delete j (xOwner x)) (\o -> M.insert j o (xOwner x)) (leastOwning x)
                                , xDelivered = M.insert j S.empty (xDelivered x)
                                , xCombining = S.delete j (xCombining x) }

-- | A worker joined: it runs groups, and owns the partitions nobody owns.
exchangeJoined :: WorkerId -> Exchange -> (Exchange, [XOut])
exchangeJoined w x0
  | S.member w (xLive x0) = (x0, [])
  | otherwise =
      let x1 = x0 { xLive = S.insert w (xLive x0) }
          ownerless = [ j | j <- [0 .. xParts x1 - 1], not (M.member j (xOwner x1)), not (M.member j (xDone x1)) ]
          (x2, runs) = dispatch (needing ownerless x1) { xOwner = foldl' (\m j -> M.insert j w m) (xOwner x1) ownerless }
          (x3, combines) = combineReady ownerless x2
      in (x3, runs ++ combines)

-- | A worker is near its memory limit (it gets no new group while another
-- worker can take it), or fell back.
exchangeHeld :: WorkerId -> Bool -> Exchange -> (Exchange, [XOut])
exchangeHeld w held x
  | held = (x { xHeld = S.insert w (xHeld x) }, [])
  | otherwise = dispatch x { xHeld = S.delete w (xHeld x) }

-- | No worker is live and none is being restarted: the reduction cannot
-- finish.
exchangeStarved :: Exchange -> Maybe XOut
exchangeStarved x
  | S.null (xLive x) = Just (XEnded (Left (AllWorkersLost "every worker of a keyed reduction was lost")))
  | otherwise = Nothing
