-- | A worker's side of datasets ("Herd.Master.Job.Dataset"): the
-- partitions it holds, each under its dataset's number and its index,
-- and the partition functions the master asks it to run on them. A
-- shuffle's held inputs and outputs ("Herd.Node.Worker.Exchange") are
-- kept in the same store.
--
-- Promises: a step whose input partition is not held here is answered
-- 'PartMissing' (the master then recomputes it), never run on something
-- else; what a function throws is answered 'PartThrew'; a partition held
-- again under the same name replaces the old one; the bytes held count
-- against the worker's budget for held values ("Herd.Node.Store").
module Herd.Node.Worker.Datasets
  ( DatasetStore
  , newDatasetStore
  , lookupHeld
  , keepHeld
  , isDatasetMessage
  , datasetMessage
  ) where

import Control.Monad (forM_)
import Data.IORef
import qualified Data.Map.Strict as M
import qualified Data.Set as S
import qualified Data.Text as T
import Data.Word (Word32, Word64)
import Herd.Core.Base (TaskRef)
import Herd.Core.Packet.Policy (Urgency (..))
import Herd.Core.Wire (FromWorker (..), ToWorker (..))
import Herd.Node.Store (holdOther)
import Herd.Task.Closure (cachedLookup)
import Herd.Task.Partition (Held, PartitionRunner (..), heldSize, lookupPartitionRunner)

-- | The partitions a worker holds, and the functions it looked up.
data DatasetStore = DatasetStore
  { dsHeld    :: !(IORef (M.Map (Word64, Word32) Held))   -- ^ (dataset, partition) -> the partition
  , dsRunners :: !(IORef (M.Map TaskRef (Either String PartitionRunner)))
  }

-- | Nothing held.
newDatasetStore :: IO DatasetStore
newDatasetStore = DatasetStore <$> newIORef M.empty <*> newIORef M.empty

-- | Partition @j@ of dataset @d@, if held here.
lookupHeld :: DatasetStore -> Word64 -> Word32 -> IO (Maybe Held)
lookupHeld st d j = M.lookup (d, j) <$> readIORef (dsHeld st)

-- | Hold partition @j@ of dataset @d@ (replacing one held under that name).
keepHeld :: DatasetStore -> Word64 -> Word32 -> Held -> IO ()
keepHeld st d j h = do
  old <- atomicModifyIORef' (dsHeld st) (\m -> (M.insert (d, j) h m, M.lookup (d, j) m))
  holdOther (heldSize h - maybe 0 heldSize old)

-- | Whether a message from the master is a dataset step's.
isDatasetMessage :: ToWorker -> Bool
isDatasetMessage msg = case msg of
  PartRun {} -> True
  PartsDrop {} -> True
  _ -> False

-- | Handle a dataset message, answering with the given sender.
datasetMessage :: DatasetStore -> (Urgency -> FromWorker -> IO ()) -> ToWorker -> IO ()
datasetMessage st send msg = case msg of
  PartRun sid j ref inputs out arg -> do
    held <- mapM (\d -> lookupHeld st d j) inputs
    case sequence held of
      Nothing -> send Urgent (PartMissing sid j)
      Just ins -> do
        runner <- cachedLookup (dsRunners st) lookupPartitionRunner ref
        outcome <- either (pure . Left) (\r -> runPartition r (fromIntegral j) ins arg) runner
        case outcome of
          Left why -> send Urgent (PartThrew sid j (T.pack why))
          Right (made, answer) -> do
            forM_ made $ \h -> if out == 0 then pure () else keepHeld st out j h
            send Urgent (PartRan sid j answer)
  PartsDrop dids -> do
    let gone = S.fromList dids
    dropped <- atomicModifyIORef' (dsHeld st) $ \m ->
      let (out, kept) = M.partitionWithKey (\(d, _) _ -> S.member d gone) m in (kept, out)
    holdOther (negate (sum (map heldSize (M.elems dropped))))
  _ -> pure ()
