-- | A process's pool of stealable "Herd.Par" children: what
-- 'Herd.Par.spawnTask' offers, what the worker's watch hands to thieves
-- ("Herd.Node.Worker.Steal"), and the answers that come back.
--
-- Every Par computation of the process ('Session') offers its children
-- here; it takes them back one by one to run them itself, newest first,
-- unless a thief took them first (oldest first: the biggest pieces of a
-- divide-and-conquer tree). A child taken stays on record until its answer
-- comes back, which goes to the inbox of the computation that spawned it.
-- Outside a worker (no link is set) nothing is ever stolen, and a spawn
-- costs one map insertion. A simulated host, one process playing many
-- workers, gives each worker a pool of its own ('OwnPool'), used by the
-- thread acting for it.
--
-- Promises: a child is run once (by its session, or by one thief at a
-- time) unless its thief was lost, when its session gets 'Lost' and runs
-- it itself; the master hears that this worker holds children when the
-- pool goes from none to some, and that it wants work at most once until
-- it is given some ('StolenChild'); every operation is safe from any
-- thread (one atomic change each).
module Herd.Task.Pool
  ( -- * Sessions
    Session
  , newSession
  , Answer (..)
  , offer
  , takeBack
  , withdraw
  , abandon
  , nextAnswers
  , awaitWork
  , Work (..)
    -- * The worker's side
  , StolenChild (..)
  , Link (..)
  , setLink
  , linked
  , stealOldest
  , answerChild
  , loseChild
  , gotStolen
  , takeStolen
  , hasStolen
  , askForWork
  , tellSpawns
  , nothingToDo
  , cancelStolen
  , stoppedStolen
  , ranStolen
  , Counts (..)
  , runStolenHere
  , linkBroken
  , busyPool
    -- * Pools of simulated workers
  , OwnPool
  , newOwnPool
  , usingPool
  , stolenReady
  , NeedsOwnThread (..)
  ) where

import Control.Concurrent (ThreadId, myThreadId)
import Control.Exception (Exception, bracket_, throwIO)

import Control.Concurrent.STM
import Control.Monad (unless, when)
import qualified Data.ByteString as B
import Data.IORef
import qualified Data.Map.Strict as M
import Data.Sequence (Seq, ViewL (..), (|>))
import qualified Data.Sequence as Seq
import Data.Word (Word64)
import Herd.Core.Base (TaskRef)
import Herd.Task.WorkCost (payOwnCost)
import System.IO.Unsafe (unsafePerformIO)

-- | What came back for a child that a thief took.
data Answer
  = Answered !Word64 !(Either String B.ByteString)  -- ^ its value's encoding, or why it failed
  | Lost !Word64                                     -- ^ its thief was lost: run it here
  deriving (Eq, Show)

-- | One Par computation's inbox.
newtype Session = Session (TVar [Answer])

-- A child offered: its function, its argument's encoding (made only if it
-- is stolen) and the session it answers to.
data Child = Child !TaskRef B.ByteString !Session

-- | A child stolen from another worker, for this one to run: the steal's
-- number, the function and its argument's encoding.
data StolenChild = StolenChild !Word64 !TaskRef !B.ByteString

-- | How the pool reaches the master and runs stolen children, set by the
-- worker's loop.
data Link = Link
  { linkChildrenHeld :: Int -> IO ()        -- ^ tell the master this many children are here
  , linkWantWork     :: IO ()               -- ^ ask the master for a stolen child
  , linkRun          :: StolenChild -> IO ()  -- ^ run a stolen child and answer it (inside a computation)
  , linkCounts       :: Counts -> IO ()      -- ^ tell the master what this worker's children went through
  , linkAbandon      :: [Word64] -> IO ()    -- ^ tell the master these children away are no longer wanted
  }

