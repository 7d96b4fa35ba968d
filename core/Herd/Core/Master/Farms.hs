-- | The farm side of the master's core ("Herd.Core.Master"): stepping the
-- pure scheduler ("Herd.Core.Farm") and turning its decisions into the
-- core's commands (batches to send with what their link now expects,
-- results to accept, answers to callers, log lines), and ending a job
-- with an error. Pure.
module Herd.Core.Master.Farms
  ( sched
  , endFarm
  ) where

import Data.List (partition)
import qualified Data.Map.Strict as M
import Herd.Core.Base (JobId, Range (..), TaskRef (..))
import Herd.Core.Error (HerdError (..))
import Herd.Core.Master.State
import Herd.Core.Master.Events
import Herd.Core.Master.Expect (expectBatch)
import qualified Herd.Core.Farm as S

-- | End a farm job with an error (if it is still running).
endFarm :: Double -> JobId -> HerdError -> Core -> (Core, [Command])
endFarm now jid err core
  | M.member jid (coreFarms core) =
      let (core1, out) = sched now (S.JobCancelled jid) core { coreFarms = M.delete jid (coreFarms core) }
      in (core1, JobDone jid (Left err) : out)
  | otherwise = (core, [])

-- | Step the scheduler and turn its commands into the core's.
sched :: Double -> S.Event -> Core -> (Core, [Command])
sched now ev core =
  let (s', cmds) = S.step now ev (coreSched core)
  in foldl run (core { coreSched = s' }, []) cmds
  where
    run (c, out) cmd = case cmd of
      S.SendBatch w bid ranges -> case (S.batchJobOf w bid (coreSched c), M.lookup w (coreLinks c)) of
        (Just jid, Just l) | Just job <- M.lookup jid (coreFarms c) ->
          let c1 = c { coreLinks = M.insert w (expectBatch jid bid ranges l) (coreLinks c) }
              (c2, notes) = noteRerun w ranges c1
          in (c2, out ++ notes ++ [SendBatch w jid bid (farmRef job) ranges])
        _ -> (c, out)
      S.AcceptResults jid _ ranges
        | M.member jid (coreFarms c) -> (c, out ++ [Accept jid ranges])
        | otherwise -> (c, out)
      S.DropResults _ -> (c, out)
      S.TaskFailedAt jid i failure -> case M.lookup jid (coreFarms c) of
        Just job -> (c, out ++ [FailTask jid i (failureError (refName (farmRef job)) failure)])
        Nothing -> (c, out)
      S.SlowBatch slow bid n late est copy ->
        (c, out ++ [Note ("herd: worker " ++ show slow ++ " is slow: its batch " ++ show bid ++ " of " ++ show n
                          ++ " tasks has run " ++ secs late ++ (if est > 0 then " (estimate " ++ secs est ++ ")" else "")
                          ++ "; a copy runs on worker " ++ show copy)])
      S.FinishJob jid stats -> answer c out jid (Right stats)
      S.AbortJob jid failure _ -> case M.lookup jid (coreFarms c) of
        Just job -> answer c out jid (Left (failureError (refName (farmRef job)) failure))
        Nothing -> (c, out)
    -- INV-ONCE: a job is answered only while it is known, and forgotten then
    answer c out jid result
      | M.member jid (coreFarms c) = (c { coreFarms = M.delete jid (coreFarms c) }, out ++ [JobDone jid result])
      | otherwise = (c, out)
    noteRerun w ranges c =
      let overlaps rs = or [ lo < hi' && lo' < hi | Range lo hi <- ranges, Range lo' hi' <- rs ]
          (hit, rest) = partition (\(_, _, rs) -> overlaps rs) (coreRequeued c)
      in ( c { coreRequeued = rest }
         , [ Note ("herd: tasks of lost worker " ++ show lost ++ " re-sent to worker " ++ show w ++ " "
                   ++ show (round ((now - at) * 1000) :: Int) ++ " ms after the loss was noticed")
           | (lost, at, _) <- hit ] )

-- Seconds for the log, to the millisecond.
secs :: Double -> String
secs t = show (fromIntegral (round (t * 1000) :: Int) / 1000 :: Double) ++ " s"

failureError :: String -> S.JobFailure -> HerdError
failureError name failure = case failure of
  S.TaskError i msg -> TaskFailed i name msg
  S.FunctionRefused why -> RemoteFunctionError name why
  S.NoWorkersLeft -> AllWorkersLost "the cluster has no live worker"
  S.TaskKilledWorkers i deaths why -> TaskKilledWorkers i name deaths why

