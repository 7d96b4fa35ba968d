-- | Shared values as the master's core keeps them: values sent once to
-- every worker and held there under a number, so that any number of tasks
-- can name them instead of carrying them ("Herd.Master.Job.Shared" is the caller's
-- side). Pure: what to send when a value is shared or unshared and when a
-- worker joins, and what each worker said it holds.
--
-- Promises (checked by properties in "SharedSpec"):
--
-- * INV-SHARE-BEFORE: a worker is sent every live value before anything
--   else the core sends it after it joined (the pieces come first in
--   the answer of 'shareJoined', and the core puts them before its other
--   commands), so no task that names a value can reach a worker without
--   it;
-- * INV-SHARE-ONCE: a value is asked of each worker once while both live
--   (the shell sends it once per link: a host agent's carries it once for
--   all its workers, "Herd.Master.Execute");
-- * a value unshared is dropped on every worker that was sent it; a worker
--   counts as holding a value from its word that it holds it (while the
--   value lives) to its word that it dropped it, so what a watcher sees
--   held is what the workers hold.
module Herd.Core.Shared
  ( Shares
  , emptyShares
  , shareAdd
  , shareRemove
  , shareJoined
  , shareLost
  , shareAnswer
  , sharePieces
  , sharePieceBytes
  , sharesLive
  , sharesHeldBy
  , sharesSpilledBy
  ) where

import qualified Data.ByteString as B
import qualified Data.Map.Strict as M
import qualified Data.Set as S
import Data.Word (Word64)
import Herd.Core.Base (WorkerId)
import Herd.Core.Wire (FromWorker (..), ToWorker (..))

-- | The live shared values and who holds them.
data Shares = Shares
  { sharesValues :: !(M.Map Word64 B.ByteString)    -- ^ each live value, encoded
  , sharesHeld   :: !(M.Map WorkerId (S.Set Word64)) -- ^ what each worker said it holds
  , sharesSpilled :: !(M.Map WorkerId (S.Set Word64))
    -- ^ of those, what each said it keeps on its disk
  } deriving (Eq, Show)

-- | None.
emptyShares :: Shares
emptyShares = Shares M.empty M.empty M.empty

-- | The largest piece a value is sent in: big values cross the link in
-- pieces, so no frame has to hold a whole one and other messages can
-- go between them.
sharePieceBytes :: Int
sharePieceBytes = 1024 * 1024

-- | A value's messages: its pieces, in order (one, empty, for an empty value).
sharePieces :: Word64 -> B.ByteString -> [ToWorker]
sharePieces n bytes = map (SharePart n total) (pieces bytes)
  where
    total = fromIntegral (B.length bytes)
    pieces b | B.length b <= sharePieceBytes = [b]
             | otherwise = let (h, t) = B.splitAt sharePieceBytes b in h : pieces t

-- | Share a value under a new number with the workers now linked: the
-- workers that must be sent it. A number already live is left as it is.
shareAdd :: Word64 -> B.ByteString -> [WorkerId] -> Shares -> (Shares, [WorkerId])
shareAdd n bytes workers sh
  | M.member n (sharesValues sh) = (sh, [])
  | otherwise = (sh { sharesValues = M.insert n bytes (sharesValues sh) }, workers)

-- | Unshare a value: every linked worker is told to drop it (a worker
-- still receiving it drops its pieces); each counts as holding it until
-- it says it dropped it.
shareRemove :: Word64 -> [WorkerId] -> Shares -> (Shares, [(WorkerId, ToWorker)])
shareRemove n workers sh
  | not (M.member n (sharesValues sh)) = (sh, [])
  | otherwise = ( sh { sharesValues = M.delete n (sharesValues sh) }
                , [ (w, ShareDrop n) | w <- workers ] )

-- | A worker joined: every live value, to send before anything else.
shareJoined :: WorkerId -> Shares -> (Shares, [(Word64, B.ByteString)])
shareJoined w sh = (sh { sharesHeld = M.insert w S.empty (sharesHeld sh) }, M.toList (sharesValues sh))

-- | A worker's link is gone, and what it held with it.
shareLost :: WorkerId -> Shares -> Shares
shareLost w sh = sh { sharesHeld = M.delete w (sharesHeld sh), sharesSpilled = M.delete w (sharesSpilled sh) }

-- | A worker's word about a value: it holds it now, or no more. A value
-- no longer live is not counted as held (its drop is on the way).
shareAnswer :: WorkerId -> FromWorker -> Shares -> Shares
shareAnswer w msg sh = case msg of
  ShareHeld n | M.member n (sharesValues sh) -> sh { sharesHeld = M.insertWith S.union w (S.singleton n) (sharesHeld sh) }
  ShareDropped n -> sh { sharesHeld = M.adjust (S.delete n) w (sharesHeld sh)
                       , sharesSpilled = M.adjust (S.delete n) w (sharesSpilled sh) }
  ShareSpilled n | maybe False (S.member n) (M.lookup w (sharesHeld sh)) ->
    sh { sharesSpilled = M.insertWith S.union w (S.singleton n) (sharesSpilled sh) }
  _ -> sh

-- | The live values' numbers.
sharesLive :: Shares -> [Word64]
sharesLive = M.keys . sharesValues

-- | How many of the values it holds each worker said it keeps on disk.
sharesSpilledBy :: Shares -> M.Map WorkerId Int
sharesSpilledBy = M.map S.size . sharesSpilled

-- | How many live values each worker said it holds.
sharesHeldBy :: Shares -> M.Map WorkerId Int
sharesHeldBy = M.map S.size . sharesHeld

