{-# LANGUAGE ScopedTypeVariables #-}
-- | A worker's side of stealing "Herd.Par" children ("Herd.Core.Steal"
-- brokers them at the master; "Herd.Task.Pool" holds them): answer a
-- thief's ask from the pool, bring a stolen child's answer home to the
-- computation that spawned it, and run children stolen from others.
--
-- These messages are handled wherever they are read: by the loop, or by
-- the watch while a computation runs ("Herd.Node.Worker.Cancel"), because
-- a thief must not wait for a long task's end, and a computation waiting
-- on a child must hear its answer.
--
-- Promises: every stolen child this worker is given is answered exactly
-- once: its value ('StolenDone'), its error ('StolenThrew'), or, when it
-- was stopped before it ended (its computation cancelled), 'StolenDropped'
-- so that its holder runs it.
module Herd.Node.Worker.Steal
  ( isStealMessage
  , stealMessage
  , stealLink
  , runStolenInLoop
  ) where

import Control.Exception (onException)
import qualified Data.ByteString as B
import Data.IORef (IORef)
import qualified Data.Map.Strict as M
import qualified Data.Text as T
import Data.Word (Word64)
import Herd.Core.Wire (FromWorker (..), ToWorker (..))
import Herd.Node.Worker.Cancel (Canceller, Stop (..), computing, stolenRun, takeCancelled)
import Herd.Task (Runner (..), TaskRef, lookupRunner)
import Herd.Task.Closure (cachedLookup)
import qualified Herd.Task.Pool as P

type Runners = IORef (M.Map TaskRef (Either String Runner))

-- | Whether the message is about stolen children.
isStealMessage :: ToWorker -> Bool
isStealMessage msg = case msg of
  StealAsk _ -> True
  StolenRun {} -> True
  ChildDone _ _ -> True
  ChildThrew _ _ -> True
  ChildLost _ -> True
  StolenCancel _ -> True
  _ -> False

-- | Handle a message about stolen children (a stolen child to run is
-- queued for the loop, or for a computation that waits).
stealMessage :: (FromWorker -> IO ()) -> ToWorker -> IO ()
stealMessage send msg = case msg of
  StealAsk n -> P.stealOldest >>= \taken -> case taken of
    Just (c, ref, arg, left) -> send (StealGiven n c (fromIntegral left) ref arg)
    Nothing -> send (StealNone n)
  StolenRun n ref arg -> P.gotStolen (P.StolenChild n ref (B.copy arg))
  ChildDone c v -> P.answerChild c (Right (B.copy v))
  ChildThrew c why -> P.answerChild c (Left (T.unpack why))
  ChildLost c -> P.loseChild c
  -- waiting: dropped unanswered (the master forgot it); running: the watch stops it
  StolenCancel n -> () <$ P.cancelStolen n
  _ -> pure ()

-- | The pool's way to the master, for this worker's loop to set.
stealLink :: Runners -> (FromWorker -> IO ()) -> P.Link
stealLink runners send = P.Link
  { P.linkChildrenHeld = send . ChildrenHeld . fromIntegral
  , P.linkWantWork = send WantWork
  , P.linkCounts = \(P.Counts s t r a x) -> send (ChildCounts s t r a x)
  , P.linkAbandon = send . ChildrenAbandoned
  , P.linkRun = \c@(P.StolenChild n _ _) -> do
      -- inside a computation that waits: its interruption drops the child
      r <- runChild runners c `onException` send (StolenDropped n)
      answer send n r
  }

-- | Run a stolen child from the loop, lending the link to the watch
-- meanwhile (its own children may be stolen in turn).
runStolenInLoop :: Runners -> Canceller -> (FromWorker -> IO ()) -> P.StolenChild -> IO ()
runStolenInLoop runners cancels send c@(P.StolenChild n _ _) = do
  -- cancelled in a frame the watch read before it started: not run
  early <- takeCancelled cancels (stolenRun n)
  r <- if early then pure (Left Cancelled) else computing cancels (stolenRun n) (runChild runners c)
  case r of
    Right out -> answer send n out
    Left Overran -> send (StolenThrew n (T.pack "it ran past the deadline per task (configTaskDeadline) and was stopped"))
    Left Cancelled -> P.stoppedStolen >> send (StolenDropped n)

runChild :: Runners -> P.StolenChild -> IO (Either String B.ByteString)
runChild runners (P.StolenChild _ ref arg) = do
  P.ranStolen
  runner <- cachedLookup runners lookupRunner ref
  case runner of
    Left why -> pure (Left why)
    Right r -> runnerOne r arg

answer :: (FromWorker -> IO ()) -> Word64 -> Either String B.ByteString -> IO ()
answer send n = send . either (StolenThrew n . T.pack) (StolenDone n)
