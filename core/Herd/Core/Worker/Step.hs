-- | The worker's side of the farm protocol as a pure step: what to answer
-- to 'Herd.Wire.RunBatch' and 'Herd.Wire.Args' messages, given the
-- outcomes of the runs of calls the loop makes. The loop ("Herd.Node")
-- looks functions up, calls them and reads the clock; every decision is
-- here, so the same step can drive real workers and simulated ones, and a
-- property can replay any sequence of messages without a socket.
--
-- Promises (checked by properties in "WorkerStepSpec"): every batch
-- started is answered exactly once: with 'Herd.Wire.BatchDone' after one
-- result per argument, with 'Herd.Wire.TaskThrew' naming the position of
-- the first task that threw (after the results before it), with
-- 'Herd.Wire.BatchRejected' when the function cannot run here or an
-- argument does not decode, or with 'Herd.Wire.BatchStopped' when the
-- master cancelled it before its end ('cancel', or a run 'Stopped'); a
-- cancel of a batch that already ended is not answered. Arguments outside any batch, more arguments
-- than the batch holds, or a batch started before the last one's
-- arguments all came, break the protocol.
module Herd.Core.Worker.Step
  ( Batches
  , noBatch
  , Verdict (..)
  , Outcome (..)
  , startBatch
  , arguments
  , applied
  , cancel
  , currentBatch
  ) where

import qualified Data.Text as T
import Data.Word (Word64)
import Herd.Core.Packet.Policy (Urgency (..))
import Herd.Core.Wire (FromWorker (..))

-- The batch whose arguments are arriving; @r@ is the function to run.
data Current r = Current
  { curBatch   :: !Word64
  , curRunner  :: !(Maybe r)  -- ^ 'Nothing': rejected or failed, skip the rest
  , curLeft    :: !Int        -- ^ arguments still to come
  , curPos     :: !Int        -- ^ position of the next argument
  , curRun     :: !Int        -- ^ arguments of the run being applied
  , curStarted :: !Double     -- ^ when its first argument was taken up
  , curName    :: !String     -- ^ the function's name, for messages
  }

-- | The worker's farm state: the batch in progress, if any. Built
-- strictly: forcing the state forces the time it holds, so a loop that
-- reads the clock lazily reads it when it steps, not later.
newtype Batches r = Batches (Maybe (Current r))

-- The state of a batch in progress, forced.
inProgress :: Current r -> Batches r
inProgress c = c `seq` Batches (Just c)

-- | No batch yet.
noBatch :: Batches r
noBatch = Batches Nothing

-- | What the loop must do.
data Verdict r
  = Reply !Urgency !FromWorker
    -- ^ send this to the master
  | Apply r !Int !Int
    -- ^ call the function on the run of arguments just received (its
    -- first position in the batch, and how many); send the results, and
    -- feed the outcome back with 'applied'
  | Broken String
    -- ^ the master broke the protocol: stop

-- | How calling the function on a run of arguments went. Positions are
-- within the run; the results before a failed position were sent.
data Outcome
  = Computed                   -- ^ every result was sent
  | Undecodable !Int String    -- ^ the argument at this position did not decode
  | Threw !Int String          -- ^ the function (or forcing its result) threw on this one
  | Stopped                    -- ^ the run was stopped by a cancel of its batch (the results so far were sent)

-- | A batch of this many tasks starts, of a function found here ('Right')
-- or not ('Left', why), named for messages.
startBatch :: Double -> Word64 -> Either String r -> Int -> String -> Batches r -> (Batches r, [Verdict r])
startBatch now bid found count name (Batches current) = case current of
  Just c | curLeft c > 0 ->
    ( Batches current
    , [Broken ("master started batch " ++ show bid ++ " while batch " ++ show (curBatch c)
               ++ " still had arguments to come")] )
  _ -> case found of
    Left why -> (inProgress (Current bid Nothing count 0 0 now name), [Reply Urgent (BatchRejected bid (T.pack why))])
    Right r -> ( inProgress (Current bid (Just r) count 0 0 now name)
               , [ Reply Bulk (BatchDone bid 0) | count == 0 ] )

-- | A run of this many arguments arrived.
arguments :: Double -> Int -> Batches r -> (Batches r, [Verdict r])
arguments now k (Batches current) = case current of
  Just c | k < 1 -> (Batches current, [Broken ("master sent an empty run of arguments for batch " ++ show (curBatch c))])
         | k > curLeft c ->
             ( Batches current
             , [Broken ("master sent " ++ show k ++ " arguments for batch " ++ show (curBatch c)
                        ++ ", which has " ++ show (curLeft c) ++ " to come")] )
         | otherwise -> case curRunner c of
             -- a rejected or failed batch: its remaining arguments are skipped
             Nothing -> (inProgress (advance k c), [])
             Just r -> ( inProgress c { curStarted = if curPos c == 0 then now else curStarted c, curRun = k }
                       , [Apply r (curPos c) k] )
  Nothing -> (Batches current, [Broken "master sent arguments outside any batch"])

-- | The outcome of the run 'Apply' asked for.
applied :: Double -> Outcome -> Batches r -> (Batches r, [Verdict r])
applied now outcome (Batches current) = case current of
  Nothing -> (Batches current, [])
  Just c ->
    let (c1, out) = case outcome of
          Computed -> (c, [])
          Undecodable j why ->
            ( c { curRunner = Nothing }
            , [Reply Urgent (BatchRejected (curBatch c) (T.pack ("argument " ++ show (curPos c + j) ++ " for "
                                                                   ++ curName c ++ " does not decode: " ++ why)))] )
          Threw j why -> (c { curRunner = Nothing }, [Reply Urgent (TaskThrew (curBatch c) (fromIntegral (curPos c + j)) (T.pack why))])
          Stopped -> (c { curRunner = Nothing }, [Reply Urgent (BatchStopped (curBatch c))])
        c2 = advance (curRun c) c1
        finished = [ Reply Bulk (BatchDone (curBatch c2) (round (max 0 (now - curStarted c2) * 1e9)))
                   | curLeft c2 == 0, Just _ <- [curRunner c2] ]
    in (inProgress c2 { curRun = 0 }, out ++ finished)

-- | The master cancelled this batch: if it is the one in progress and has
-- not been answered, the rest of its arguments are skipped and it is
-- answered as stopped; otherwise (it ended, or is not this worker's) nothing.
cancel :: Word64 -> Batches r -> (Batches r, [Verdict r])
cancel bid (Batches current) = case current of
  Just c | curBatch c == bid, Just _ <- curRunner c, curLeft c > 0 || curRun c > 0 ->
    (inProgress c { curRunner = Nothing }, [Reply Urgent (BatchStopped bid)])
  _ -> (Batches current, [])

-- | The batch in progress, if any.
currentBatch :: Batches r -> Maybe Word64
currentBatch (Batches current) = curBatch <$> current

advance :: Int -> Current r -> Current r
advance k c = c { curLeft = curLeft c - k, curPos = curPos c + k }
