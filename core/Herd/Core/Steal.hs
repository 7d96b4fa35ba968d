-- | Work stealing between workers for "Herd.Par": the master's broker of
-- children that a worker spawned and another, idle, may run.
--
-- A worker running a Par computation keeps its stealable children in a
-- pool of its own and runs them itself unless they are stolen (the master
-- is not on the path of a spawn). It tells the master when its pool has
-- children ('Herd.Core.Wire.ChildrenHeld'); an idle worker, or one whose computation
-- waits on children run elsewhere, asks for work ('Herd.Core.Wire.WantWork'). The broker
-- pairs them: it asks the holder with the most children for its oldest
-- ('StealAsk'), hands what it gives to the thief ('StolenRun'), and hands
-- the thief's answer back to the holder ('ChildDone', 'ChildThrew'). A
-- thief that asked when no worker held children waits, oldest first, for
-- the next holder.
--
-- Promises: every child given is answered to its holder exactly once
-- (its value, its error, or 'ChildLost' when its thief was lost, so the
-- holder runs it itself), unless the holder was lost or gave up on it
-- first (its thief is then told to stop it, 'StolenCancel'); a thief is
-- never asked to run its own child; a thief has at most one steal asked
-- for it at a time; messages naming unknown steals (late, or forged) are
-- ignored. Pure.
module Herd.Core.Steal
  ( Steals
  , emptySteals
  , emptyStealsFrom
  , takeIdle
  , hasHolderFor
  , stealsBrokered
  , stealReport
  , StealCounts (..)
  , noStealCounts
  , stealCounts
  , stealsRunning
  , stealsIdle
  , stealsThieves
  , wantWork
  , childrenHeld
  , stealGiven
  , stealNone
  , stolenAnswered
  , stolenDropped
  , childCounts
  , childrenAbandoned
  , stealLost
  ) where

