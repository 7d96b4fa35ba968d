-- | Writing host-link entries ("Herd.Core.Wire.Host"): a worker's packet
-- behind its slot, and control messages, as the packet layer's encoders.
-- The master ("Herd.Master.HostLink"), the agents ("Herd.Node.Agent.Serve")
-- and the simulated hosts write their entries only through these.
module Herd.Wire.HostEntry
  ( entryEncoder
  , sentPacketEntry
  , controlEncoder
  , hostCallEncoder
  , hostSharePiece
  , workerPacket
  , heldSharePackets
  , workerPacketOf
  ) where

import qualified Data.ByteString as B
import Data.Word (Word32, Word64)
import Herd.Core.Wire.Host
import Herd.Core.Wire.HostCall (HostCallMessage, encodeHostCall, hostCallSlot)
import Herd.Core.Bytes (bytesBE)
import Herd.Core.Wire (ToWorker (..))
import Herd.Wire.Writer (Encoder (..), encodeBytes, encodeWithTail, encoderBytes, pokeBE)
import Herd.Wire.Encode (encodeToWorker, toWorkerParts)

-- | One worker's packet (its count and messages, no frame length) as an
-- entry; the packet is copied when the entry is written.
entryEncoder :: Word32 -> B.ByteString -> Encoder
entryEncoder slot = encodeWithTail (Encoder entryHeaderBytes (\p -> pokeBE 4 p 0 (fromIntegral slot)))

-- | What a worker's packet sender hands its output function (a frame's
-- parts: the first the sender's own buffer, with the frame length first)
-- as an entry and a tail: the buffer's bytes are copied into the entry,
-- the other parts (values, a large message's tail) stay as they are.
-- 'Nothing' for no parts.
sentPacketEntry :: Word32 -> [B.ByteString] -> Maybe (Encoder, B.ByteString)
sentPacketEntry _ [] = Nothing
sentPacketEntry slot (first : rest) = Just (entryEncoder slot (B.drop 4 first), B.concat rest)

-- | A control message as an entry of the control slot.
controlEncoder :: HostControl -> Encoder
controlEncoder c = encodeBytes (encodeEntryHeader controlSlot <> encodeHostControl c)

-- | A host-call message as an entry of its slot ("Herd.Core.Wire.HostCall").
hostCallEncoder :: HostCallMessage -> Encoder
hostCallEncoder m = encodeBytes (encodeEntryHeader hostCallSlot <> encodeHostCall m)

-- | A piece of a shared value as a control entry, and its tail: the piece
-- itself, which the packet layer sends as it is, uncopied (a value goes
-- to every host, and copying each piece for each host held as many copies
-- of the value as there are hosts until the kernel took them).
hostSharePiece :: Word64 -> Word64 -> B.ByteString -> (Encoder, B.ByteString)
hostSharePiece n total piece =
  (encodeBytes (encodeEntryHeader controlSlot <> hostShareHead n total (B.length piece)), piece)

-- | A worker's packet of these messages (its count, then each message
-- behind its length), as a host agent writes one of its own to a worker.
workerPacket :: [B.ByteString] -> B.ByteString
workerPacket msgs = B.concat (B.pack (bytesBE 4 (fromIntegral (length msgs)))
                              : concat [ [B.pack (bytesBE 4 (fromIntegral (B.length m))), m] | m <- msgs ])

-- | A shared value a host agent holds, as the packets that give it to a
-- worker: one 'SharePart' each, in order, each in two parts, the packet's
-- head and the piece itself (kept as it is, not copied).
heldSharePackets :: Word64 -> Int -> [B.ByteString] -> IO [[B.ByteString]]
heldSharePackets n total = mapM $ \piece -> do
  let (headEnc, tl) = toWorkerParts (SharePart n (fromIntegral total) piece)
  h <- encoderBytes headEnc
  pure [ B.concat [B.pack (bytesBE 4 1), B.pack (bytesBE 4 (fromIntegral (B.length h + B.length tl))), h], tl ]

-- | A worker's packet of one message (a host agent's own word to it).
workerPacketOf :: ToWorker -> IO B.ByteString
workerPacketOf msg = workerPacket . (: []) <$> encoderBytes (encodeToWorker msg)
