-- | The cluster's calls that wait for one answer from the master's core:
-- an evolve session ("Herd.Master.Job.Evolve", "Herd.Master.Job.Refs") and a keyed reduction
-- ("Herd.Master.Job.Reduce"). Each registers its answer with the shell under a fresh
-- number, starts, and waits; a caller interrupted while waiting (a
-- timeout, a cancelled thread) cancels what it started, so nothing runs
-- for nobody.
module Herd.Master.Calls
  ( runSession
  , runExchange
  , runStage
  , runShuffle
  , dropDatasetParts
  ) where

import Control.Concurrent.MVar
import Control.Exception (onException)
import Control.Monad (void)
import qualified Data.ByteString as B
import Herd.Settings (Config (..))
import Herd.Core.Error (HerdError)
import Herd.Core.Exchange (ExchangeJob (..), HeldShuffle (..))
import Herd.Core.Dataset.Stage (StageJob)
import Herd.Core.Master.Events (Event (..))
import Herd.Core.Session (SessionOutcome, SessionRequest)
import Herd.Master.Cluster
import Herd.Master.Shell (Registration (..), shellRegister, shellStep)
import Herd.Task (TaskRef)
import Data.Word (Word64)

-- | Run an evolve session on the cluster's workers (the lowest numbered,
-- up to the limit) and wait for its answer with the given action. The
-- start function is given those workers, and may refuse to start.
runSession :: Cluster -> SessionRequest -> (Either HerdError SessionOutcome -> IO ()) -> IO a -> IO a
runSession cluster req answer wait =
  underNumber cluster (\sid -> (RegisterSession sid answer, SessionStart sid req))
                      (\sid -> (ForgetSession sid, SessionCancel sid)) (const wait)

-- | Run a keyed reduction ("Herd.Core.Exchange") of these encoded groups
-- with this reducer on the live workers, one partition per worker, of
-- the keys or (@tree@) of the groups in order, and wait for each
-- partition's combined bytes.
runExchange :: Cluster -> TaskRef -> Bool -> [B.ByteString] -> IO (Either HerdError [B.ByteString])
runExchange cluster ref tree groups =
  runExchangeJob cluster (ExchangeJob ref groups (configMaxTaskDeaths (clConfig cluster)) Nothing tree Nothing)

-- | Run a dataset's narrow step ("Herd.Core.Dataset.Stage") and wait for
-- each partition's answer.
runStage :: Cluster -> StageJob -> IO (Either HerdError [B.ByteString])
runStage cluster job = do
  answer <- newEmptyMVar
  underNumber cluster (\sid -> (RegisterExchange sid (void . tryPutMVar answer), StageStart sid job))
                      (\sid -> (ForgetExchange sid, StageCancel sid)) (const (takeMVar answer))

-- | Run a dataset's shuffle of this many held partitions with this
-- shuffle function, placed as given, and wait until every output
-- partition is held.
runShuffle :: Cluster -> TaskRef -> Int -> HeldShuffle -> IO (Either HerdError ())
runShuffle cluster ref inputs held = (() <$) <$>
  runExchangeJob cluster (ExchangeJob ref (replicate inputs B.empty) (configMaxTaskDeaths (clConfig cluster)) Nothing False (Just held))

-- Start an exchange and wait for its end.
runExchangeJob :: Cluster -> ExchangeJob -> IO (Either HerdError [B.ByteString])
runExchangeJob cluster job = do
  answer <- newEmptyMVar
  underNumber cluster (\xid -> (RegisterExchange xid (void . tryPutMVar answer), ExchangeStart xid job))
                      (\xid -> (ForgetExchange xid, ExchangeCancel xid)) (const (takeMVar answer))

-- | Every worker forgets these datasets' partitions.
dropDatasetParts :: Cluster -> [Word64] -> IO ()
dropDatasetParts cluster dids = shellStep (clShell cluster) True [DatasetsDrop dids]

-- Once some worker is there: register and start under a fresh number,
-- wait, and on an interruption forget and cancel.
underNumber :: Cluster -> (Word64 -> (Registration, Event)) -> (Word64 -> (Registration, Event)) -> (Word64 -> IO a) -> IO a
underNumber cluster start cancel wait = do
  awaitSomeWorker cluster
  n <- freshId cluster
  let (reg, ev) = start n
      (forget, stop) = cancel n
  shellRegister (clShell cluster) True reg [ev]
  wait n `onException` shellRegister (clShell cluster) True forget [stop]
