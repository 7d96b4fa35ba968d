-- | The messages of a call a host agent schedules itself (two-level
-- evolve, "Herd.Core.Agent.Evolve"): the master names the host's states
-- to evolve and their inputs in one message, the agent answers a batch
-- of evolved states at a time and once when its part of the call ends. They
-- travel as entries of slot 'hostCallSlot' on the host link
-- ("Herd.Core.Wire.Host"), never a worker's number.
--
-- Pure. Promise: decoding checks every count and length against the bytes
-- present, refuses trailing bytes, and names what was wrong.
module Herd.Core.Wire.HostCall
  ( hostCallSlot
  , HostCallMessage (..)
  , CallSummary (..)
  , hostCallNumber
  , encodeHostCall
  , decodeHostCall
  ) where

import Control.Monad (replicateM)
import qualified Data.ByteString as B
import Data.Text (Text)
import Data.Word (Word32, Word64)
import Herd.Core.Base (TaskRef)
import Herd.Core.Evolve.Registry (Origin (..))
import Herd.Core.Evolve.StateMap (StateId (..))
import Herd.Core.Wire (getRef, putRef)
import Herd.Core.Wire.Codec

-- | The slot of host-call entries: below 'Herd.Core.Wire.Host.controlSlot'
-- and far above every worker's number (below 2^23).
hostCallSlot :: Word32
hostCallSlot = maxBound - 1

-- | What a host's part of a call ended with.
data CallSummary = CallSummary
  { summaryBusy      :: ![(Word32, Word64)]  -- ^ nanoseconds of steps each local worker ran
  , summaryMoved     :: !Word32              -- ^ states moved between the host's workers
  , summaryRecovered :: !Word32              -- ^ states the agent recomputed after a local loss
  } deriving (Eq, Show)

-- | A message of a host-scheduled call; the first field is the call's number.
data HostCallMessage
  = HostStatesAdd !Word64 ![(Word64, B.ByteString)]
    -- ^ master to host: hold these states (ids and bytes) on the host's
    -- workers, as the agent places them, instead of any held before;
    -- answered by 'HostCallEnded'
  | HostEvolve !Word64 !TaskRef !Word32 ![(Word64, B.ByteString)]
    -- ^ master to host: evolve these states the host holds, each with its
    -- encoded input, with this function; a state whose step was running on
    -- this many lost workers fails the call
  | HostStatesAdopt !Word64 ![(Word64, Origin)] ![Word64]
    -- ^ master to host: these states (the last list) were on a host that
    -- was lost; hold them too, made again from their lineage (the origins
    -- of every state on the way back to bytes the master saw) at the
    -- host's next call; answered by 'HostCallEnded'
  | HostStatesGive !Word64 ![Word64]
    -- ^ master to host: give these states back, to be held elsewhere
    -- (moves between hosts); answered by 'HostStatesGiven' with those the
    -- host could give, then 'HostCallEnded'
  | HostStatesGiven !Word64 ![(Word64, B.ByteString)]
    -- ^ host to master: these states' bytes; the host holds them no more
  | HostStatesPut !Word64 ![(Word64, B.ByteString)]
    -- ^ master to host: hold these states too, beside those held;
    -- answered by 'HostCallEnded'
  | HostEvolved !Word64 ![(Word64, [(Word64, B.ByteString)])]
    -- ^ host to master: these states were evolved, each into these
    -- children (ids and outputs)
  | HostCallEnded !Word64 !(Either Text CallSummary)
    -- ^ host to master: the host's part of the call is over: every state
    -- was answered ('Right'), or the call failed here, and why
  deriving (Eq, Show)

-- | The number of the call a message is about.
hostCallNumber :: HostCallMessage -> Word64
hostCallNumber m = case m of
  HostStatesAdd n _ -> n
  HostEvolve n _ _ _ -> n
  HostStatesAdopt n _ _ -> n
  HostStatesGive n _ -> n
  HostStatesGiven n _ -> n
  HostStatesPut n _ -> n
  HostEvolved n _ -> n
  HostCallEnded n _ -> n

