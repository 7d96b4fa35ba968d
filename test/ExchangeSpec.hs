-- | Keyed reductions' plan ("Herd.Core.Exchange") against a model of
-- workers and the master's relay, under random message orders, losses
-- and joins: every partition comes back combined from exactly one part of
-- every group, in group order, and a group that keeps killing its workers
-- fails the reduction naming it.
module ExchangeSpec (spec) where

import qualified Data.ByteString.Char8 as BC
import Data.List (foldl')
import qualified Data.Map.Strict as M
import qualified Data.Text as T
import Data.Word (Word64)
import GHC.Fingerprint (Fingerprint (..))
import Herd.Core.Base (TaskRef (..), WorkerId)
import Herd.Core.Error (HerdError (..))
import Herd.Core.Exchange
import Herd.Core.Wire (FromWorker (..), ToWorker (..))
import Test.Hspec
import Test.QuickCheck

-- What happens next in the model.
data Op = Deliver Int | ToMaster Int | Lose Int | Join
  deriving Show

instance Arbitrary Op where
  arbitrary = frequency [(6, Deliver <$> choose (0, 9)), (6, ToMaster <$> choose (0, 9)), (1, Lose <$> choose (0, 9)), (1, pure Join)]

-- A worker of the model: messages from the master not yet handled, its
-- words not yet read by the master, and the parts it holds.
data W = W { wIn :: [ToWorker], wOut :: [FromWorker], wHeld :: M.Map (Word64, Int) (M.Map Int String) }

data Model = Model
  { mX :: Maybe Exchange, mWorkers :: M.Map WorkerId W, mNext :: WorkerId
  , mAnswer :: Maybe (Either HerdError [BC.ByteString]), mLosses :: Int }

ref :: TaskRef
ref = TaskRef (Fingerprint 1 2) "reducer" (Fingerprint 3 4) (Fingerprint 5 6)

-- A group's part of a partition, as the model's reducer makes it.
part :: Int -> Int -> String
part g j = "g" ++ show g ++ "p" ++ show j

apply :: [XOut] -> Model -> Model
apply outs m = foldl' one m outs
  where
    one md (XSend w msg) = md { mWorkers = M.adjust (\x -> x { wIn = wIn x ++ [msg] }) w (mWorkers md) }
    one md (XEnded r) = md { mAnswer = Just r }

-- The master reads a worker's next word: a 'Forward' is relayed (to a
-- worker gone it is dropped), the rest go to the exchange.
toMaster :: WorkerId -> Model -> Model
toMaster w m = case M.lookup w (mWorkers m) of
  Just x | msg : rest <- wOut x ->
    let m1 = m { mWorkers = M.insert w x { wOut = rest } (mWorkers m) }
    in case msg of
         Forward dest xid g j bytes -> apply [XSend (fromIntegral dest) (PartIn xid g j bytes) | M.member (fromIntegral dest) (mWorkers m1)] m1
         _ -> case mX m1 of
           Just ex -> let (ex', outs) = exchangeMessage w msg ex in apply outs m1 { mX = ex' }
           Nothing -> m1
  _ -> m

