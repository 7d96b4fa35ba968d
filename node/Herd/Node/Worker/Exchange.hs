{-# LANGUAGE ScopedTypeVariables #-}
-- | A worker's side of keyed reductions ("Herd.Core.Exchange"): it runs
-- the groups it is sent and sends each part to its partition's owner
-- (through the master's link layer; the parts for other workers made and
-- sent first, its own kept as they are made, a shuffle's as values),
-- keeps the parts it owns, one per group, and combines a partition when
-- asked. Parts count against the
-- worker's budget for held values with its shared values
-- ("Herd.Node.Store"): one that would not fit is kept on the worker's
-- local disk and read back to be combined.
--
-- Promises: a part held is the first one that came for its group (a group
-- run again makes the same part); parts of a reduction that ended are
-- dropped, also when they come late, files included; what the reducer
-- throws, or bytes that do not decode, are answered as failures, never
-- crash the worker.
module Herd.Node.Worker.Exchange
  ( ExchangeTable
  , newExchangeTable
  , isExchangeMessage
  , exchangeMessage
  ) where

import Control.Monad (forM_, unless, void, when)
import Data.List (partition)
import qualified Data.ByteString as B
import Data.IORef
import qualified Data.Map.Strict as M
import qualified Data.Set as S
import qualified Data.Text as T
import Data.Word (Word32, Word64)
import Herd.Task.Closure (cachedLookup)
import Herd.Core.Base (TaskRef)
import Herd.Core.Packet.Policy (Urgency (..))
import Herd.Core.Wire (FromWorker (..), ToWorker (..), inPartsDirectory, partFileBytes)
import Herd.Task.Reducer (KeyedRunner (..), lookupKeyedRunner)
import Herd.Node.Store (holdOther, memoryRoom, spillPath)
import Herd.Node.Worker.Datasets (DatasetStore, keepHeld, lookupHeld)
import Herd.Task.Partition (Held, ShuffleRunner (..), heldBytes, heldSize, lookupShuffleRunner, newHeld)
import Control.Exception (IOException, try)
import System.Directory (removeFile)
import System.FilePath ((</>))

-- | What a worker holds for reductions.
data ExchangeTable = ExchangeTable
  { xtSelf    :: !Word64   -- ^ this worker's number: a part for it stays here
  , xtParts   :: !(IORef (M.Map (Word64, Word32) (M.Map Word32 Part)))
    -- ^ (reduction, partition) -> group -> its part
  , xtEnded   :: !(IORef (S.Set Word64))   -- ^ reductions the master said ended
  , xtRunners :: !(IORef (M.Map TaskRef (Either String KeyedRunner)))
  , xtShuffles :: !(IORef (M.Map TaskRef (Either String ShuffleRunner)))
  , xtStore   :: !DatasetStore   -- ^ the held partitions a shuffle reads and makes
  , xtPartsDir :: !(IORef (Maybe FilePath))
    -- ^ on the master's host: where large parts for other workers go ('PartsDirectory')
  , xtFiles   :: !(IORef Int)     -- ^ parts written there so far (for their names)
  }

-- A part held: in memory (its bytes as they came, or the value this
-- worker made for its own partition), or in a file of this many bytes.
data Part = InMemory !Held | OnDisk !FilePath !Int

-- | Nothing held, for the worker of this number, whose held partitions
-- are in this store.
newExchangeTable :: Word64 -> DatasetStore -> IO ExchangeTable
newExchangeTable self store =
  ExchangeTable self <$> newIORef M.empty <*> newIORef S.empty <*> newIORef M.empty <*> newIORef M.empty <*> pure store
                     <*> newIORef Nothing <*> newIORef 0

-- | Whether a message from the master is a reduction's.
isExchangeMessage :: ToWorker -> Bool
isExchangeMessage msg = case msg of
  GroupRun {} -> True
  GroupRunHeld {} -> True
  PartitionKeep {} -> True
  PartIn {} -> True
  PartInFile {} -> True
  PartsDirectory {} -> True
  PartitionCombine {} -> True
  ExchangeEnd {} -> True
  _ -> False

-- | Handle a reduction's message, answering with the given sender. Every
-- byte kept is a copy, so the message's packet may be reused at once.
exchangeMessage :: ExchangeTable -> (Urgency -> FromWorker -> IO ()) -> ToWorker -> IO ()
exchangeMessage xt send msg = case msg of
  GroupRun xid g ref parts targets inputs -> do
    runner <- cachedLookup (xtRunners xt) lookupKeyedRunner ref
    -- (a count of 0: the whole result is the one listed partition's part)
    made <- either (pure . Left) (\r -> runGroup r (max 1 (fromIntegral parts)) inputs) runner
    case made of
      Left why -> send Urgent (GroupThrew xid g (T.pack why))
      Right cut -> sendParts xid g targets $ \j -> case drop (if parts == 0 then 0 else fromIntegral j) cut of
        p : _ -> Right . Just <$> newHeld p
        [] -> pure (Right Nothing)
  GroupRunHeld xid g ref parts targets did -> do
    input <- lookupHeld (xtStore xt) did g
    runner <- cachedLookup (xtShuffles xt) lookupShuffleRunner ref
    case (input, runner) of
      (Nothing, _) -> send Urgent (GroupMissing xid g)
      (_, Left why) -> send Urgent (GroupThrew xid g (T.pack why))
      (Just h, Right r) -> shuffleSplit r (max 1 (fromIntegral parts)) h
        >>= either (send Urgent . GroupThrew xid g . T.pack) (\partOf -> sendParts xid g targets (fmap (fmap Just) . partOf . fromIntegral))
  PartitionKeep xid j ref groups did -> do
    runner <- cachedLookup (xtShuffles xt) lookupShuffleRunner ref
    outcome <- withParts xid j groups $ \bs -> either (pure . Left) (\r -> shuffleCombine r bs) runner
    case outcome of
      Left why -> send Urgent (PartitionThrew xid j (T.pack why))
      Right h -> keepHeld (xtStore xt) did j h >> send Urgent (PartitionDone xid j B.empty)
  PartIn xid g j part -> newHeld (B.copy part) >>= hold xid g j
  PartsDirectory dir -> writeIORef (xtPartsDir xt) (Just (T.unpack dir))
  -- (the size it says is for the master's count; the file's own is held)
  PartInFile xid g j _ path -> do
    dir <- readIORef (xtPartsDir xt)
    -- only a file of the parts directory is taken (and then deleted)
    let ours = maybe False (`inPartsDirectory` T.unpack path) dir
    when ours $ holdFile xid g j (T.unpack path)
  PartitionCombine xid j ref groups -> do
    runner <- cachedLookup (xtRunners xt) lookupKeyedRunner ref
    outcome <- withParts xid j groups $ \hs -> either (pure . Left) (\r -> combineParts r (map heldBytes hs)) runner
    send Urgent (either (PartitionThrew xid j . T.pack) (PartitionDone xid j) outcome)
  ExchangeEnd xid -> do
    forget (\(x, _) -> x == xid)
    modifyIORef' (xtEnded xt) (S.insert xid)
  _ -> pure ()
  where
    -- a group's parts to their owners, then word that it ran: the parts
    -- of other workers are made first, so they travel while this one makes
    -- its own, and its own are held as they are (no trip through the master)
    sendParts xid g targets partOf = go (others ++ own)
      where
        (own, others) = partition ((== xtSelf xt) . snd) targets
        go [] = send Urgent (GroupSent xid g)
        go ((j, dest) : rest) = partOf j >>= \made -> case made of
          Left why -> send Urgent (GroupThrew xid g (T.pack why))
          Right Nothing -> go rest
          Right (Just h) | dest == xtSelf xt -> hold xid g j h >> go rest
                         | otherwise -> forward dest xid g j (heldBytes h) >> go rest
    -- a partition's parts, one from each group in group order, to combine;
    -- they are forgotten after
    withParts xid j groups combine = do
      held <- M.findWithDefault M.empty (xid, j) <$> readIORef (xtParts xt)
      outcome <- if M.size held /= fromIntegral groups
        then pure (Left ("partition " ++ show j ++ " holds " ++ show (M.size held) ++ " of " ++ show groups ++ " groups' parts"))
        else do
          parts <- try (mapM partHeld (M.elems held))
          case parts of
            Left (e :: IOException) -> pure (Left ("a part kept on disk could not be read back: " ++ show e))
            Right hs -> combine hs
      forget (\(x, p) -> x == xid && p == j)
      pure outcome
    -- a large part for a worker on this host as a file in the parts
    -- directory, when there is one (and it can be written)
    forward dest xid g j p = do
      dir <- readIORef (xtPartsDir xt)
      case dir of
        Just d | B.length p >= partFileBytes -> do
          k <- atomicModifyIORef' (xtFiles xt) (\n -> (n + 1, n))
          let path = d </> ("part-" ++ show (xtSelf xt) ++ "-" ++ show xid ++ "-" ++ show g ++ "-" ++ show j ++ "-" ++ show k)
          written <- try (B.writeFile path p)
          case written of
            Right () -> send Urgent (ForwardFile dest xid g j (fromIntegral (B.length p)) (T.pack path))
            Left (_ :: IOException) -> do
              -- (a directory in memory may be full: what was written goes)
              void (try (removeFile path) :: IO (Either IOException ()))
              send Bulk (Forward dest xid g j p)
        _ -> send Bulk (Forward dest xid g j p)
    -- a part handed over in a file is held as one that came on the link
    -- ('hold': in memory within the budget, else in the spill directory),
    -- and the handed file goes at once; a file gone or unreadable is not
    -- held (the exchange sends the part again, or ends)
    holdFile xid g j path = do
      bytes <- try (B.readFile path)
      void (try (removeFile path) :: IO (Either IOException ()))
      either (\(_ :: IOException) -> pure ()) (\b -> newHeld b >>= hold xid g j) bytes
    hold xid g j part = do
      ended <- S.member xid <$> readIORef (xtEnded xt)
      already <- maybe False (M.member g) . M.lookup (xid, j) <$> readIORef (xtParts xt)
      unless (ended || already) $ do
        room <- memoryRoom
        part <- case room of
          Just r | heldSize part > r -> do
            path <- spillPath ("part-" ++ show xid ++ "-" ++ show j ++ "-" ++ show g)
            B.writeFile path (heldBytes part)
            pure (OnDisk path (heldSize part))
          _ -> InMemory part <$ holdOther (heldSize part)
        modifyIORef' (xtParts xt) (M.insertWith M.union (xid, j) (M.singleton g part))
      unless ended $ send Bulk (PartHeld xid g j)
    -- drop the parts of these (reduction, partition)s, files and budget too
    forget which = do
      gone <- atomicModifyIORef' (xtParts xt) (\m -> let (out, kept) = M.partitionWithKey (\k _ -> which k) m in (kept, out))
      forM_ (concatMap M.elems (M.elems gone)) $ \p -> case p of
        InMemory h -> holdOther (negate (heldSize h))
        OnDisk path _ -> void (try (removeFile path) :: IO (Either IOException ()))
    partHeld p = case p of
      InMemory h -> pure h
      OnDisk path _ -> B.readFile path >>= newHeld
