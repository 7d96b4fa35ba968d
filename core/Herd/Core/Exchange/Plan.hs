-- | The plan of a keyed reduction ("Herd.Core.Exchange"): its state, and
-- the pure decisions every event goes through: which group runs next
-- where, which partition's parts are all in and can be combined, who owns
-- the fewest partitions, and the end. Pure.
module Herd.Core.Exchange.Plan
  ( ExchangeJob (..)
  , HeldShuffle (..)
  , Exchange (..)
  , XOut (..)
  , runsPerWorker
  , needing
  , leastOwning
  , end
  , dispatch
  , nextGroup
  , targetsOf
  , combineReady
  , groupsTaking
  , partitionTakes
  ) where

import qualified Data.ByteString as B
import Data.List (foldl', sortOn)
import qualified Data.Map.Strict as M
import qualified Data.Set as S
import Data.Word (Word64)
import Herd.Core.Base (TaskRef (..), WorkerId)
import Herd.Core.Error (HerdError (..))
import Herd.Core.Wire (ToWorker (..))

-- | A keyed reduction as the caller hands it to the core.
data ExchangeJob = ExchangeJob
  { xjRef       :: !TaskRef          -- ^ the reducer ("Herd.Master.Job.Reduce")
  , xjGroups    :: ![B.ByteString]   -- ^ each group's inputs, encoded, in order
  , xjMaxDeaths :: !Int              -- ^ workers one group may kill before the reduction fails
  , xjPartitions :: !(Maybe Int)     -- ^ partitions ('Nothing': one per live worker)
  , xjTree      :: !Bool
    -- ^ partitions are blocks of groups in order, not of keys: each
    -- group's whole result goes to its block's owner
  , xjShuffle   :: !(Maybe HeldShuffle)
    -- ^ a shuffle of a dataset's partitions: the groups' inputs and the
    -- partitions' results are held on the workers, where it says
  } deriving (Eq, Show)

-- | A shuffle of held partitions ("Herd.Master.Job.Dataset"): group @g@
-- is partition @g@ of the input dataset and runs where that is held;
-- partition @j@ of the output is combined and kept on the worker the
-- plan places it on, and nothing but word of it comes back. Nothing can
-- run elsewhere, so losing any of these workers ends the shuffle with
-- 'PartitionsLost' (the dataset layer recomputes and runs it again).
data HeldShuffle = HeldShuffle
  { hsInput   :: !Word64                  -- ^ the input dataset's number
  , hsGroupAt :: !(M.Map Int WorkerId)    -- ^ input partition -> the worker holding it
  , hsOwners  :: !(M.Map Int WorkerId)    -- ^ output partition -> the worker to keep it
  , hsOutput  :: !Word64                  -- ^ the output dataset's number
  } deriving (Eq, Show)

-- | What the core must do for an exchange.
data XOut
  = XSend !WorkerId !ToWorker
  | XEnded !(Either HerdError [B.ByteString])
    -- ^ the reduction is over: each partition's combined bytes, in order, or why not
  deriving (Eq, Show)

-- | One exchange's state.
data Exchange = Exchange
  { xId        :: !Word64
  , xRef       :: !TaskRef
  , xArgs      :: !(M.Map Int B.ByteString)          -- ^ group -> its inputs
  , xParts     :: !Int                               -- ^ partitions of the keys
  , xOwner     :: !(M.Map Int WorkerId)              -- ^ partition -> its owner (none while no worker is live)
  , xDelivered :: !(M.Map Int (S.Set Int))           -- ^ partition -> groups whose part its owner holds
  , xRuns      :: !(M.Map WorkerId [(Int, [(Int, WorkerId)])])
    -- ^ per worker, the groups sent it to run, oldest first, with the
    -- owners they were told to send each partition's part to
  , xPending   :: !(S.Set Int)
    -- ^ groups that may have a part no run covers: the next to run
    -- (kept as things happen, so a dispatch never scans every group)
  , xSent      :: !(S.Set (Int, Int, WorkerId))
    -- ^ (group, partition, owner): the part went out after a finished
    -- run, so it reaches that owner unless the owner is lost
  , xCombining :: !(S.Set Int)                       -- ^ partitions whose owner was asked to combine
  , xDone      :: !(M.Map Int B.ByteString)          -- ^ partitions combined
  , xDeaths    :: !(M.Map Int Int)                   -- ^ group -> workers that died running it
  , xLive      :: !(S.Set WorkerId)
  , xHeld      :: !(S.Set WorkerId)   -- ^ live workers near their memory limit: sent no group while others can take one
  , xMaxDeaths :: !Int
  , xTree      :: !Bool   -- ^ partitions are blocks of groups ('xjTree')
  , xShuffle   :: !(Maybe HeldShuffle)   -- ^ a shuffle of held partitions ('xjShuffle')
  } deriving (Eq, Show)

-- | Groups a worker is sent at most at once: one running, one waiting,
-- so a worker never idles between groups and a lost one takes little.
runsPerWorker :: Int
runsPerWorker = 2

-- | Every group that sends a part to one of these partitions needs a run
-- (their parts went with an owner, or had none to go to).
needing :: [Int] -> Exchange -> Exchange
needing [] x = x
needing js x = x { xPending = S.union (xPending x) (S.fromList [ g | g <- M.keys (xArgs x), any (\j -> partitionTakes x j g) js ]) }

-- | The live worker owning the fewest open partitions (the lowest on a tie).
leastOwning :: Exchange -> Maybe WorkerId
leastOwning x = case sortOn load (S.toList (xLive x)) of
  o : _ -> Just o
  [] -> Nothing
  where load o = (length [ () | (j, o') <- M.toList (xOwner x), o' == o, not (M.member j (xDone x)) ], o)

-- | End: the caller's answer, and every live worker drops what it holds.
end :: Either HerdError [B.ByteString] -> Exchange -> (Maybe Exchange, [XOut])
end answer x = (Nothing, XEnded answer : [ XSend w (ExchangeEnd (xId x)) | w <- S.toList (xLive x) ])

-- | Send groups to the workers with room (in a shuffle of held
-- partitions, every group to the worker holding its input, at once: its
-- input is there already).
dispatch :: Exchange -> (Exchange, [XOut])
dispatch x0 | Just hs <- xShuffle x0 = dispatchHeld hs x0 []
dispatch x0 = let (x1, runs) = foldl' give (x0, []) feedable in (x1, reverse runs)
  where
    -- as the farm's scheduler: held workers are passed over while any
    -- other can take work; when every one is held, all take it
    feedable = case S.toList (S.difference (xLive x0) (xHeld x0)) of
      [] -> S.toList (xLive x0)
      ws -> ws
    give (x, outs) w = fill x outs w (runsPerWorker - length (M.findWithDefault [] w (xRuns x)))
    fill x outs w room
      | room <= 0 = (x, outs)
      | otherwise = case nextGroup x of
          (x', Nothing) -> (x', outs)
          (x', Just (g, targets)) ->
            let x'' = x' { xRuns = M.insertWith (flip (++)) w [(g, targets)] (xRuns x') }
                -- a partition count of 0: the group's whole result is one part
                msg = GroupRun (xId x) (fromIntegral g) (xRef x) (if xTree x then 0 else fromIntegral (xParts x))
                               [ (fromIntegral j, fromIntegral o) | (j, o) <- targets ] (xArgs x M.! g)
            in fill x'' (XSend w msg : outs) w (room - 1)

dispatchHeld :: HeldShuffle -> Exchange -> [XOut] -> (Exchange, [XOut])
dispatchHeld hs x outs = case nextGroup x of
  (x', Nothing) -> (x', reverse outs)
  (x', Just (g, targets)) -> case M.lookup g (hsGroupAt hs) of
    Nothing -> dispatchHeld hs x' outs
    Just w ->
      let msg = GroupRunHeld (xId x) (fromIntegral g) (xRef x) (fromIntegral (xParts x))
                             [ (fromIntegral j, fromIntegral o) | (j, o) <- targets ] (hsInput hs)
      in dispatchHeld hs x' { xRuns = M.insertWith (flip (++)) w [(g, targets)] (xRuns x') } (XSend w msg : outs)

