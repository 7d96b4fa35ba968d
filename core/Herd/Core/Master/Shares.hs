-- | The shared values as a feature of the master's core
-- ("Herd.Core.Master", "Herd.Core.Master.Feature"; the bookkeeping is
-- "Herd.Core.Shared"): a value shared or unshared reaches every live
-- worker, a worker that joins is sent every live value, and what each
-- worker says it holds is kept for watchers.
--
-- Promise (INV-SHARE-BEFORE): this feature comes first in the core's
-- list, so a joining worker's values go before any other command for it.
-- Pure.
module Herd.Core.Master.Shares
  ( shareFeature
  , shareEvent
  ) where

import qualified Data.Map.Strict as M
import Herd.Core.Master.Events
import Herd.Core.Master.Feature
import Herd.Core.Master.State
import Herd.Core.Packet.Policy (Urgency (..))
import Herd.Core.Shared
import Herd.Core.Wire (FromWorker (..))

-- | The shared values: sent to each worker that joins, forgotten with a
-- lost one, and the workers' words about what they hold.
shareFeature :: Feature
shareFeature = (quiet "share")
  { featureOwns = ownsShare
  , featureReceived = \_ _ w msg core -> (core { coreShares = shareAnswer w msg (coreShares core) }, [])
  , featureJoined = \_ _ w core ->
      let (shares, shared) = shareJoined w (coreShares core)
      in (core { coreShares = shares }, [ ShareTo w n bytes | (n, bytes) <- shared ])
  , featureLost = \_ _ w _ core -> (core { coreShares = shareLost w (coreShares core) }, [])
  }

ownsShare :: FromWorker -> Bool
ownsShare msg = case msg of
  ShareHeld _ -> True
  ShareDropped _ -> True
  ShareSpilled _ -> True
  _ -> False

-- | A value shared or unshared.
shareEvent :: Event -> Core -> (Core, [Command])
shareEvent ev core = case ev of
  ShareValue n bytes
    | coreStopping core -> (core, [])
    | otherwise ->
        let (shares, sends) = shareAdd n bytes (M.keys (coreLinks core)) (coreShares core)
        in (core { coreShares = shares }, [ ShareTo w n bytes | w <- sends ])
  Unshare n ->
    let (shares, sends) = shareRemove n (M.keys (coreLinks core)) (coreShares core)
    in (core { coreShares = shares }, [ Send w Urgent m | (w, m) <- sends ] ++ [ Unshared n | n `elem` sharesLive (coreShares core) ])
  _ -> (core, [])
