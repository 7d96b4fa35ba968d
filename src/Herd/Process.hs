{-# LANGUAGE ScopedTypeVariables #-}
-- | Stream processes that can run on a worker, after Eden's @process@: a
-- function from a list to a list, shipped as a static pointer with the
-- codecs of its element types.
--
-- > sorter :: StaticPtr (Process Int Int)
-- > sorter = static (process Data.List.sort)
--
-- "Herd.Stream" instantiates them. As with "Herd.Task", bind the pointers
-- at top level in a module other than @Main@.
module Herd.Process
  ( Process
  , ProcessCodecs (..)
  , process
  , namedProcess
    -- * For the drivers
  , ProcessRunner (..)
  , processRef
  , processInEncoder
  , processOutDecoder
  , lookupProcess
  ) where

import Control.Exception (ErrorCall (..), throw)
import qualified Data.ByteString as B
import Data.Store (Store)
import Data.Typeable (Proxy (..), Typeable, typeRep, typeRepFingerprint)
import GHC.StaticPtr (StaticPtr, deRefStaticPtr)
import Herd.Base (Encoder, TaskRef)
import Herd.Closure
import Herd.Wire.Value (decodeValue, forcedEncoder, valueEncoder)

-- | A function from a stream of @a@ to a stream of @b@ that a worker can
-- run: a 'Closure'. Build one with 'process' inside a @static@ form.
type Process a b = Closure (ProcessCodecs a b) ProcessRunner

-- | The caller's side of a stream process.
data ProcessCodecs a b = ProcessCodecs
  { encodeIn  :: a -> Encoder
  , decodeOut :: B.ByteString -> Either String b
  }

-- | The type-erased side of a process that a worker runs.
newtype ProcessRunner = ProcessRunner
  { prRun :: [B.ByteString] -> [IO Encoder]
    -- ^ from the encoded input elements (decoded lazily, as the function
    -- demands them; one that does not decode throws) to the output
    -- elements, each an action that forces it and gives its encoder
  }

-- | Wrap a list function so it can be shipped as a static pointer.
process :: forall a b. (Store a, Store b, Typeable a, Typeable b) => ([a] -> [b]) -> Process a b
process f = Closure
  { closureKind = ProcessClosure
  , closureLabel = Nothing
  , closureIn = typeRepFingerprint (typeRep (Proxy :: Proxy a))
  , closureOut = typeRepFingerprint (typeRep (Proxy :: Proxy b))
  , closureTypes = "[" ++ show (typeRep (Proxy :: Proxy a)) ++ "] -> [" ++ show (typeRep (Proxy :: Proxy b)) ++ "]"
  , closureCodecs = ProcessCodecs valueEncoder decodeValue
  , closureRunner = ProcessRunner $ \inputs -> map forcedEncoder (f (zipWith decodeOrThrow [0 :: Int ..] inputs))
  }
  where
    decodeOrThrow i bytes = case decodeValue bytes of
      Right x -> x
      Left why -> throw (ErrorCall ("input element " ++ show i ++ " does not decode: " ++ why))

-- | Give a process a name for error messages ('named').
namedProcess :: String -> Process a b -> Process a b
namedProcess = named

-- | The reference the master sends to instantiate a static process.
processRef :: StaticPtr (Process a b) -> TaskRef
processRef = closureRef

-- | The caller's encoder for one input element.
processInEncoder :: StaticPtr (Process a b) -> a -> Encoder
processInEncoder ptr = encodeIn (closureCodecs (deRefStaticPtr ptr))

-- | The caller's decoder for one output element.
processOutDecoder :: StaticPtr (Process a b) -> B.ByteString -> Either String b
processOutDecoder ptr = decodeOut (closureCodecs (deRefStaticPtr ptr))

-- | Find a process in this binary's static pointer table, checking its
-- kind and types.
lookupProcess :: TaskRef -> IO (Either String ProcessRunner)
lookupProcess ref = either (Left . describeClosureError) Right <$> lookupClosure ProcessClosure ref
