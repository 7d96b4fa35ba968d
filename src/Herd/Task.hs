{-# LANGUAGE ScopedTypeVariables #-}
-- | Functions that can run on a worker: the closures of herd.
--
-- A function crosses the wire as the key of a GHC static pointer, so only
-- code compiled into the binary can ever run on a worker. A bare
-- @StaticPtr (a -> b)@ is not enough: GHC's static pointer table keeps only
-- the value, so a worker given a key could neither decode the argument nor
-- check that the types are the ones the master meant. A 'Task' is the
-- function together with its codecs and the fingerprints of its argument and
-- result types, captured where the types are known:
--
-- > fibTask :: StaticPtr (Task Int Integer)
-- > fibTask = static (task fib)
--
-- Bind such pointers at top level, best in a module other than @Main@ (GHC
-- 9.0 can fail to link a @static@ form inside @Main@ under @-O@).
--
-- Promise: a worker never runs a function whose key it does not hold or
-- whose types differ from the caller's; it answers with an error naming the
-- function instead.
module Herd.Task
  ( -- * Building tasks
    Task
  , task
  , named
    -- * Using tasks (for the master and worker drivers)
  , TaskRef (..)
  , taskRef
  , taskArgEncoder
  , taskResultDecoder
  , Runner (..)
  , lookupRunner
  , lookupTyped
  , tryUser
  , describePtr
  ) where

import Control.Exception
  (SomeAsyncException, SomeException, fromException, throwIO, try, displayException)
import qualified Data.ByteString as B
import Data.Store (Store)
import Data.Typeable (Proxy (..), Typeable, typeRep, typeRepFingerprint)
import GHC.Fingerprint (Fingerprint (..))
import GHC.StaticPtr
  (StaticPtr, StaticPtrInfo (..), deRefStaticPtr, staticKey, staticPtrInfo,
   unsafeLookupStaticPtr)
import Herd.Base (Encoder, TaskRef (..))
import Herd.Wire.Value (decodeValueIO, forcedEncoder, valueEncoder)

-- | A function from @a@ to @b@ that a worker can run, with what it takes to
-- ship its arguments and results. Build one with 'task' inside a @static@
-- form.
data Task a b = Task
  { taskLabel   :: !(Maybe String)
  , taskEncodeArg :: a -> Encoder
  , taskDecodeResult :: B.ByteString -> IO b
  , taskRunner  :: !Runner
  }

-- | The type-erased side of a task that a worker runs: it only ever sees
-- bytes.
data Runner = Runner
  { runnerArgType     :: !Fingerprint  -- ^ fingerprint of the argument type
  , runnerResultType  :: !Fingerprint  -- ^ fingerprint of the result type
  , runnerTypes       :: !String       -- ^ the function's type, for messages
  , runnerApply       :: B.ByteString -> IO (Either String (IO Encoder))
    -- ^ decode one argument ('Left': it does not decode); the action
    -- applies the function, forces the result and gives its encoder, and
    -- throws what the function throws
  }

-- | Wrap a function so that it can be shipped as a static pointer.
task :: forall a b. (Store a, Store b, Typeable a, Typeable b) => (a -> b) -> Task a b
task f = Task
  { taskLabel  = Nothing
  , taskEncodeArg = valueEncoder
  , taskDecodeResult = decodeValueIO
  , taskRunner = Runner
      { runnerArgType    = typeRepFingerprint (typeRep (Proxy :: Proxy a))
      , runnerResultType = typeRepFingerprint (typeRep (Proxy :: Proxy b))
      , runnerTypes      = show (typeRep (Proxy :: Proxy a)) ++ " -> "
                             ++ show (typeRep (Proxy :: Proxy b))
      , runnerApply      = \bytes -> do
          decoded <- try (decodeValueIO bytes)
          pure $ case decoded of
            Left (e :: SomeException) -> Left (displayException e)
            Right (x :: a) -> Right (forcedEncoder (f x))
      }
  }

-- | Run user code, turning its exceptions (but not asynchronous ones,
-- which are rethrown) into their text.
tryUser :: IO x -> IO (Either String x)
tryUser act = do
  outcome <- try act
  case outcome of
    Right x -> pure (Right x)
    Left (e :: SomeException)
      | Just (_ :: SomeAsyncException) <- fromException e -> throwIO e
      | otherwise -> pure (Left (displayException e))

-- | Give a task a name for error messages and statistics.
named :: String -> Task a b -> Task a b
named label t = t { taskLabel = Just label }

-- | The reference for a static task.
taskRef :: StaticPtr (Task a b) -> TaskRef
taskRef ptr = TaskRef
  { refKey        = staticKey ptr
  , refName       = describePtr ptr (taskLabel t)
  , refArgType    = runnerArgType runner
  , refResultType = runnerResultType runner
  }
  where
    t = deRefStaticPtr ptr
    runner = taskRunner t

-- | A readable name for a static pointer: its label if it has one, and
-- where it was written.
describePtr :: StaticPtr x -> Maybe String -> String
describePtr ptr label = maybe ("static function at " ++ place) (\l -> l ++ " (" ++ place ++ ")") label
  where
    info = staticPtrInfo ptr
    place = spInfoModuleName info ++ ":" ++ show (fst (spInfoSrcLoc info))
            ++ ":" ++ show (snd (spInfoSrcLoc info))

-- | The master's encoder for one argument of a static task.
taskArgEncoder :: StaticPtr (Task a b) -> a -> Encoder
taskArgEncoder ptr = taskEncodeArg (deRefStaticPtr ptr)

-- | The master's decoder for one result of a static task (throws if the
-- bytes are not one value of the result type).
taskResultDecoder :: StaticPtr (Task a b) -> B.ByteString -> IO b
taskResultDecoder ptr = taskDecodeResult (deRefStaticPtr ptr)

-- | Find the runner for a reference in this binary's static pointer table,
-- checking the types; 'Left' says why it cannot run here.
lookupRunner :: TaskRef -> IO (Either String Runner)
lookupRunner = lookupTyped (\(t :: Task () ()) -> let r = taskRunner t in
                              (r, runnerArgType r, runnerResultType r, runnerTypes r))

-- | Look a reference up in the static pointer table as a value of type @x@
-- (a 'Task' or a stream process, with its element types erased) and check
-- its fingerprints. Sound because the master only sends keys of pointers
-- of that kind, and a peer with another binary is refused at the handshake.
lookupTyped :: (x -> (r, Fingerprint, Fingerprint, String)) -> TaskRef -> IO (Either String r)
lookupTyped view ref = do
  found <- unsafeLookupStaticPtr (refKey ref)
  pure $ case found of
    Nothing -> Left ("unknown static key " ++ show (refKey ref) ++ " for " ++ refName ref
                     ++ ": this worker's binary has no such function")
    Just ptr ->
      let (r, argT, resT, types) = view (deRefStaticPtr ptr)
      in if argT /= refArgType ref || resT /= refResultType ref
           then Left ("type mismatch for " ++ refName ref ++ ": the worker's function has type "
                      ++ types ++ ", the caller expected other types")
           else Right r