data Pool = Pool
  { plOffered :: !(IORef (M.Map Word64 Child))  -- ^ children not taken, by number (oldest first)
  , plAway    :: !(IORef (M.Map Word64 Child))  -- ^ children a thief runs
  , plNext    :: !(IORef Word64)
  , plLink    :: !(IORef (Maybe Link))
  , plAsked   :: !(IORef Bool)                  -- ^ a 'linkWantWork' is unanswered
  , plStolen  :: !(TVar (Seq StolenChild))      -- ^ stolen children given to this worker, not yet run
  , plCounts  :: !(IORef Counts)                -- ^ what this worker's children went through
  , plTold    :: !(IORef Word64)                -- ^ the spawns last told the master
  , plBroken  :: !(TVar Bool)                   -- ^ the link to the master broke
  }

-- | Since the start: children spawned, stolen from this worker, stolen
-- ones run here, its own run again after their thief was lost, and
-- stolen ones stopped here because their holder no longer wanted them.
data Counts = Counts !Word64 !Word64 !Word64 !Word64 !Word64
  deriving (Eq, Show)

newPool :: IO Pool
newPool = Pool <$> newIORef M.empty <*> newIORef M.empty <*> newIORef 1 <*> newIORef Nothing
               <*> newIORef False <*> newTVarIO Seq.empty <*> newIORef (Counts 0 0 0 0 0) <*> newIORef 0 <*> newTVarIO False

