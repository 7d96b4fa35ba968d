{-# LANGUAGE BangPatterns #-}
-- | The shared values a host agent keeps for its workers
-- ("Herd.Node.Agent.Serve"): pieces arriving on the host link, and each
-- whole value as the packets that give it to a worker, for the workers
-- the agent has and those it starts later.
--
-- Promises: a value is kept only once all its pieces came and add up to
-- its size (a piece that does not fit is refused, naming the value); its
-- pieces are copied once, out of the host link's buffer, and never again.
module Herd.Node.Agent.Shares
  ( AgentShares
  , newAgentShares
  , sharePieceCame
  , heldShares
  , forgetShare
  ) where

import qualified Data.ByteString as B
import Data.IORef
import qualified Data.Map.Strict as M
import Data.Word (Word64)
import Herd.Wire.HostEntry (heldSharePackets)

-- | The values kept (as packets, each in its parts) and those arriving
-- (size, bytes so far, pieces newest first).
data AgentShares = AgentShares
  { asKept     :: !(IORef (M.Map Word64 [[B.ByteString]]))
  , asArriving :: !(IORef (M.Map Word64 (Int, Int, [B.ByteString])))
  }

-- | None yet.
newAgentShares :: IO AgentShares
newAgentShares = AgentShares <$> newIORef M.empty <*> newIORef M.empty

-- | A piece of a value of this total size came: 'Right' the value's
-- packets once it is whole, 'Left' why the piece does not fit.
sharePieceCame :: AgentShares -> Word64 -> Word64 -> B.ByteString -> IO (Either String (Maybe [[B.ByteString]]))
sharePieceCame sh n total piece = do
  let !kept = B.copy piece   -- the packet's buffer is reused
  (size, got, pieces) <- M.findWithDefault (fromIntegral total, 0, []) n <$> readIORef (asArriving sh)
  let got' = got + B.length kept
  if size /= fromIntegral total || size < 0 || got' > size
    then pure (Left ("the master sent a piece of shared value " ++ show n ++ " that does not fit its size"))
    else if got' < size
      then Right Nothing <$ modifyIORef' (asArriving sh) (M.insert n (size, got', kept : pieces))
      else do
        modifyIORef' (asArriving sh) (M.delete n)
        packets <- heldSharePackets n size (reverse (kept : pieces))
        modifyIORef' (asKept sh) (M.insert n packets)
        pure (Right (Just packets))

-- | Every value kept, as packets to a worker, in order.
heldShares :: AgentShares -> IO [[B.ByteString]]
heldShares sh = concat . M.elems <$> readIORef (asKept sh)

-- | Forget a value, kept or arriving.
forgetShare :: AgentShares -> Word64 -> IO ()
forgetShare sh n = modifyIORef' (asKept sh) (M.delete n) >> modifyIORef' (asArriving sh) (M.delete n)
