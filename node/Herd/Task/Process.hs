{-# LANGUAGE ScopedTypeVariables #-}
-- | Stream processes that can run on a worker, after Eden's @process@: a
-- function from a list to a list, shipped as a static pointer with the
-- codecs of its element types.
--
-- > sorter :: StaticPtr (Process Int Int)
-- > sorter = static (process Data.List.sort)
--
-- "Herd.Master.Job.Stream" instantiates them. As with "Herd.Task", bind the pointers
-- at top level in a module other than @Main@.
module Herd.Task.Process
  ( Process
  , ProcessCodecs (..)
  , process
    -- * For the drivers
  , ProcessRunner (..)
  , processRef
  , processInStager
  , processOutDecoder
  , lookupProcess
  ) where

import Control.Exception (ErrorCall (..), throw)
import qualified Data.ByteString as B
import Data.Store (Store)
import Data.Typeable (Proxy (..), Typeable, typeRep, typeRepFingerprint)
import GHC.StaticPtr (StaticPtr, deRefStaticPtr)
import Herd.Core.Base (TaskRef)
import Herd.Task.Closure
import Herd.Task.StreamSend (BatchSink, sendBatched)
import Herd.Wire.Staging (Staging, stageValueAt)
import Herd.Wire.Value (decodeValuesOnto)

-- | A function from a stream of @a@ to a stream of @b@ that a worker can
-- run: a 'Closure'. Build one with 'process' inside a @static@ form.
type Process a b = Closure (ProcessCodecs a b) ProcessRunner

-- | The caller's side of a stream process.
data ProcessCodecs a b = ProcessCodecs
  { stageIn   :: Staging -> Int -> a -> IO Int
    -- ^ encode one input element into the staging buffer at this offset
    -- (after elements staged before it); its size
  , decodeOut :: Int -> B.ByteString -> [b] -> Either (Int, String) [b]
    -- ^ a run of this many output elements, put in front of a list
    -- ('Herd.Wire.Value.decodeValuesOnto')
  }

-- | The type-erased side of a process that a worker runs.
newtype ProcessRunner = ProcessRunner
  { prRun :: [(Int, B.ByteString)] -> Staging -> BatchSink -> IO ()
    -- ^ given the runs of encoded input elements (each run a count and
    -- the encodings back to back, decoded as the function reaches it; one
    -- that does not decode throws, naming the element), run the function
    -- and hand its output elements, in order, to the sink, encoded in the
    -- staging buffer ('sendBatched'). Throws what the function throws.
  }

-- | Wrap a list function so it can be shipped as a static pointer.
process :: forall a b. (Store a, Store b, Typeable a, Typeable b) => ([a] -> [b]) -> Process a b
process f = Closure
  { closureKind = ProcessClosure
  , closureLabel = Nothing
  , closureIn = typeRepFingerprint (typeRep (Proxy :: Proxy a))
  , closureOut = typeRepFingerprint (typeRep (Proxy :: Proxy b))
  , closureTypes = "[" ++ show (typeRep (Proxy :: Proxy a)) ++ "] -> [" ++ show (typeRep (Proxy :: Proxy b)) ++ "]"
  , closureCodecs = ProcessCodecs stageValueAt decodeValuesOnto
  , closureRunner = ProcessRunner $ \runs staging sink ->
      sendBatched stageValueAt staging sink (f (decodeRuns 0 runs))
  }
  where
    -- each run is decoded whole when the function reaches its first element
    decodeRuns :: Int -> [(Int, B.ByteString)] -> [a]
    decodeRuns _ [] = []
    decodeRuns i ((k, bytes) : rest) = case decodeValuesOnto k bytes (decodeRuns (i + k) rest) of
      Right xs -> xs
      Left (j, why) -> throw (ErrorCall ("input element " ++ show (i + j) ++ " does not decode: " ++ why))

{-# INLINE process #-}

-- | The reference the master sends to instantiate a static process.
processRef :: StaticPtr (Process a b) -> TaskRef
processRef = closureRef

-- | The caller's encoder of one input element into a staging buffer at
-- an offset (its size).
processInStager :: StaticPtr (Process a b) -> Staging -> Int -> a -> IO Int
processInStager ptr = stageIn (closureCodecs (deRefStaticPtr ptr))

-- | The caller's decoder for a run of this many output elements, put in
-- front of a list ('Left': the first that does not decode, counting from
-- 0 in the run, and why).
processOutDecoder :: StaticPtr (Process a b) -> Int -> B.ByteString -> [b] -> Either (Int, String) [b]
processOutDecoder ptr = decodeOut (closureCodecs (deRefStaticPtr ptr))

-- | Find a process in this binary's static pointer table, checking its
-- kind and types.
lookupProcess :: TaskRef -> IO (Either String ProcessRunner)
lookupProcess ref = either (Left . describeClosureError) Right <$> lookupClosure ProcessClosure ref