-- | Encode a message (the body of a 'hostCallSlot' entry).
encodeHostCall :: HostCallMessage -> B.ByteString
encodeHostCall m = buildStrict $ case m of
  HostStatesAdd n states -> putWord8 0 <> putWord64 n <> pairs states
  HostEvolve n ref deaths states -> putWord8 1 <> putWord64 n <> putRef ref <> putWord32 deaths <> pairs states
  HostStatesAdopt n origins ids -> putWord8 4 <> putWord64 n
    <> count origins <> foldMap (\(s, o) -> putWord64 s <> origin o) origins
    <> count ids <> foldMap putWord64 ids
  HostStatesGive n ids -> putWord8 5 <> putWord64 n <> count ids <> foldMap putWord64 ids
  HostStatesGiven n states -> putWord8 6 <> putWord64 n <> pairs states
  HostStatesPut n states -> putWord8 7 <> putWord64 n <> pairs states
  HostEvolved n done -> putWord8 2 <> putWord64 n <> count done
    <> foldMap (\(s, kids) -> putWord64 s <> pairs kids) done
  HostCallEnded n (Left why) -> putWord8 3 <> putWord64 n <> putWord8 0 <> putText why
  HostCallEnded n (Right (CallSummary busy moved recovered)) -> putWord8 3 <> putWord64 n <> putWord8 1
    <> count busy <> foldMap (\(w, ns) -> putWord32 w <> putWord64 ns) busy
    <> putWord32 moved <> putWord32 recovered
  where
    count xs = putWord32 (fromIntegral (length xs))
    pairs xs = count xs <> foldMap (\(s, bytes) -> putWord64 s <> putSizedBytes bytes) xs
    origin o = case o of
      Seen bytes -> putWord8 0 <> putSizedBytes bytes
      ChildOf (StateId parent) ref input k -> putWord8 1 <> putWord64 parent <> putRef ref <> putSizedBytes input
                                                <> putWord32 (fromIntegral k)

-- | Decode a message; trailing bytes are an error.
decodeHostCall :: B.ByteString -> Either String HostCallMessage
decodeHostCall = runGet $ do
  tag <- getWord8
  case tag of
    0 -> HostStatesAdd <$> getWord64 <*> pairs
    1 -> HostEvolve <$> getWord64 <*> getRef <*> getWord32 <*> pairs
    2 -> do
      n <- getWord64
      k <- getCount 12
      HostEvolved n <$> replicateM k ((,) <$> getWord64 <*> pairs)
    3 -> do
      n <- getWord64
      kind <- getWord8
      HostCallEnded n <$> case kind of
        0 -> Left <$> getText
        1 -> do
          k <- getCount 12
          busy <- replicateM k ((,) <$> getWord32 <*> getWord64)
          fmap Right (CallSummary busy <$> getWord32 <*> getWord32)
        _ -> failGet ("unknown end kind " ++ show kind ++ " of a host call")
    4 -> do
      n <- getWord64
      k <- getCount 13
      origins <- replicateM k ((,) <$> getWord64 <*> origin)
      ids <- getCount 8 >>= \j -> replicateM j getWord64
      pure (HostStatesAdopt n origins ids)
    5 -> HostStatesGive <$> getWord64 <*> (getCount 8 >>= \j -> replicateM j getWord64)
    6 -> HostStatesGiven <$> getWord64 <*> pairs
    7 -> HostStatesPut <$> getWord64 <*> pairs
    _ -> failGet ("unknown host call tag " ++ show tag)
  where
    pairs = do
      k <- getCount 12
      replicateM k ((,) <$> getWord64 <*> getSizedBytes)
    origin = do
      kind <- getWord8
      case kind of
        0 -> Seen <$> getSizedBytes
        1 -> ChildOf <$> (StateId <$> getWord64) <*> getRef <*> getSizedBytes <*> (fromIntegral <$> getWord32)
        _ -> failGet ("unknown origin kind " ++ show kind ++ " of an adopted state")
