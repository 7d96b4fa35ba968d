{-# LANGUAGE ScopedTypeVariables #-}
-- | Shared values: a value sent once to every worker and kept there, so
-- that any number of tasks can take it by handle instead of carrying it
-- in their arguments (Spark's broadcast variables, Dask's
-- @scatter(broadcast=True)@, MPI's @Bcast@).
--
-- > table <- share cluster bigTable         -- sent to each worker once
-- > hits  <- farm cluster lookupTask [ (table, k) | k <- keys ]
--
-- where the task takes @(Shared Table, Key)@ and reads the table with
-- 'sharedValue'. A handle crosses the wire as its number (8 bytes); a
-- worker decodes the value once, the first time a task looks at it, and
-- every later task there gets the same decoded value.
--
-- Promises: every worker linked now, and every worker that links later (a
-- restarted one, a new host's), is sent the value before any task the
-- master sends it after the value was shared ("Herd.Core.Shared",
-- INV-SHARE-BEFORE); 'unshare' drops it on every worker; a task that
-- looks at a value unshared before it ran fails with an error naming the
-- value, and so does its farm.
module Herd.Master.Job.Shared
  ( Shared
  , sharedValue
  , sharedNumber
  , share
  , unshare
  , withShared
  ) where

import Control.Exception (bracket)
import qualified Data.ByteString as B
import Data.Store (Size (..), Store (..), encode)
import Data.Typeable (Typeable)
import Data.Word (Word64)
import Control.Exception (throwIO)
import Control.Monad (when)
import Herd.Core.Error (HerdError (..))
import Herd.Master.Cluster (Cluster (..), clusterTag, describeTag, freshHandle, handleTag)
import Herd.Master.Shell (shellShare, shellUnshare)
import Herd.Node.Store (resolveShared)
import System.IO.Unsafe (unsafePerformIO)

-- | A handle to a value held on every worker. Put it in a task's
-- argument; read it with 'sharedValue'.
data Shared a = Shared
  { sharedNumber :: !Word64  -- ^ the value's number: its cluster's tag in the high 24 bits, then a count
  , sharedValue  :: a
    -- ^ the value: on the master, the one shared; on a worker, the one it
    -- holds, decoded the first time a task there looks at it
  }

instance Show (Shared a) where
  show s = "Shared #" ++ show (sharedNumber s)

-- | Only the number crosses the wire; decoding a handle on a worker
-- finds the value it holds under that number.
instance (Store a, Typeable a) => Store (Shared a) where
  size = ConstSize 8
  poke = poke . sharedNumber
  peek = do
    n <- peek
    pure (Shared n (unsafePerformIO (resolveShared n)))

-- | Send a value to every worker (now and any that joins later) and keep
-- it there until 'unshare'. The value is encoded once, here; it is fully
-- evaluated by that.
share :: forall a. (Store a, Typeable a) => Cluster -> a -> IO (Shared a)
share cluster x = do
  n <- freshHandle cluster
  let bytes = encode x
  _ <- pure $! B.length bytes
  shellShare (clShell cluster) n bytes
  pure (Shared n x)

-- | Drop a shared value on every worker. Tasks sent after this must not
-- name it; the handle's 'sharedValue' still works on the master.
unshare :: Cluster -> Shared a -> IO ()
unshare cluster s = do
  let n = sharedNumber s
  when (handleTag n /= clusterTag cluster) $
    throwIO (ForeignHandle (show s) (describeTag (handleTag n)) (describeTag (clusterTag cluster)))
  shellUnshare (clShell cluster) n

-- | Share a value for the length of the body, then drop it everywhere,
-- also when the body throws.
withShared :: (Store a, Typeable a) => Cluster -> a -> (Shared a -> IO b) -> IO b
withShared cluster x = bracket (share cluster x) (unshare cluster)