import Data.Foldable (toList)
import Data.List (foldl', maximumBy)
import qualified Data.Map.Strict as M
import Data.Maybe (isJust)
import Data.Ord (Down (..), comparing)
import qualified Data.Set as S
import Data.Sequence ((|>))
import qualified Data.Sequence as Seq
import qualified Data.ByteString as B
import Data.Text (Text)
import Data.Word (Word32, Word64)
import Herd.Core.Base (TaskRef, WorkerId)
import Herd.Core.Steal.Book
import Herd.Core.Wire.Messages (FromWorker (..), ToWorker (..))

-- | Whether a worker's message is about steals: its asks, holdings,
-- answers to asks and stolen children's answers.
stealReport :: FromWorker -> Bool
stealReport msg = case msg of
  WantWork -> True
  ChildrenHeld _ -> True
  StealGiven {} -> True
  StealNone _ -> True
  StolenDone _ _ -> True
  StolenThrew _ _ -> True
  StolenDropped _ -> True
  ChildrenAbandoned _ -> True
  _ -> False

-- | The thieves waiting, oldest first, taken off the queue (a host agent
-- sends them on to the master).
takeIdle :: Steals -> ([WorkerId], Steals)
takeIdle st = (stealsIdle st, st { stIdle = Seq.empty, stIdleSet = S.empty })

-- | Whether a holder other than this worker has children, as last said.
hasHolderFor :: WorkerId -> Steals -> Bool
hasHolderFor t = isJust . holderFor t

-- | Children handed to thieves so far.
stealsBrokered :: Steals -> Int
stealsBrokered = stBrokered

-- | What each worker's children went through so far (workers with none are left out).
stealCounts :: Steals -> M.Map WorkerId StealCounts
stealCounts = stCounts

-- | Children being run by thieves now.
stealsRunning :: Steals -> Int
stealsRunning = M.size . stHanded

-- | Workers running a stolen child now.
stealsThieves :: Steals -> [WorkerId]
stealsThieves = map hThief . M.elems . stHanded

-- | Thieves waiting for a holder, oldest first.
stealsIdle :: Steals -> [WorkerId]
stealsIdle = toList . stIdle

type Out = (Steals, [(WorkerId, ToWorker)])

-- | A worker asks for work.
wantWork :: WorkerId -> Steals -> Out
wantWork t st
  | any ((== Just t) . fst) (M.elems (stAsked st)) = (st, [])   -- it has one asked already
  | otherwise = serve t (notIdle t st)

-- | A worker holds this many children others may steal: it is busy (no
-- longer a waiting thief), and waiting thieves may steal from it.
childrenHeld :: WorkerId -> Word32 -> Steals -> Out
childrenHeld v k st = serveIdle (setHolding v (fromIntegral k) (notIdle v st))

-- | A holder gave the child of steal @n@ (and has this many left).
stealGiven :: WorkerId -> Word64 -> Word64 -> Word32 -> TaskRef -> B.ByteString -> Steals -> Out
stealGiven v n c left ref arg st0 = case M.lookup n (stAsked st0) of
  Just (thief, holder) | holder == v ->
    let st = setHolding v (fromIntegral left) st0 { stAsked = M.delete n (stAsked st0) }
    in case thief of
      Just t -> more (hand t st) [(t, StolenRun n ref arg)]
      Nothing -> case Seq.viewl (Seq.filter (/= v) (stIdle st)) of
        -- its thief was lost: another waiting one takes it, or it goes home
        t Seq.:< _ -> more (hand t (notIdle t st)) [(t, StolenRun n ref arg)]
        Seq.EmptyL -> more st [(v, ChildLost c)]
  _ -> (st0, [])
  where
    hand t st = (handOut n (Handed t v c) st) { stBrokered = stBrokered st + 1 }
    more st sends = let (st', sends') = serveIdle st in (st', sends ++ sends')

-- | A holder had nothing left for steal @n@: its thief tries another.
stealNone :: WorkerId -> Word64 -> Steals -> Out
stealNone v n st0 = case M.lookup n (stAsked st0) of
  Just (thief, holder) | holder == v ->
    let st = setHolding v 0 st0 { stAsked = M.delete n (stAsked st0) }
    in maybe (st, []) (`serve` st) thief
  _ -> (st0, [])

-- | The thief of steal @n@ answered: its child's value ('Right') or error.
stolenAnswered :: WorkerId -> Word64 -> Either Text B.ByteString -> Steals -> Out
stolenAnswered t n answer st = case M.lookup n (stHanded st) of
  Just h | hThief h == t ->
    ( handBack n h st
    , [(hHolder h, either (ChildThrew (hChild h)) (ChildDone (hChild h)) answer)] )
  _ -> (st, [])

-- | The thief of steal @n@ stopped its child before it ended: its holder
-- runs it.
stolenDropped :: WorkerId -> Word64 -> Steals -> Out
stolenDropped t n st = case M.lookup n (stHanded st) of
  Just h | hThief h == t ->
    ( handBack n h st
    , [(hHolder h, ChildLost (hChild h))] )
  _ -> (st, [])

-- | A holder no longer wants these children of its: their thieves stop them.
childrenAbandoned :: WorkerId -> [Word64] -> Steals -> Out
childrenAbandoned w cs st =
  let gone = M.filter (\h -> hHolder h == w && hChild h `elem` cs) (stHanded st)
  in ( foldl' (\s' (n, h) -> handBack n h s') st (M.toList gone)
     , [ (hThief h, StolenCancel n) | (n, h) <- M.toList gone ] )

-- | A worker's own counts of its children ('Herd.Core.Wire.ChildCounts').
childCounts :: WorkerId -> StealCounts -> Steals -> Out
childCounts w c st = (st { stCounts = M.insert w c (stCounts st) }, [])

-- | A worker was lost: its children given to others will not be wanted,
-- children it ran for others go home, and steals asked of it go elsewhere.
stealLost :: WorkerId -> Steals -> Out
stealLost w st0 = (st3, homes ++ retries)
  where
    st1 = (setHolding w 0 (notIdle w st0))
              { stHanded = handed', stAway = awayOf handed'
              , stAsked = M.map forgetThief (M.filter ((/= w) . snd) (stAsked st0)) }
    handed' = M.filter (\h -> hHolder h /= w && hThief h /= w) (stHanded st0)
    forgetThief (thief, holder) = (if thief == Just w then Nothing else thief, holder)
    lostRuns = [ h | h <- M.elems (stHanded st0), hThief h == w, hHolder h /= w ]
    homes = [ (hHolder h, ChildLost (hChild h)) | h <- lostRuns ]
    orphans = [ t | (Just t, holder) <- M.elems (stAsked st0), holder == w, t /= w ]
    (st3, retries) = foldl' (\(s, out) t -> let (s', out') = serve t s in (s', out ++ out')) (st1, []) orphans

-- For a thief whose own children others run (it waits for them): the
-- one of those thieves with the most children of its own to steal. What
-- it steals is then part of what it waits for, so running it delays
-- nothing (leapfrogging, as Wagner and Calder's); other work could
-- outlast the answers it waits for.
leapfrog :: WorkerId -> Steals -> Maybe WorkerId
leapfrog t st = case M.lookup t (stAway st) of
  Nothing -> Nothing
  Just away -> case [ (k, v) | v <- M.elems away, v /= t, Just k <- [M.lookup v (stHolding st)] ] of
    [] -> Nothing
    -- the most children, the lowest number among equals
    ks -> Just (snd (maximumBy (comparing (\(k, v) -> (k, Down v))) ks))

-- Ask for one child: a holder that runs children of this thief's first
-- ('leapfrog'), else the holder with the most children (not the thief);
-- or queue the thief.
serve :: WorkerId -> Steals -> Out
serve t st = case maybe (holderFor t st) Just (leapfrog t st) of
  Just v ->
    let n = stNext st
    in ( (setHolding v (M.findWithDefault 0 v (stHolding st) - 1) st) { stAsked = M.insert n (Just t, v) (stAsked st), stNext = n + 1 }
       , [(v, StealAsk n)] )
  Nothing -> (nowIdle t st, [])

-- Serve waiting thieves, oldest first, each that some holder (not
-- itself) has children for; the others keep their places. Once no
-- holder has children the rest wait as they are (the cost is that of the
-- thieves served, not of the thieves waiting).
serveIdle :: Steals -> Out
serveIdle st0 = go (st0 { stIdle = Seq.empty }, []) (stIdle st0)
  where
    -- the set of waiting thieves stays as it was but for those served
    go (st, out) waiting = case Seq.viewl waiting of
      Seq.EmptyL -> (st, concat (reverse out))
      t Seq.:< rest
        | S.null (stRanked st) -> (st { stIdle = stIdle st <> waiting }, concat (reverse out))
        | hasHolderFor t st ->
            let (st', out') = serve t st
            in go (st' { stIdleSet = S.delete t (stIdleSet st') }, out' : out) rest
        | otherwise -> go (st { stIdle = stIdle st |> t }, out) rest
