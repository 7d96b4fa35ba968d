{-# LANGUAGE BangPatterns #-}
-- | The receiving side of the packet layer: a packet split into its
-- messages, every count and length checked against the bytes present
-- before anything of the packet is used. Pure.
module Herd.Core.Packet.Split
  ( splitPacket
  ) where

import qualified Data.ByteString as B
import qualified Data.ByteString.Unsafe as BU
import Herd.Core.Bytes (word32At)

-- | Split a packet into its messages, checking the count and every length
-- against the bytes present first (so nothing of a bad packet is used); at
-- most @maxMessages@ messages are accepted. The messages are slices of the
-- packet, produced as they are consumed.
splitPacket :: Int -> B.ByteString -> Either String [B.ByteString]
splitPacket maxMessages packet
  | total < 4 = Left ("packet of " ++ show total ++ " bytes has no message count")
  | count > maxMessages = Left ("packet claims " ++ show count ++ " messages, more than the limit of "
                                ++ show maxMessages)
  | otherwise = check count 4
  where
    count = word32At packet 0
    total = B.length packet
    check :: Int -> Int -> Either String [B.ByteString]
    check 0 !off
      | off == total = Right (slices count 4)
      | otherwise = Left ("packet holds " ++ show (total - off) ++ " bytes after its "
                          ++ show count ++ " messages")
    check k !off
      | total - off < 4 = Left ("packet claims " ++ show count ++ " messages but holds only "
                                ++ show (count - k) ++ " (ends inside a length)")
      | len > total - off - 4 = Left ("message " ++ show (count - k) ++ " claims " ++ show len
                                      ++ " bytes but the packet holds " ++ show (total - off - 4))
      | len == 0 = Left ("message " ++ show (count - k) ++ " is empty")
      | otherwise = check (k - 1) (off + 4 + len)
      where len = word32At packet off
    -- each slice is made when its cell is (a lazy length and slice per
    -- message were four thunks, allocated for every message)
    slices :: Int -> Int -> [B.ByteString]
    slices 0 _ = []
    slices k !off =
      let !len = word32At packet off
          !message = BU.unsafeTake len (BU.unsafeDrop (off + 4) packet)
      in message : slices (k - 1) (off + 4 + len)

