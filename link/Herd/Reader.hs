-- | What the master's two drivers have in common: a reader that watches
-- every worker's link and hands each whole frame to the core's shell
-- ("Herd.Master.Shell"). The two readers are the two designs FP Complete
-- compared for its particle filter: one thread over epoll
-- ("Herd.Reader.Epoll") and a thread per worker over GHC's IO
-- manager ("Herd.Reader.Threaded").
--
-- Promises of every reader: frames of one link are delivered in order,
-- whole, and one at a time per link; a link is reported lost once (by the
-- callback it was added with) and not read after 'readerRemove'; the
-- after-round action runs after every batch of deliveries, before the
-- reader waits again.
module Herd.Reader
  ( Reader (..)
  , OnPacket
  , OnLost
  ) where

import qualified Data.ByteString as B
import Herd.Settings (MasterLoop)
import Herd.Core.Farm (WorkerId)
import Herd.Transport (Connection)

-- | Hand over one frame; 'Left' means it was bad and the link is lost.
type OnPacket = B.ByteString -> IO (Either String ())

-- | The link broke, with why.
type OnLost = String -> IO ()

-- | A running reader.
data Reader = Reader
  { readerLoop   :: !MasterLoop
  , readerAdd    :: WorkerId -> Connection -> OnPacket -> OnLost -> IO ()
    -- ^ start reading a link (the worker's number is unique among live links)
  , readerRemove :: WorkerId -> Connection -> IO ()
    -- ^ stop reading a link, before it is closed
  , readerRun    :: IO ()
    -- ^ the reader's own thread, if it has one; runs until killed
  , readerVisits :: IO Int
    -- ^ how many times so far the reader looked at a link for bytes: it
    -- should grow with the traffic, not with the number of links (for
    -- tests and diagnosis)
  }
