{-# LANGUAGE ScopedTypeVariables #-}
{-# LANGUAGE RankNTypes #-}
-- | What the evolve API's two master loops share: a session is a pure state
-- machine over the workers' messages, and a loop only reads packets,
-- feeds their messages to it and carries out what it says.
--
-- Promise: the machine sees each evolve message of a lent link once, in
-- the order the worker sent it, and each lost worker once; messages that
-- are not about evolve states go back to the cluster's own loop.
module Herd.Master.Session
  ( Machine (..)
  , Out (..)
  , SessionEnd (..)
  , Driver
  , isEvolveMessage
    -- * For the loops
  , Feeder (..)
  , newFeeder
  , feedPacket
  , feedLost
  , feedInitial
  , flushTouched
  ) where

import Control.Concurrent.MVar
import Control.Exception (SomeException, try, displayException)
import Control.Monad (forM_, unless, when)
import qualified Data.ByteString as B
import Data.IORef
import qualified Data.Map.Strict as M
import qualified Data.Set as S
import Herd.Error (HerdError)
import Herd.Evolve.Schedule (WorkerId)
import Herd.Master (LentLink (..))
import Herd.Packet (countReceived, flushIdle, sendMessage, sendMessages, splitPacket)
import Herd.Packet.Policy (Urgency (..))
import Herd.Transport (closeConnection)
import Herd.Wire

-- | A session's logic: pure functions of its state.
data Machine st = Machine
  { machineMessage :: WorkerId -> FromWorker -> st -> (st, [Out])
  , machineLost    :: WorkerId -> String -> st -> (st, [Out])
  , machineDone    :: st -> Bool
  }

-- | What a session asks its loop to do.
data Out
  = SendTo !WorkerId !ToWorker    -- ^ send a message (buffered; flushed after each packet)
  | Fail !HerdError               -- ^ end the session with this error
  | DropPeer !WorkerId !String    -- ^ the worker broke the protocol: close its link

-- | How a session ended: its final state, its error if it failed, and the
-- workers lost during it (with why).
data SessionEnd st = SessionEnd
  { endState :: !st
  , endError :: !(Maybe HerdError)
  , endLost  :: ![(WorkerId, String)]
  }

-- | A master loop: given the frame cap, the lent links, where to send
-- messages that are not the session's, the machine, its first state and
-- the first things to do, run until the machine is done or fails.
type Driver = forall st. Int -> [LentLink] -> (WorkerId -> [B.ByteString] -> IO ())
            -> Machine st -> st -> [Out] -> IO (SessionEnd st)

-- | Whether a worker's message belongs to an evolve session.
isEvolveMessage :: FromWorker -> Bool
isEvolveMessage m = case m of
  StateEvolved {} -> True
  EvolveThrew {} -> True
  EvolveRejected {} -> True
  StateReleased {} -> True
  StateKept {} -> True
  StateMissing {} -> True
  StatesCleared -> True
  StateReplayed {} -> True
  _ -> False

-- | The state a loop keeps around the machine. The machine's state is in an
-- 'Control.Concurrent.MVar.MVar' so that the threaded loop's threads can share it; the epoll loop
-- takes it uncontended.
data Feeder st = Feeder
  { feedMachine :: !(Machine st)
  , feedState   :: !(MVar st)
  , feedLinks   :: !(M.Map WorkerId LentLink)
  , feedForward :: WorkerId -> [B.ByteString] -> IO ()
  , feedCap     :: !Int
  , feedError   :: !(IORef (Maybe HerdError))
  , feedLostSet :: !(IORef (M.Map WorkerId String))
  , feedTouched :: !(IORef (S.Set WorkerId))
  , feedFinished :: !(IORef Bool)
  }

-- | Set up a feeder.
newFeeder :: Int -> [LentLink] -> (WorkerId -> [B.ByteString] -> IO ()) -> Machine st -> st -> IO (Feeder st)
newFeeder cap links forward machine st0 =
  Feeder machine <$> newMVar st0 <*> pure (M.fromList [ (lentWorker l, l) | l <- links ]) <*> pure forward
                 <*> pure cap <*> newIORef Nothing <*> newIORef M.empty <*> newIORef S.empty
                 <*> newIORef (machineDone machine st0)

-- | Carry out the session's first actions; 'True' when the session is
-- over already (nothing to do, or a first action failed it).
feedInitial :: Feeder st -> [Out] -> IO Bool
feedInitial f outs = do
  stepLocked f (\st -> (st, outs))
  flushTouched f
  finished f

-- | Handle one packet from a worker; 'True' when the session is over.
feedPacket :: Feeder st -> WorkerId -> B.ByteString -> IO Bool
feedPacket f wid packet = do
  let l = feedLinks f M.! wid
  case splitPacket (feedCap f `div` 5) packet of
    Left why -> feedLost f wid ("bad packet: " ++ why)
    Right msgs -> do
      atomicModifyIORef' (lentReceived l) (\r -> (countReceived (length msgs) (B.length packet) r, ()))
      others <- go msgs []
      unless (null others) $ feedForward f wid (reverse others)
      finished f
  where
    go [] others = pure others
    go (m : ms) others = case decodeFromWorker m of
      Left why -> do
        _ <- feedLost f wid ("bad message: " ++ why)
        pure others
      Right msg
        | isEvolveMessage msg -> do
            stepLocked f (machineMessage (feedMachine f) wid msg)
            go ms others
        | otherwise -> go ms (m : others)

-- | A worker's link broke (or it broke the protocol); 'True' when the
-- session is over.
feedLost :: Feeder st -> WorkerId -> String -> IO Bool
feedLost f wid why = do
  known <- atomicModifyIORef' (feedLostSet f) (\m -> (M.insertWith (\_ old -> old) wid why m, M.member wid m))
  unless known $ do
    mapM_ (closeConnection . lentConn) (M.lookup wid (feedLinks f))
    stepLocked f (machineLost (feedMachine f) wid why)
  finished f

-- Step the machine and send what it says while still holding its state,
-- so that messages leave in the order the machine decided them even when
-- several threads step it; a worker found broken meanwhile is handled
-- after the lock is released.
stepLocked :: Feeder st -> (st -> (st, [Out])) -> IO ()
stepLocked f transition = do
  broken <- modifyMVar (feedState f) $ \st -> do
    let (st', outs) = transition st
    broken <- perform f outs
    st' `seq` pure (st', broken)
  mapM_ (\(wid, why) -> feedLost f wid why) broken

finished :: Feeder st -> IO Bool
finished f = do
  done <- machineDone (feedMachine f) <$> readMVar (feedState f)
  failed <- readIORef (feedError f)
  let over = done || failed /= Nothing
  when over $ writeIORef (feedFinished f) True
  pure over

-- Messages to one worker go out together, the last one urgent: the buffer
-- is sent at once and left empty, so no flush timer is armed for it.
perform :: Feeder st -> [Out] -> IO [(WorkerId, String)]
perform f outs = do
  mapM_ failure [ err | Fail err <- outs ]
  let perWorker = M.fromListWith (flip (++)) [ (wid, [msg]) | SendTo wid msg <- outs ]
  broken <- fmap concat $ mapM sendTo (M.toList perWorker)
  pure (broken ++ [ (wid, "bad message: " ++ why) | DropPeer wid why <- outs ])
  where
    failure err = atomicModifyIORef' (feedError f) (\e -> (maybe (Just err) Just e, ()))
    sendTo (wid, msgs) = do
      lost <- M.member wid <$> readIORef (feedLostSet f)
      case M.lookup wid (feedLinks f) of
        Just l | not lost -> do
          let encs = map encodeToWorker msgs
          sent <- try $ do
            sendMessages (lentSender l) Bulk (init encs)
            sendMessage (lentSender l) Urgent (last encs)
          case sent of
            Right () -> pure []
            Left (e :: SomeException) -> pure [(wid, "send failed: " ++ displayException e)]
        _ -> pure []

-- | Send what the session buffered for each worker since the last flush.
flushTouched :: Feeder st -> IO ()
flushTouched f = do
  touched <- atomicModifyIORef' (feedTouched f) (\t -> (S.empty, t))
  forM_ (S.toList touched) $ \wid -> mapM_ (flushIdle . lentSender) (M.lookup wid (feedLinks f))
