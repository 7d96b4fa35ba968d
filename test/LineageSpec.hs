-- | Recovery of evolve states from their lineage, at every depth up to the
-- checkpoint bound and a step past it: a model population evolves call by
-- call with a known pure step, the registry keeps origins and takes
-- checkpoints with the real functions ("Herd.Core.Evolve.Registry",
-- "Herd.Core.Evolve.Checkpoint"), and at a random call every live state is
-- made again from its lineage, as a replay after its worker's loss would,
-- and compared with its true value.
module LineageSpec (spec) where

import qualified Data.ByteString as B
import qualified Data.ByteString.Char8 as BC
import Data.List (foldl')
import qualified Data.Map.Strict as M
import GHC.Fingerprint (Fingerprint (..))
import Herd.Core.Base (TaskRef (..))
import Herd.Core.Evolve.Checkpoint
import Herd.Core.Evolve.Registry
import qualified Herd.Core.Evolve.StateMap as SM
import Herd.Core.Session (Machine (..))
import Herd.Core.Wire (FromWorker (..))
import Test.Hspec
import Test.QuickCheck

-- The model's step: child k of a state with this value, given this input.
stepValue :: Int -> Int -> Int -> Int
stepValue v input k = (v * 31 + input * 7 + k * 101) `mod` 1000003

encodeValue :: Int -> B.ByteString
encodeValue = BC.pack . show

decodeValue :: B.ByteString -> Int
decodeValue = read . BC.unpack

stepRef :: TaskRef
stepRef = TaskRef (Fingerprint 1 2) "step" (Fingerprint 3 4) (Fingerprint 5 6)

-- A population in the model: the registry and every live state's true value.
data Model = Model { mReg :: Registry, mTrue :: M.Map StateId Int, mNext :: Int }

-- One call: each live state gets 0 to 2 children (at least one state
-- survives), then a checkpoint of the states at or past the bound, of
-- which the worker gives some back and loses the rest.
oneCall :: Int -> Model -> Gen Model
oneCall bound m = do
  let live = M.toList (mTrue m)
  counts <- vectorOf (length live) (frequency [(1, pure 0), (4, pure 1), (2, pure 2)])
  input <- chooseInt (0, 99)
  let counts' = if all (== 0) counts then 1 : drop 1 counts else counts
      made = concat [ [ (p, v, k) | k <- [0 .. c - 1] ] | ((p, v), c) <- zip live counts' ]
      ids = [ StateId (fromIntegral (mNext m + j)) | j <- [0 .. length made - 1] ]
      children = [ (c, (p, stepValue v input k, k)) | (c, (p, v, k)) <- zip ids made ]
      origins = foldl' (\o (c, (p, _, k)) -> SM.insert c (ChildOf p stepRef (encodeValue input) k) o)
                       (regOrigin (mReg m)) children
      states = placedAt [ (c, 1) | (c, _) <- children ]
      reg = keepOrigins states origins (mReg m) { regStates = states
                                                 , regDepth = regDepth (mReg m) + 1 }
      truth = M.fromList [ (c, v) | (c, (_, v, _)) <- children ]
  reg' <- checkpoint bound truth reg
  pure (Model reg' truth (mNext m + length made))

checkpoint :: Int -> M.Map StateId Int -> Registry -> Gen Registry
checkpoint bound truth reg = case deepStates bound reg of
  [] -> pure reg
  deep -> do
    let (machine, cp0, _) = checkpointStart [1] deep
    given <- sublistOf (map fst deep)
    let answer cp (StateId k) = fst (machineMessage machine 0 1 (StateReleased k (encodeValue (truth M.! StateId k))) cp)
        cp1 = foldl' answer cp0 given
        (cp2, _) = machineLost machine 0 1 "lost with the rest" cp1
    pure (applyCheckpoint cp2 reg)

-- A state made again from its lineage: the bytes, then each step replayed.
remake :: Registry -> StateId -> Maybe (Int, Int)
remake reg s = do
  (bytes, steps) <- lineage (regOrigin reg) s
  let v = foldl' (\acc (_, input, k) -> stepValue acc (decodeValue input) k) (decodeValue bytes) steps
  pure (v, length steps)

spec :: Spec
spec = describe "evolve recovery from lineage (pure, against a model population)" $ do
  it "makes every live state again exactly, at every depth up to the checkpoint bound and past it" $ property $
    forAll (chooseInt (1, 6)) $ \bound ->
    forAll (chooseInt (0, bound + 2)) $ \calls ->
    forAll (chooseInt (1, 12)) $ \n -> do
      let start = Model emptyRegistry { regStates = placedAt [ (StateId (fromIntegral i), 1) | i <- [1 .. n] ]
                                      , regOrigin = SM.fromList [ (StateId (fromIntegral i), Seen (encodeValue (i * 13))) | i <- [1 .. n] ] }
                        (M.fromList [ (StateId (fromIntegral i), i * 13) | i <- [1 .. n] ]) (n + 1)
      end <- foldl' (\g _ -> g >>= oneCall bound) (pure start) [1 .. calls]
      let rebuilt = M.mapWithKey (\s _ -> remake (mReg end) s) (mTrue end)
      pure $ counterexample (show (M.toList rebuilt)) $
        M.map (fmap fst) rebuilt === M.map Just (mTrue end)
        .&&. all (maybe False ((<= calls) . snd)) (M.elems rebuilt)
        .&&. regDepth (mReg end) >= maximum (0 : map (maybe 0 snd) (M.elems rebuilt))

  it "replays no more than the bound's steps once every deep state was given back" $ property $
    forAll (chooseInt (1, 5)) $ \bound ->
    forAll (chooseInt (bound, 3 * bound)) $ \calls ->
      let start = Model emptyRegistry { regStates = placedAt [(StateId 1, 1)], regOrigin = SM.fromList [(StateId 1, Seen (encodeValue 5))] }
                        (M.fromList [(StateId 1, 5)]) 2
          -- one child per call, every deep state given back
          call m =
            let [(p, v)] = M.toList (mTrue m)
                c = StateId (fromIntegral (mNext m))
                origins = SM.insert c (ChildOf p stepRef (encodeValue 3) 0) (regOrigin (mReg m))
                states = placedAt [(c, 1)]
                reg = keepOrigins states origins (mReg m) { regStates = states, regDepth = regDepth (mReg m) + 1 }
                truth = M.fromList [(c, stepValue v 3 0)]
                (machine, cp0, _) = checkpointStart [1] (deepStates bound reg)
                cp1 = foldl' (\cp (StateId k, _) -> fst (machineMessage machine 0 1 (StateReleased k (encodeValue (truth M.! StateId k))) cp))
                             cp0 (deepStates bound reg)
            in Model (applyCheckpoint cp1 reg) truth (mNext m + 1)
          end = foldl' (\m _ -> call m) start [1 .. calls]
      in case M.toList (mTrue end) of
        [(s, v)] -> fmap fst (remake (mReg end) s) === Just v
                      .&&. counterexample "replays the bound or more" (maybe False ((< bound) . snd) (remake (mReg end) s))
        other -> counterexample (show other) False
