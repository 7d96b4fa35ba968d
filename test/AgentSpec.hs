-- | The host agent's machine ("Herd.Core.Agent") against a model of its
-- workers: random hellos, numberings in any order and late, entries from
-- the master for any worker (numbered, gone or never seen), workers'
-- packets with parts for any worker, losses, stops and limits. Every
-- message is labelled, so each one is followed through the machine.
module AgentSpec (spec) where

import Data.List (foldl')
import qualified Data.ByteString.Char8 as BC
import qualified Data.Map.Strict as M
import qualified Data.Set as S
import qualified Data.Text as T
import Herd.Core.Agent
import Herd.Core.Wire.Host (GoneReason (..), HostControl (..), HostLimit (..))
import Test.Hspec
import Test.QuickCheck

-- What happens to the agent, before ids are chosen.
data Action
  = Hello
  | Number Int          -- ^ the master numbers the k-th token it was asked for (any order)
  | Late Int            -- ^ the k-th pending token timed out
  | NumberUnknown       -- ^ the master numbers a token nobody asked for now
  | Entry Int           -- ^ an entry for worker k (1..8: numbered or not)
  | Packet Int [Int] Int  -- ^ a packet from worker k: parts for these workers, and this many other messages
  | Gone Int
  | Stop Int
  | Limit
  | Share
  deriving (Show)

instance Arbitrary Action where
  arbitrary = frequency
    [ (4, pure Hello), (4, Number <$> choose (0, 5)), (1, Late <$> choose (0, 5)), (1, pure NumberUnknown)
    , (6, Entry <$> worker), (5, Packet <$> worker <*> resize 3 (listOf worker) <*> choose (0, 2))
    , (2, Gone <$> worker), (1, Stop <$> worker), (1, pure Limit), (1, pure Share) ]
    where worker = choose (1, 8)

-- The model: what the master asked, what is numbered and live, and what
-- the trace said so far.
data Model = Model
  { mAsked    :: [Token]                -- ^ tokens asked and not yet numbered or late
  , mPids     :: M.Map Token Int
  , mLive     :: S.Set Int              -- ^ numbered, not gone, not stopped
  , mNumbered :: S.Set Int              -- ^ ever numbered
  , mLostOnce :: M.Map Int Int          -- ^ 'WorkerGone's the master heard, per worker
  , mShouldGo :: M.Map Int Int          -- ^ 'WorkerGone's the master should hear
  , mNextWid  :: Int
  , mNextPid  :: Int
  , mLabel    :: Int
  , mTokens   :: [Token]                -- ^ every token asked for
  , mAgent    :: Agent
  }

start :: Model
start = Model [] M.empty S.empty S.empty M.empty M.empty 1 1000 0 [] newAgent

-- Turn an action into an event for the current model.
eventOf :: Model -> Action -> (Model, AgentEvent Int)
eventOf m act = case act of
  Hello -> (m { mNextPid = mNextPid m + 1 }, LocalHello (mNextPid m) 0)
  Number k | not (null (mAsked m)) ->
    let t = mAsked m !! (k `mod` length (mAsked m))
    in (m { mNextWid = mNextWid m + 1 }, ControlCame (WorkerAdded t (fromIntegral (mNextWid m))))
  Late k | not (null (mAsked m)) -> (m, NumberingLate (mAsked m !! (k `mod` length (mAsked m))))
  NumberUnknown -> (m { mNextWid = mNextWid m + 1 }, ControlCame (WorkerAdded 999999 (fromIntegral (mNextWid m))))
  Entry w -> (m { mLabel = mLabel m + 1 }, EntryCame w (mLabel m))
  Packet w dests rest ->
    let labels = [mLabel m ..]
        parts = zip dests labels
        others = take rest (drop (length dests) labels)
    in (m { mLabel = mLabel m + length dests + rest }, LocalPacket w parts others)
  Gone w -> (m, LocalGone w (GoneDied (T.pack "killed")))
  Stop w -> (m, ControlCame (StopWorker (fromIntegral w)))
  Limit -> (m, ControlCame (HostMemoryLimit (HostLimitBytes 1000000)))
  Share -> (m, ControlCame (HostShare 7 3 (BC.pack "abc")))
  _ -> (m, NumberingLate 123456)   -- nothing to number: a late token nobody has

-- One step: the machine's commands, checked against the model; the
-- failures found, and the model after.
check :: Model -> Action -> (Model, [String])
check m0 act =
  let (m, ev) = eventOf m0 act
      (agent', cmds) = stepAgent ev (mAgent m)
      live = mLive m
      gone = [ w | Control (WorkerGone w _) <- cmds ]
      m1 = m { mAgent = agent'
             , mLostOnce = foldl' (\acc w -> M.insertWith (+) (fromIntegral w) 1 acc) (mLostOnce m) gone }
      routed = [ (w, p) | ToWorker w p <- cmds ]
      failures = case ev of
        LocalHello pid _ -> case cmds of
          [AskNumber t pid' _] | pid' == pid, t `notElem` mTokens m -> []
          _ -> ["a hello should ask for one fresh number: " ++ show cmds]
        EntryCame w p
          | S.member w live -> [ "an entry for live worker " ++ show w ++ " went " ++ show cmds | cmds /= [ToWorker w p] ]
          | otherwise -> [ "an entry for worker " ++ show w ++ ", not live here, went " ++ show cmds | not (null cmds) ]
        LocalPacket w parts rest
          | S.member w live ->
              let want = [ ToWorker d p | (d, p) <- parts, S.member d live ] ++ map (ToMaster w) rest
              in [ "worker " ++ show w ++ "'s packet went " ++ show cmds ++ ", not " ++ show want | cmds /= want ]
          | otherwise -> [ "a packet of worker " ++ show w ++ ", not live here, went " ++ show cmds | not (null cmds) ]
        -- a limit's budgets and a share's value go to exactly the live workers
        ControlCame (HostMemoryLimit l) ->
          [ "a limit went " ++ show cmds | cmds /= [SendBudgets l (S.size live) (S.toList live)] ]
        ControlCame c@(HostShare {}) ->
          [ "a share's piece went " ++ show cmds | cmds /= [HoldSharePiece c (S.toList live)] ]
        ControlCame (WorkerAdded t wid) | t `elem` mAsked m, Just pid <- M.lookup t (mPids m) ->
          let w = fromIntegral wid
              want = [OpenLocal w pid, SendBudgets (agentLimit (mAgent m)) (S.size live + 1) [w], SendHeldShares w, WelcomeLocal t w]
          in [ "a numbered worker should be set up, told its budget and the shares, then welcomed: " ++ show cmds | cmds /= want ]
        _ -> [ "worker " ++ show w ++ " was sent a message while not live" | (w, _) <- routed, not (S.member w live) ]
      m2 = case ev of
        LocalHello pid _ -> m1 { mAsked = mAsked m1 ++ [ t | AskNumber t _ _ <- cmds ]
                               , mTokens = mTokens m1 ++ [ t | AskNumber t _ _ <- cmds ]
                               , mPids = M.union (mPids m1) (M.fromList [ (t, pid) | AskNumber t _ _ <- cmds ]) }
        NumberingLate t -> m1 { mAsked = filter (/= t) (mAsked m1) }
        ControlCame (WorkerAdded t wid)
          | t `elem` mAsked m1 -> m1 { mAsked = filter (/= t) (mAsked m1), mLive = S.insert (fromIntegral wid) live
                                     , mNumbered = S.insert (fromIntegral wid) (mNumbered m1) }
          -- the master numbered a worker the host no longer has: it must hear that it is gone
          | otherwise -> m1 { mShouldGo = M.insertWith (+) (fromIntegral wid) 1 (mShouldGo m1) }
        LocalGone w _ | S.member w live -> m1 { mLive = S.delete w live, mShouldGo = M.insertWith (+) w 1 (mShouldGo m1) }
        ControlCame (StopWorker w) -> m1 { mLive = S.delete (fromIntegral w) live }
        _ -> m1
  in (m2, failures)

-- Run the actions; every step's failures, then the whole run's.
runAll :: [Action] -> [String]
runAll acts =
  let (m, failures) = foldl' (\(mm, fs) a -> let (mm', f) = check mm a in (mm', fs ++ f)) (start, []) acts
      goneRight = [ "worker " ++ show w ++ ": the master heard WorkerGone " ++ show (M.findWithDefault 0 w (mLostOnce m))
                    ++ " times, not " ++ show (M.findWithDefault 0 w (mShouldGo m))
                  | w <- S.toList (M.keysSet (mLostOnce m) `S.union` M.keysSet (mShouldGo m))
                  , M.findWithDefault 0 w (mLostOnce m) /= M.findWithDefault 0 w (mShouldGo m) ]
      holds = [ "the machine holds " ++ show (map fst (agentWorkers (mAgent m))) ++ ", the model " ++ show (S.toList (mLive m))
              | S.fromList (map fst (agentWorkers (mAgent m))) /= mLive m ]
  in failures ++ goneRight ++ holds

spec :: Spec
spec = describe "the host agent's machine" $ do
  it "routes each entry and part only to a live worker, once and in order, the rest of a packet up under its sender, and budgets and shares to exactly the live workers" $
    withMaxSuccess 500 $ \acts -> let fs = runAll acts in counterexample (unlines (take 5 fs)) (null fs)

  it "tells the master once of each worker it lost, never of one it was told to stop" $ do
    let acts = [Hello, Hello, Number 0, Number 0, Gone 1, Gone 1, Stop 2, Gone 2]
        (m, fs) = foldl' (\(mm, f) a -> let (mm', f') = check mm a in (mm', f ++ f')) (start, []) acts
    fs `shouldBe` []
    mLostOnce m `shouldBe` M.fromList [(1, 1)]

  it "sets up, budgets, hands the shares to and welcomes a worker the master numbered, before anything reaches it" $ do
    let (a1, c1) = stepAgent (LocalHello 42 3) newAgent
    c1 `shouldBe` ([AskNumber 0 42 3] :: [AgentCommand Int])
    let (a2, c2) = stepAgent (ControlCame (WorkerAdded 0 7)) a1
    c2 `shouldBe` ([OpenLocal 7 42, SendBudgets NoHostLimit 1 [7], SendHeldShares 7, WelcomeLocal 0 7] :: [AgentCommand Int])
    snd (stepAgent (EntryCame 7 (5 :: Int)) a2) `shouldBe` [ToWorker 7 5]
    snd (stepAgent (EntryCame 8 (5 :: Int)) a2) `shouldBe` []