-- A worker handles its next message as a real one would.
deliver :: WorkerId -> Model -> Model
deliver w m = case M.lookup w (mWorkers m) of
  Just x | msg : rest <- wIn x ->
    let x1 = x { wIn = rest }
        say ws = x1 { wOut = wOut x1 ++ ws }
        x2 = case msg of
          GroupRun xid g _ _ targets _ ->
            say ([ Forward dest xid g j (BC.pack (part (fromIntegral g) (fromIntegral j))) | (j, dest) <- targets ] ++ [GroupSent xid g])
          PartIn xid g j bytes ->
            let key = (xid, fromIntegral j)
                held = M.insertWith (\_ old -> old) (fromIntegral g) (BC.unpack bytes) (M.findWithDefault M.empty key (wHeld x1))
            in (say [PartHeld xid g j]) { wHeld = M.insert key held (wHeld x1) }
          PartitionCombine xid j _ groups ->
            let held = M.findWithDefault M.empty (xid, fromIntegral j) (wHeld x1)
            in if M.size held == fromIntegral groups
                 then say [PartitionDone xid j (BC.pack (concat (M.elems held)))]
                 else say [PartitionThrew xid j (T.pack "parts missing")]
          ExchangeEnd xid -> x1 { wHeld = M.filterWithKey (\(x', _) _ -> x' /= xid) (wHeld x1) }
          _ -> x1
    in m { mWorkers = M.insert w x2 (mWorkers m) }
  _ -> m

lose :: Bool -> WorkerId -> Model -> Model
lose died w m
  | not (M.member w (mWorkers m)) = m
  | otherwise =
      let m1 = m { mWorkers = M.delete w (mWorkers m), mLosses = mLosses m + 1 }
      in case mX m1 of
           Just ex -> let (ex', outs) = exchangeLost w died "killed" ex in apply outs m1 { mX = ex' }
           Nothing -> m1

join :: Model -> Model
join m =
  let w = mNext m
      m1 = m { mWorkers = M.insert w (W [] [] M.empty) (mWorkers m), mNext = w + 1 }
  in case mX m1 of
       Just ex -> let (ex', outs) = exchangeJoined w ex in apply outs m1 { mX = Just ex' }
       Nothing -> m1

pick :: Int -> [WorkerId] -> Maybe WorkerId
pick _ [] = Nothing
pick k ws = Just (ws !! (k `mod` length ws))

runOp :: Model -> Op -> Model
runOp m op = case op of
  Deliver k -> maybe m (`deliver` m) (pick k [ w | (w, x) <- M.toList (mWorkers m), not (null (wIn x)) ])
  ToMaster k -> maybe m (`toMaster` m) (pick k [ w | (w, x) <- M.toList (mWorkers m), not (null (wOut x)) ])
  Lose k | mLosses m < 4, M.size (mWorkers m) > 1 -> maybe m (\w -> lose True w m) (pick k (M.keys (mWorkers m)))
         | otherwise -> m
  Join | M.size (mWorkers m) < 6 -> join m
       | otherwise -> m

-- Everything in flight, delivered until nothing moves, taking the
-- workers' inboxes and outboxes in turn.
drain :: Int -> Model -> Model
drain 0 m = m
drain n m = case moves of
  [] -> m
  _ -> drain (n - 1) ((moves !! (n `mod` length moves)) m)
  where
    moves = [ deliver w | (w, x) <- M.toList (mWorkers m), not (null (wIn x)) ]
            ++ [ toMaster w | (w, x) <- M.toList (mWorkers m), not (null (wOut x)) ]

start :: Int -> Int -> Int -> Bool -> Model
start workers groups maxDeaths tree =
  let ws = [1 .. workers]
      job = ExchangeJob ref [ BC.pack (show g) | g <- [0 .. groups - 1] ] maxDeaths Nothing tree Nothing
      Right (ex, outs) = exchangeStart 7 job ws
  in apply outs (Model (Just ex) (M.fromList [ (w, W [] [] M.empty) | w <- ws ]) (workers + 1) Nothing 0)

spec :: Spec
spec = describe "the keyed reduction's exchange plan" $ do
  it "combines every partition from exactly one part of every group, in order, under random losses and joins" $
    property $ \(Positive w0) (Positive g0) (tree :: Bool) (ops :: [Op]) ->
      let workers = 1 + w0 `mod` 4
          groups = 1 + g0 `mod` 12
          m = drain 100000 (foldl' runOp (start workers groups 100 tree) ops)
          -- a tree's partition j takes the j-th block of groups, in order
          takes j g = not tree || g * workers `div` groups == j
          expected = [ BC.pack (concat [ part g j | g <- [0 .. groups - 1], takes j g ]) | j <- [0 .. workers - 1] ]
      in classify tree "a tree" $ classify (mLosses m > 0) "with losses" $ classify (mNext m > workers + 1) "with joins" $
           counterexample (show (mAnswer m)) (mAnswer m === Just (Right expected))

  it "completes a reduction of 512 groups on 128 workers, 16,384 parts, in one pass of the model" $ do
    let workers = 128
        groups = 512
        m = drain 10000000 (start workers groups 3 False)
    fmap (fmap length) (mAnswer m) `shouldBe` Just (Right workers)

  it "sends no group to a worker near its memory limit while another can take one" $ do
    let m0 = start 2 8 3 False
        Just ex0 = mX m0
        runsTo outs = [ w | XSend w (GroupRun {}) <- outs ]
        -- worker 2 is held; it finishes a group: nothing new for it
        (ex1, _) = exchangeHeld 2 True ex0
        (Just ex2, outs1) = exchangeMessage 2 (GroupSent 7 2) ex1
        -- worker 1 finishes one: the next group goes to 1 alone
        (Just ex3, outs2) = exchangeMessage 1 (GroupSent 7 0) ex2
        -- worker 1 held too: every worker is, so all take work again
        (ex4, _) = exchangeHeld 1 True ex3
        (_, outs3) = exchangeMessage 2 (GroupSent 7 3) ex4
    (runsTo outs1, runsTo outs2) `shouldBe` ([], [1])
    runsTo outs3 `shouldBe` [2, 2]

  it "fails naming the group that killed more workers than allowed" $ do
    -- group 0 kills whoever runs it: two workers, one death allowed
    -- (the master has read every word before a worker is killed, so it
    -- knows which group was running)
    let killing :: Int -> Model -> Model
        killing 0 m = m
        killing n m
          | w : _ <- [ w | (w, x) <- M.toList (mWorkers m), not (null (wOut x)) ] = killing (n - 1) (toMaster w m)
          | w : _ <- [ w | (w, x) <- M.toList (mWorkers m), GroupRun _ 0 _ _ _ _ : _ <- [wIn x] ] = killing (n - 1) (lose True w m)
          | w : _ <- [ w | (w, x) <- M.toList (mWorkers m), not (null (wIn x)) ] = killing (n - 1) (deliver w m)
          | otherwise = m
        m1 = killing 1000 (join (join (start 1 3 1 False)))
    case mAnswer m1 of
      Just (Left (TaskKilledWorkers 0 _ deaths _)) -> deaths `shouldBe` 2
      other -> expectationFailure ("expected group 0 to be named, got " ++ show other)

  it "fails when no worker is left" $ do
    let m = start 1 2 5 False
        Just ex = mX m
        (ex', _) = exchangeLost 1 False "gone" ex
    fmap exchangeStarved ex' `shouldBe` Just (Just (XEnded (Left (AllWorkersLost "every worker of a keyed reduction was lost"))))