-- The worker process's pool.
thePool :: Pool
thePool = unsafePerformIO newPool
{-# NOINLINE thePool #-}

-- The pools of the workers a simulated host plays, by the thread acting
-- as each ('Nothing' in every other process).
ownPools :: IORef (Maybe (M.Map ThreadId Pool))
ownPools = unsafePerformIO (newIORef Nothing)
{-# NOINLINE ownPools #-}

-- The pool this thread acts on: the process's, or in a simulated host
-- the one its thread uses ('usingPool').
currentPool :: IO Pool
currentPool = do
  own <- readIORef ownPools
  case own of
    Just m | not (M.null m) -> do
      me <- myThreadId
      maybe (throwIO NeedsOwnThread) pure (M.lookup me m)
    -- no thread uses a pool of its own now: the process's
    _ -> pure thePool

-- | A pool of its own for one of the workers a simulated host plays
-- ("Herd.Simulate.Host"), which many workers share a process.
newtype OwnPool = OwnPool Pool

-- | Thrown by a stealable spawn in a simulated host's thread that acts for
-- no worker: a computation that may wait for thieves needs a thread of
-- its own ('usingPool'), and is run again on one.
data NeedsOwnThread = NeedsOwnThread
  deriving Show

instance Exception NeedsOwnThread

-- | A new pool with this link; while any thread uses a pool of its own
-- ('usingPool'), every pool operation in this process acts on the pool
-- its thread uses.
newOwnPool :: Link -> IO OwnPool
newOwnPool l = do
  atomicModifyIORef' ownPools (\m -> (Just (maybe M.empty id m), ()))
  p <- newPool
  writeIORef (plLink p) (Just l)
  pure (OwnPool p)

-- | Run an action whose pool operations act on this pool.
usingPool :: OwnPool -> IO a -> IO a
usingPool (OwnPool p) act = do
  me <- myThreadId
  bracket_ (atomicModifyIORef' ownPools (\m -> (fmap (M.insert me p) m, ())))
           (atomicModifyIORef' ownPools (\m -> (fmap (M.delete me) m, ())))
           act

-- | A stolen child given to this pool, waiting to run (retries until one
-- is).
stolenReady :: OwnPool -> STM StolenChild
stolenReady (OwnPool p) = popStolen p >>= maybe retry pure

-- | A new computation's inbox.
newSession :: IO Session
newSession = Session <$> newTVarIO []

-- | Set the worker's link (once, when the worker's loop starts).
setLink :: Link -> IO ()
setLink l = currentPool >>= \pl -> writeIORef (plLink pl) (Just l)

-- | Whether this process is a worker whose children others may steal.
linked :: IO Bool
linked = currentPool >>= \pl -> maybe False (const True) <$> readIORef (plLink pl)

-- | Offer a child (its function, its argument's encoding, lazily): its number.
offer :: Session -> TaskRef -> B.ByteString -> IO Word64
offer s ref arg = currentPool >>= \pl -> do
  payOwnCost
  n <- atomicModifyIORef' (plNext pl) (\k -> (k + 1, k))
  atomicModifyIORef' (plCounts pl) (\(Counts s t r a x) -> (Counts (s + 1) t r a x, ()))
  was <- atomicModifyIORef' (plOffered pl) (\m -> (M.insert n (Child ref arg s) m, M.null m))
  -- the master takes a holder off its idle thieves: this worker asks anew when it waits
  when was $ withLink (\l -> writeIORef (plAsked pl) False >> linkChildrenHeld l 1)
  pure n

-- | Take a child back to run it here: 'False' if a thief has it.
takeBack :: Word64 -> IO Bool
takeBack n = do
  pl <- currentPool
  payOwnCost
  atomicModifyIORef' (plOffered pl) $ \m -> case M.lookup n m of
    Just _ -> (M.delete n m, True)
    Nothing -> (m, False)

-- | Forget children offered and not taken (their computation ended):
-- those of these that were still offered.
withdraw :: [Word64] -> IO [Word64]
withdraw ns = currentPool >>= \pl -> atomicModifyIORef' (plOffered pl) (\m -> (foldr M.delete m ns, filter (`M.member` m) ns))

-- | Forget these children a thief took (their computation ended), and
-- tell the master, so their thieves stop them.
abandon :: [Word64] -> IO ()
abandon [] = pure ()
abandon ns = currentPool >>= \pl -> do
  atomicModifyIORef' (plAway pl) (\m -> (foldr M.delete m ns, ()))
  withLink (\l -> linkAbandon l ns)

-- | The child of steal @n@ is no longer wanted: dropped if it waits to
-- run here ('True'), else it may be running.
cancelStolen :: Word64 -> IO Bool
cancelStolen n = currentPool >>= \pl -> atomically $ do
  q <- readTVar (plStolen pl)
  let (gone, kept) = Seq.partition (\(StolenChild m _ _) -> m == n) q
  writeTVar (plStolen pl) kept
  pure (not (Seq.null gone))

-- | A stolen child was stopped here because its holder no longer wanted it.
stoppedStolen :: IO ()
stoppedStolen = counted (\(Counts s t r a x) -> Counts s t r a (x + 1))

-- | The answers in a session's inbox, without waiting.
nextAnswers :: Session -> IO [Answer]
nextAnswers (Session box) = payOwnCost >> atomically (swapTVar box [])

-- | What a computation that can go no further meets first.
data Work
  = Answers [Answer]   -- ^ answers to its children
  | Steal StolenChild  -- ^ a child stolen from another worker, to run meanwhile
  | Broken             -- ^ the link to the master broke: no answer will come

-- | Wait for an answer to one of this session's children, or for a
-- stolen child to run meanwhile.
awaitWork :: Session -> IO Work
awaitWork (Session box) = currentPool >>= \pl -> payOwnCost >> atomically (do
  as <- readTVar box
  if not (null as) then writeTVar box [] >> pure (Answers as) else do
    stolen <- popStolen pl
    case stolen of
      Just c -> pure (Steal c)
      Nothing -> readTVar (plBroken pl) >>= \b -> if b then pure Broken else retry)

-- | The link to the master broke: computations waiting on it stop waiting.
linkBroken :: IO ()
linkBroken = currentPool >>= \pl -> atomically (writeTVar (plBroken pl) True)

-- | A thief asks: the oldest child offered (now away), and how many are left.
stealOldest :: IO (Maybe (Word64, TaskRef, B.ByteString, Int))
stealOldest = currentPool >>= \pl -> do
  taken <- atomicModifyIORef' (plOffered pl) $ \m -> case M.minViewWithKey m of
    Just ((n, c), rest) -> (rest, Just (n, c, M.size rest))
    Nothing -> (m, Nothing)
  case taken of
    Nothing -> pure Nothing
    Just (n, c@(Child ref arg _), left) -> do
      atomicModifyIORef' (plAway pl) (\m -> (M.insert n c m, ()))
      counted (\(Counts s t r a x) -> Counts s (t + 1) r a x)
      pure (Just (n, ref, arg, left))

-- | A taken child's answer came back: to its session's inbox.
answerChild :: Word64 -> Either String B.ByteString -> IO ()
answerChild n r = () <$ home n (Answered n r)

-- | A taken child's thief was lost: its session runs it.
loseChild :: Word64 -> IO ()
loseChild n = do
  found <- home n (Lost n)
  when found $ counted (\(Counts s t r a x) -> Counts s t r (a + 1) x)

-- | A stolen child starts to run here.
ranStolen :: IO ()
ranStolen = counted (\(Counts s t r a x) -> Counts s t (r + 1) a x)

home :: Word64 -> Answer -> IO Bool
home n a = currentPool >>= \pl -> do
  c <- atomicModifyIORef' (plAway pl) (\m -> (M.delete n m, M.lookup n m))
  case c of
    Just (Child _ _ (Session box)) -> True <$ atomically (modifyTVar' box (a :))
    Nothing -> pure False   -- late, or for a computation that ended

-- Change the counts and tell the master.
counted :: (Counts -> Counts) -> IO ()
counted f = currentPool >>= \pl -> do
  c@(Counts s _ _ _ _) <- atomicModifyIORef' (plCounts pl) (\x -> let y = f x in (y, y))
  writeIORef (plTold pl) s
  withLink (\l -> linkCounts l c)

-- | The master gave this worker a stolen child to run.
gotStolen :: StolenChild -> IO ()
gotStolen c = currentPool >>= \pl -> do
  writeIORef (plAsked pl) False
  atomically (modifyTVar' (plStolen pl) (|> c))

-- | A stolen child waiting to run, if any (the worker's loop asks at
-- every turn: a plain read when none waits, no transaction).
takeStolen :: IO (Maybe StolenChild)
takeStolen = currentPool >>= \pl -> do
  none <- Seq.null <$> readTVarIO (plStolen pl)
  if none then pure Nothing else atomically (popStolen pl)

-- The oldest stolen child waiting to run, taken off the queue.
popStolen :: Pool -> STM (Maybe StolenChild)
popStolen pl = do
  q <- readTVar (plStolen pl)
  case Seq.viewl q of
    c :< rest -> Just c <$ writeTVar (plStolen pl) rest
    EmptyL -> pure Nothing

-- | Whether a stolen child waits to run.
hasStolen :: IO Bool
hasStolen = currentPool >>= \pl -> not . Seq.null <$> readTVarIO (plStolen pl)

-- | Ask the master for work, unless an ask is unanswered.
askForWork :: IO ()
askForWork = currentPool >>= \pl -> withLink $ \l -> do
  -- asked already (the usual case at an idle loop): a plain read
  asked <- readIORef (plAsked pl)
  unless asked $ do
    first <- atomicModifyIORef' (plAsked pl) (\a -> (True, not a))
    when first (payOwnCost >> linkWantWork l)

-- | Tell the master the counts if the spawns moved since it was last
-- told (the worker does when it is idle).
tellSpawns :: IO ()
tellSpawns = currentPool >>= \pl -> do
  c@(Counts s _ _ _ _) <- readIORef (plCounts pl)
  told <- readIORef (plTold pl)
  when (s /= told) $ writeIORef (plTold pl) s >> withLink (\l -> linkCounts l c)

-- | The worker has nothing to do: it asks for a stolen child (unless one
-- waits to run here) and tells the master its counts if they moved.
nothingToDo :: IO ()
nothingToDo = do
  stolen <- hasStolen
  unless stolen askForWork
  tellSpawns

-- | Run a stolen child inside a computation that waits, and answer it.
runStolenHere :: StolenChild -> IO ()
runStolenHere c = withLink (\l -> linkRun l c)

-- | Whether children are offered or away (the watch then looks at the
-- link often).
busyPool :: IO Bool
busyPool = currentPool >>= \pl -> do
  o <- readIORef (plOffered pl)
  a <- readIORef (plAway pl)
  pure (not (M.null o && M.null a))

withLink :: (Link -> IO ()) -> IO ()
withLink act = currentPool >>= \pl -> readIORef (plLink pl) >>= mapM_ act
