-- | A model of two-level evolve for the specs: host agents running their
-- real pure machine ("Herd.Core.Agent.Evolve") over workers running theirs
-- ("Herd.Core.Worker.Evolve"), messages in order per worker and
-- interleaved at random, jobs ending at random, workers (and, for
-- 'drive', whole hosts) lost at random. Each state's step is a known pure
-- function ('childValue', 'childCount'), so every answer can be checked.
module HostModel
  ( stepRef
  , childValue
  , childCount
  , enc
  , dec
  , Worker (..)
  , World (..)
  , event
  , tick
  , runCall
  , hostWith
  , hostWithStates
  , evolveCall
  , heard
  , HostLoss (..)
  , drive
  ) where

import qualified Data.ByteString as B
import qualified Data.ByteString.Char8 as BC
import Data.List (foldl')
import qualified Data.Map.Strict as M
import GHC.Fingerprint (Fingerprint (..))
import Herd.Core.Agent.Evolve
import Herd.Core.Base (TaskRef (..), WorkerId)
import Herd.Core.Evolve.Hosts
import Herd.Core.Worker.Evolve
import Herd.Core.Wire (FromWorker (..), ToWorker (..))
import Herd.Core.Wire.HostCall
import Herd.Core.Error (HerdError)
import Test.QuickCheck

-- | The model's evolve function's reference.
stepRef :: TaskRef
stepRef = TaskRef (Fingerprint 1 2) "step" (Fingerprint 3 4) (Fingerprint 5 6)

-- | The model's step: a state of value v given input i has (v + i) mod 3
-- children, child k of value childValue v i k (its output is its value).
childValue :: Int -> Int -> Int -> Int
childValue v i k = (v * 31 + i * 7 + k * 101) `mod` 1000003

childCount :: Int -> Int -> Int
childCount v i = (v + i) `mod` 3

enc :: Int -> B.ByteString
enc = BC.pack . show

dec :: B.ByteString -> Int
dec = read . BC.unpack

-- | One worker: its real holder, and its links' messages in flight.
data Worker = Worker { wHeld :: Held (), wIn :: [ToWorker], wOut :: [FromWorker] }

data World = World
  { wHost    :: HostPopulation
  , wWorkers :: M.Map WorkerId Worker
  , wToMaster :: [HostCallMessage]
  , wDropped :: [String]
  , wClock   :: Double
  }

-- | Carry out the agent's outs.
apply :: [HostOut] -> World -> World
apply outs w = foldl' one w outs
  where
    one world o = case o of
      ToLocal v m -> world { wWorkers = M.adjust (\x -> x { wIn = wIn x ++ [m] }) v (wWorkers world) }
      ToMasterCall m -> world { wToMaster = wToMaster world ++ [m] }
      DropLocal v why -> world { wDropped = (show v ++ ": " ++ why) : wDropped world }

-- | One event of a host's agent, its outs carried out.
event :: HostEvent -> World -> World
event ev w = let (h, outs) = stepHost (wClock w) ev (wHost w) in apply outs w { wHost = h }

-- | A job of a worker, done the model's way.
finish :: Job () -> Finished
finish job = case job of
  Evolve _ bytes input () ->
    let v = dec bytes; i = dec input
    in Children 1000 [ (enc c, enc c) | k <- [0 .. childCount v i - 1], let c = childValue v i k ]
  Replay _ root path -> Replayed (enc (foldl' (\v (_, input, k) -> childValue v (dec input) k) (dec root) path))

-- | One random thing happens; 'Nothing' when nothing can.
tick :: Int -> World -> Gen (Maybe World)
tick losses w = do
  let ws = M.toList (wWorkers w)
      deliverable = [ v | (v, x) <- ws, not (null (wIn x)) ]
      answering = [ v | (v, x) <- ws, not (null (wOut x)) ]
      working = [ v | (v, x) <- ws, heldBusy (wHeld x) || maybe False (const True) (heldTake (wHeld x)) ]
      choices = concat
        [ [ (4, deliver v) | v <- deliverable ]
        , [ (4, answer v) | v <- answering ]
        , [ (3, work v) | v <- working ]
        , [ (1, pure (event RoundEnded w)) ]
        , [ (1, lose v) | losses > 0, length ws > 1, (v, _) <- ws ] ]
  if null deliverable && null answering && null working then pure Nothing
  else Just . (\x -> x { wClock = wClock x + 0.001 }) <$> frequency [ (n, g) | (n, g) <- choices ]
  where
    deliver v = pure $ let x = wWorkers w M.! v
                           m : rest = wIn x
                           found = case m of { EvolveWith _ -> Just (Right ()); _ -> Nothing }
                           (h, said) = heldMessage m found (wHeld x)
                       in w { wWorkers = M.insert v x { wHeld = h, wIn = rest, wOut = wOut x ++ said } (wWorkers w) }
    answer v = pure $ let x = wWorkers w M.! v
                          m : rest = wOut x
                      in event (LocalSaid v m) w { wWorkers = M.insert v x { wOut = rest } (wWorkers w) }
    work v = pure $ let x = wWorkers w M.! v in case (heldBusy (wHeld x), heldTake (wHeld x)) of
      (False, Just (Left said, h)) -> w { wWorkers = M.insert v x { wHeld = h, wOut = wOut x ++ [said] } (wWorkers w) }
      (False, Just (Right job, h)) ->
        let (h', said) = heldFinish (finish job) h
        in w { wWorkers = M.insert v x { wHeld = h', wOut = wOut x ++ said } (wWorkers w) }
      _ -> w
    lose v = pure (event (LocalLost v "killed by the test") w { wWorkers = M.delete v (wWorkers w) })

-- | Run until the agent has ended the call (or nothing more can happen).
runCall :: Int -> Int -> World -> Gen World
runCall _ 0 w = pure w
runCall losses fuel w
  | any ended (wToMaster w) = pure (event RoundEnded w)
  | otherwise = do
      next <- tick losses w
      case next of
        Nothing -> pure (event RoundEnded w)
        Just w' -> runCall (if M.size (wWorkers w') < M.size (wWorkers w) then losses - 1 else losses) (fuel - 1) w'
  where ended m = case m of { HostCallEnded {} -> True; _ -> False }

-- | A host of this many workers given these states' values (ids from 1).
hostWith :: Int -> [Int] -> World
hostWith k values =
  let ws = [1 .. fromIntegral k]
      w0 = World newHostPopulation (M.fromList [ (v, Worker (newHeld (fromIntegral v)) [] []) | v <- ws ]) [] [] 0
      joined = foldl' (\w v -> event (LocalJoined v) w) w0 ws
      added = event (MasterSaid (HostStatesAdd 1 [ (i, enc x) | (i, x) <- zip [1 ..] values ])) joined
  in added { wToMaster = [] }

-- | The master's message starting a call on these states, with these inputs.
evolveCall :: Int -> [(Int, Int)] -> World -> World
evolveCall n inputs w = event (MasterSaid (HostEvolve (fromIntegral n) stepRef 1000 [ (fromIntegral s, enc i) | (s, i) <- inputs ])) w

-- | What the master heard: the states reported (each with its children's
-- values), and how the call ended.
heard :: World -> ([(Int, [(Int, Int)])], [Either String CallSummary])
heard w = ( [ (fromIntegral s, [ (fromIntegral c, dec o) | (c, o) <- kids ]) | HostEvolved _ done <- wToMaster w, (s, kids) <- done ]
          , [ either (Left . show) Right e | HostCallEnded _ e <- wToMaster w ] )

-- | A whole host lost during 'drive': none, or this host after this many
-- of the driver's steps.
data HostLoss = NoHostLoss | HostLostAfter !Int !Int
  deriving (Eq, Show)

-- | Run the master's call over these hosts until it is done or fails:
-- each step either steps every host at random (each losing up to its
-- count of workers) or hands one host's oldest message to the call; the
-- host of a 'HostLostAfter' is removed at its step, unsent messages and
-- all, and the call hears of the loss.
drive :: M.Map Int Int -> HostLoss -> Int -> M.Map Int World -> Either HerdError HostCall
      -> Gen (M.Map Int World, Either HerdError HostCall)
drive _ _ 0 ws r = pure (ws, r)
drive losses hostLoss fuel ws r = case r of
  Left _ -> pure (ws, r)
  Right call | HostLostAfter h 0 <- hostLoss, M.member h ws ->
    drive losses NoHostLoss fuel (M.delete h ws) (Right (hostCallLost h "killed by the test" call))
  Right call | hostCallDone call -> pure (ws, r)
  Right call -> do
    let pending = [ h | (h, w) <- M.toList ws, not (null (wToMaster w)) ]
        hostLoss' = case hostLoss of { HostLostAfter h k -> HostLostAfter h (max 0 (k - 1)); x -> x }
    stepped <- mapM (\(h, w) -> (,) h <$> tick (M.findWithDefault 0 h losses) w) (M.toList ws)
    let movable = [ (h, w') | (h, Just w') <- stepped ]
    choice <- if null pending && null movable then pure Nothing
              else Just <$> frequency ([ (2, pure (Left h)) | h <- pending ] ++ [ (3, pure (Right hw)) | hw <- movable ])
    case choice of
      Nothing -> pure (M.map (event RoundEnded) ws, r)   -- every host is waiting: the round ends
      Just (Left h) ->
        let w = ws M.! h
            m : rest = wToMaster w
        in drive losses hostLoss' (fuel - 1) (M.insert h w { wToMaster = rest } ws) (hostCallReport h m call)
      Just (Right (h, w')) ->
        let lost = M.size (wWorkers w') < M.size (wWorkers (ws M.! h))
            losses' = if lost then M.adjust (subtract 1) h losses else losses
        in drive losses' hostLoss' (fuel - 1) (M.insert h w' ws) (Right call)

-- | A host of this many workers (numbered from base + 1: the master numbers
-- every worker of the cluster apart) holding these states (ids and values).
hostWithStates :: Int -> Int -> [(Int, Int)] -> World
hostWithStates base k states =
  let ws = [fromIntegral base + 1 .. fromIntegral (base + k)]
      w0 = World newHostPopulation (M.fromList [ (v, Worker (newHeld (fromIntegral v)) [] []) | v <- ws ]) [] [] 0
      joined = foldl' (\w v -> event (LocalJoined v) w) w0 ws
      added = if null states then joined
              else event (MasterSaid (HostStatesAdd 1 [ (fromIntegral i, enc x) | (i, x) <- states ])) joined
  in added { wToMaster = [] }
