{-# LANGUAGE BangPatterns #-}
-- | The evolve API's most frequent message, a worker's report of an evolved
-- state (its id, its busy time and its children with their outputs),
-- decoded straight out of the packet (its encoder, which writes straight
-- into one, is "Herd.Wire.Encode").
--
-- The general path ("Herd.Core.Wire.Codec") builds each message through a
-- @Builder@ into a fresh buffer and reads it back through a @Get@; at
-- thousands of workers this message is most of the master's traffic, and
-- those two steps were kilobytes of allocation each. The bytes are the
-- same as the general path's, so either side may use either path.
--
-- Promises: 'decodeEvolved' accepts exactly the byte strings the general
-- decoder accepts for this tag (everything checked against the bytes
-- present, nothing read past them); it never throws. Pure.
module Herd.Core.Wire.Evolved
  ( decodeEvolved
  ) where

import qualified Data.ByteString as B
import qualified Data.ByteString.Unsafe as BU
import Data.Word (Word64)
import Herd.Core.Bytes (word32At, word64At)

-- | The parts of an evolved report whose tag byte has been checked:
-- 'Nothing' when the rest does not fit the bytes exactly (the caller's
-- general decoder then says what is wrong). Outputs are slices of the
-- input.
decodeEvolved :: B.ByteString -> Maybe (Word64, Word64, [(Word64, B.ByteString)])
decodeEvolved bs
  | len < 21 = Nothing
  | count > (len - 21) `div` 12 = Nothing
  | otherwise = case children count 21 of
      Just kids -> let !sid = word64At bs 1; !busy = word64At bs 9 in Just (sid, busy, kids)
      Nothing -> Nothing
  where
    len = B.length bs
    count = word32At bs 17
    children :: Int -> Int -> Maybe [(Word64, B.ByteString)]
    children 0 !at = if at == len then Just [] else Nothing
    children k !at
      | len - at < 12 = Nothing
      | otherwise =
          let n = word32At bs (at + 8)
              from = at + 12
          in if n > len - from then Nothing
             else case children (k - 1) (from + n) of
               Just rest -> let !c = word64At bs at; !o = BU.unsafeTake n (BU.unsafeDrop from bs) in Just ((c, o) : rest)
               Nothing -> Nothing