-- | The lowest pending group with a part some owner still needs and no run
-- covers, with the owners of those parts; pending groups found to need
-- nothing leave the set on the way, and the one returned leaves it too.
nextGroup :: Exchange -> (Exchange, Maybe (Int, [(Int, WorkerId)]))
nextGroup x = case S.minView (xPending x) of
  Nothing -> (x, Nothing)
  Just (g, rest) ->
    let x' = x { xPending = rest }
    in case targetsOf x' g of
         [] -> nextGroup x'
         ts -> (x', Just (g, ts))

-- | The partitions a group's run must still send to, with their owners.
targetsOf :: Exchange -> Int -> [(Int, WorkerId)]
targetsOf x g =
  [ (j, o) | (j, o) <- M.toList (xOwner x), partitionTakes x j g, not (M.member j (xDone x))
           , not (S.member j (xCombining x))
           , not (S.member g (M.findWithDefault S.empty j (xDelivered x)))
           , not (S.member (g, j, o) (xSent x))
           , not (S.member (j, o) running) ]
  where running = S.fromList [ t | runs <- M.elems (xRuns x), (g', ts) <- runs, g' == g, t <- ts ]

-- | Ask the owner of each of these partitions that holds every part of it
-- to combine them.
combineReady :: [Int] -> Exchange -> (Exchange, [XOut])
combineReady js x = (x { xCombining = S.union (xCombining x) (S.fromList (map fst ready)) }, map snd ready)
  where
    ready = [ (j, XSend o (combineMessage j groups))
            | j <- js, Just o <- [M.lookup j (xOwner x)], not (M.member j (xDone x)), not (S.member j (xCombining x))
            , let groups = groupsTaking x j
            , S.size (M.findWithDefault S.empty j (xDelivered x)) == groups ]
    combineMessage j groups = case xShuffle x of
      Just hs -> PartitionKeep (xId x) (fromIntegral j) (xRef x) (fromIntegral groups) (hsOutput hs)
      Nothing -> PartitionCombine (xId x) (fromIntegral j) (xRef x) (fromIntegral groups)

-- | How many groups send a part to this partition: all, or in a tree its
-- block, the groups g with g * P `div` G == j.
groupsTaking :: Exchange -> Int -> Int
groupsTaking x j
  | xTree x = firstOf (j + 1) - firstOf j
  | otherwise = M.size (xArgs x)
  where
    g = M.size (xArgs x)
    p = max 1 (xParts x)
    firstOf k = min g ((k * g + p - 1) `div` p)

-- | Whether a group sends a part to this partition: every group does,
-- but in a tree only the groups of the partition's block, which cut the
-- groups in order into equal runs.
partitionTakes :: Exchange -> Int -> Int -> Bool
partitionTakes x j g
  | xTree x = g * xParts x `div` max 1 (M.size (xArgs x)) == j
  | otherwise = True
