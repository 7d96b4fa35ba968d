-- | The host link's framing: one link between the master and a host
-- agent carries the traffic of all the host's workers. Each message of a
-- host packet (the packet layer's own format, "Herd.Core.Packet.Split")
-- is an entry: a 32-bit slot, then a body. Slot 'controlSlot' carries a
-- 'HostControl' message about the link's workers; any other slot is a
-- worker's number, and the body is one of that worker's packets, exactly
-- as it would travel on a link of its own. So a host packet gathers many
-- workers' packets, and the master's system calls and wake-ups grow with
-- hosts, not workers.
--
-- Pure. Promise: decoding checks every length against the bytes present
-- and names what was wrong; a body is a slice of the entry, not a copy.
module Herd.Core.Wire.Host
  ( controlSlot
  , entryHeaderBytes
  , HostControl (..)
  , GoneReason (..)
  , HostLimit (..)
  , encodeEntryHeader
  , decodeEntry
  , encodeHostControl
  , hostShareHead
  , decodeHostControl
  , hostLinkPolicy
  ) where

import Control.Monad (replicateM)
import qualified Data.ByteString as B
import qualified Data.ByteString.Unsafe as BU
import Data.Bits (shiftL, (.|.))
import Data.Text (Text)
import Data.Word (Word32, Word64)
import Herd.Core.Packet.Policy (PacketPolicy (..))
import Herd.Core.Wire.Codec

-- | The slot of control entries; never a worker's number.
controlSlot :: Word32
controlSlot = maxBound

-- | Bytes before an entry's body: its slot.
entryHeaderBytes :: Int
entryHeaderBytes = 4

-- | What the master and a host agent say about the link's workers.
data HostControl
  = AddWorker !Word32 !Word32 !Word32
    -- ^ host to master: a worker started (the host's token for it, its
    -- process, the CPU it is pinned to or 'Herd.Core.Wire.noCpu'); give it a number
  | WorkerAdded !Word32 !Word32
    -- ^ master to host: the worker of this token is this number
  | WorkerGone !Word32 !GoneReason
    -- ^ host to master: this worker is gone, and why
  | StopWorker !Word32
    -- ^ master to host: the master dropped this worker; end it
  | CloseHost
    -- ^ master to host: the cluster is closing (its workers were told to
    -- stop just before); the host's end is a clean one
  | HostMemoryLimit !HostLimit
    -- ^ master to host: the resident memory each of its workers may hold
  | WorkerHold !Word32 !Bool
    -- ^ host to master: this worker is above the soft share of its limit
    -- (give it no new work), or back below it
  | WorkerMemory ![(Word32, Word64)]
    -- ^ host to master: its workers' resident bytes, as last read
  | HostShare !Word64 !Word64 !B.ByteString
    -- ^ master to host: the next piece of shared value @n@, whose encoding
    -- is this many bytes in all ("Herd.Core.Shared"); the host keeps the
    -- value and hands it to each of its workers, now and as they join
  | HostUnshare !Word64
    -- ^ master to host: forget that value (its workers are told apart)
  deriving (Eq, Show)

-- | A host's memory limit for each of its workers.
data HostLimit
  = NoHostLimit            -- ^ none
  | HostLimitAuto          -- ^ 90% of the host's memory, shared among its workers
  | HostLimitBytes !Word64 -- ^ this many bytes
  | HostLimitShared !Word32
    -- ^ 90% of the host's memory, shared among its workers and this many
    -- other herd workers on the same host (the master's own, another
    -- agent's)
  deriving (Eq, Show)

-- | Why a host's worker is gone.
data GoneReason
  = GoneDied !Text
    -- ^ its process ended or its local link broke: the host's words
  | GoneMemory !Word64 !Word64
    -- ^ its resident memory (bytes) was over its limit (bytes): the agent killed it
  deriving (Eq, Show)

-- | An entry's header: the slot, big-endian.
encodeEntryHeader :: Word32 -> B.ByteString
encodeEntryHeader slot = buildStrict (putWord32 slot)

-- | Split an entry into its slot and body (a slice).
decodeEntry :: B.ByteString -> Either String (Word32, B.ByteString)
decodeEntry entry
  | B.length entry < entryHeaderBytes = Left ("a host entry of " ++ show (B.length entry) ++ " bytes has no slot")
  | otherwise = Right (slot, BU.unsafeDrop entryHeaderBytes entry)
  where
    byte i = fromIntegral (BU.unsafeIndex entry i) :: Word32
    slot = (byte 0 `shiftL` 24) .|. (byte 1 `shiftL` 16) .|. (byte 2 `shiftL` 8) .|. byte 3

-- | Encode a control message (the body of a 'controlSlot' entry).
encodeHostControl :: HostControl -> B.ByteString
encodeHostControl c = buildStrict $ case c of
  AddWorker token pid cpu -> putWord8 0 <> putWord32 token <> putWord32 pid <> putWord32 cpu
  WorkerAdded token wid -> putWord8 1 <> putWord32 token <> putWord32 wid
  WorkerGone wid (GoneDied why) -> putWord8 2 <> putWord32 wid <> putWord8 0 <> putText why
  WorkerGone wid (GoneMemory used limit) -> putWord8 2 <> putWord32 wid <> putWord8 1 <> putWord64 used <> putWord64 limit
  StopWorker wid -> putWord8 3 <> putWord32 wid
  CloseHost -> putWord8 4
  HostMemoryLimit NoHostLimit -> putWord8 5 <> putWord8 0
  HostMemoryLimit HostLimitAuto -> putWord8 5 <> putWord8 1
  HostMemoryLimit (HostLimitBytes b) -> putWord8 5 <> putWord8 2 <> putWord64 b
  HostMemoryLimit (HostLimitShared k) -> putWord8 5 <> putWord8 3 <> putWord32 k
  WorkerHold wid held -> putWord8 6 <> putWord32 wid <> putWord8 (if held then 1 else 0)
  WorkerMemory readings -> putWord8 7 <> putWord32 (fromIntegral (length readings))
    <> foldMap (\(w, b) -> putWord32 w <> putWord64 b) readings
  HostShare n total piece -> putWord8 8 <> putWord64 n <> putWord64 total <> putSizedBytes piece
  HostUnshare n -> putWord8 9 <> putWord64 n

-- | A 'HostShare' message without its piece: its encoding is these bytes,
-- then the piece's (so a sender can pass the piece on without copying it).
hostShareHead :: Word64 -> Word64 -> Int -> B.ByteString
hostShareHead n total pieceBytes = buildStrict (putWord8 8 <> putWord64 n <> putWord64 total <> putWord32 (fromIntegral pieceBytes))

-- | Decode a control message; trailing bytes are an error.
decodeHostControl :: B.ByteString -> Either String HostControl
decodeHostControl = runGet $ do
  tag <- getWord8
  case tag of
    0 -> AddWorker <$> getWord32 <*> getWord32 <*> getWord32
    1 -> WorkerAdded <$> getWord32 <*> getWord32
    2 -> do
      wid <- getWord32
      kind <- getWord8
      WorkerGone wid <$> case kind of
        0 -> GoneDied <$> getText
        1 -> GoneMemory <$> getWord64 <*> getWord64
        _ -> failGet ("unknown reason " ++ show kind ++ " for a gone worker")
    3 -> StopWorker <$> getWord32
    4 -> pure CloseHost
    5 -> getWord8 >>= \kind -> HostMemoryLimit <$> case kind of
      0 -> pure NoHostLimit
      1 -> pure HostLimitAuto
      2 -> HostLimitBytes <$> getWord64
      3 -> HostLimitShared <$> getWord32
      _ -> failGet ("unknown memory limit kind " ++ show kind)
    6 -> WorkerHold <$> getWord32 <*> (getWord8 >>= \b -> case b of
      0 -> pure False
      1 -> pure True
      _ -> failGet ("bad hold flag " ++ show b))
    7 -> do
      n <- getCount 12
      WorkerMemory <$> replicateM n ((,) <$> getWord32 <*> getWord64)
    8 -> HostShare <$> getWord64 <*> getWord64 <*> getSizedBytes
    9 -> HostUnshare <$> getWord64
    _ -> failGet ("unknown host control tag " ++ show tag)

-- | How a host link gathers its packets, given a worker's policy and the
-- frame cap: as a worker's, but four times as large (at most half a
-- frame), so that one packet carries many workers' packets. The master,
-- the agents and the simulated hosts all use this one.
hostLinkPolicy :: Int -> PacketPolicy -> PacketPolicy
hostLinkPolicy maxFrame p =
  p { policyCapacity = max (policyCapacity p) (min (maxFrame `div` 2) (4 * policyCapacity p)) }

