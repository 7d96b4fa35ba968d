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
import GHC.Fingerprint (Fingerprint)
import GHC.StaticPtr (StaticPtr, deRefStaticPtr, staticKey)
import Herd.Packet (Encoder)
import Herd.Task (TaskRef (..), describePtr, lookupTyped)
import Herd.Wire.Value (decodeValue, forcedEncoder, valueEncoder)

-- | A function from a stream of @a@ to a stream of @b@ that a worker can
-- run. Build one with 'process' inside a @static@ form.
data Process a b = Process
  { procLabel  :: !(Maybe String)
  , procEncodeIn :: a -> Encoder
  , procDecodeOut :: B.ByteString -> Either String b
  , procRunner :: !ProcessRunner
  }

-- | The type-erased side of a process that a worker runs.
data ProcessRunner = ProcessRunner
  { prInType  :: !Fingerprint
  , prOutType :: !Fingerprint
  , prTypes   :: !String
  , prRun     :: [B.ByteString] -> [IO Encoder]
    -- ^ from the encoded input elements (decoded lazily, as the function
    -- demands them; one that does not decode throws) to the output
    -- elements, each an action that forces it and gives its encoder
  }

-- | Wrap a list function so it can be shipped as a static pointer.
process :: forall a b. (Store a, Store b, Typeable a, Typeable b) => ([a] -> [b]) -> Process a b
process f = Process
  { procLabel = Nothing
  , procEncodeIn = valueEncoder
  , procDecodeOut = decodeValue
  , procRunner = ProcessRunner
      { prInType = typeRepFingerprint (typeRep (Proxy :: Proxy a))
      , prOutType = typeRepFingerprint (typeRep (Proxy :: Proxy b))
      , prTypes = "[" ++ show (typeRep (Proxy :: Proxy a)) ++ "] -> ["
                  ++ show (typeRep (Proxy :: Proxy b)) ++ "]"
      , prRun = \inputs -> map forcedEncoder (f (zipWith decodeOrThrow [0 :: Int ..] inputs))
      }
  }
  where
    decodeOrThrow i bytes = case decodeValue bytes of
      Right x -> x
      Left why -> throw (ErrorCall ("input element " ++ show i ++ " does not decode: " ++ why))

-- | Give a process a name for error messages.
namedProcess :: String -> Process a b -> Process a b
namedProcess label p = p { procLabel = Just label }

-- | The reference the master sends to instantiate a static process.
processRef :: StaticPtr (Process a b) -> TaskRef
processRef ptr = TaskRef
  { refKey = staticKey ptr
  , refName = describePtr ptr (procLabel p)
  , refArgType = prInType (procRunner p)
  , refResultType = prOutType (procRunner p)
  }
  where p = deRefStaticPtr ptr

-- | The caller's encoder for one input element.
processInEncoder :: StaticPtr (Process a b) -> a -> Encoder
processInEncoder ptr = procEncodeIn (deRefStaticPtr ptr)

-- | The caller's decoder for one output element.
processOutDecoder :: StaticPtr (Process a b) -> B.ByteString -> Either String b
processOutDecoder ptr = procDecodeOut (deRefStaticPtr ptr)

-- | Find a process in this binary's static pointer table, checking types.
lookupProcess :: TaskRef -> IO (Either String ProcessRunner)
lookupProcess = lookupTyped (\(p :: Process () ()) -> let r = procRunner p in
                               (r, prInType r, prOutType r, prTypes r))
