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
  , TaskCodecs (..)
  , task
  , showingInputs
  , named
    -- * Using tasks (for the master and worker drivers)
  , TaskRef (..)
  , taskRef
  , taskCodecs
  , Runner (..)
  , lookupRunner
  , tryUser
  , describePtr
  ) where

import Control.Exception (SomeAsyncException, SomeException, evaluate, fromException, throwIO, try, displayException)
import qualified Data.ByteString as B
import Data.Store (PeekException, Store, decode, encode)
import Data.Typeable (Proxy (..), Typeable, typeRep, typeRepFingerprint)
import GHC.StaticPtr (StaticPtr, deRefStaticPtr)
import Herd.Core.Base (Range, TaskRef (..))
import Herd.Task.Closure
import Herd.Wire.ArgTable
import Herd.Wire.Scratch

-- | A function from @a@ to @b@ that a worker can run, with what it takes to
-- ship its arguments and results: a 'Closure'. Build one with 'task' inside
-- a @static@ form.
type Task a b = Closure (TaskCodecs a b) Runner

-- | The caller's side of a task: runs of values, not single ones
-- ("Herd.Wire.ArgTable").
data TaskCodecs a b = TaskCodecs
  { encodeArgs    :: [a] -> IO (Either (Int, String) ArgTable)
    -- ^ evaluate and encode all arguments ('Left': the first that threw)
  , decodeResults :: (Int -> b -> IO ()) -> [Range] -> B.ByteString -> IO (Either (Int, String) ())
    -- ^ decode a run of results for these tasks, handing each to the sink
  , resultWidth   :: Maybe Int
    -- ^ the encoded size of every result, if the type has one
  , stageResults  :: Arena -> [Range] -> B.ByteString -> IO (Either (Int, String) ())
    -- ^ check a run of results and keep them encoded (constant width only)
  , arenaResults  :: Arena -> Int -> [b]
    -- ^ the results kept, decoded as the list is walked
  , showArgument  :: Maybe (B.ByteString -> String)
    -- ^ an encoded argument shown for an error message ('showingInputs')
  , applyTask     :: a -> b
    -- ^ the function itself, for a "Herd.Par" child run where it was spawned
  }

-- | The worker's side of a task: it only ever sees bytes.
data Runner = Runner
  { runnerChunk :: Scratch -> B.ByteString -> Int -> IO ChunkOutcome
    -- ^ decode a run of this many arguments, apply the function, force
    -- and encode each result into the scratch buffer
  , runnerOne   :: B.ByteString -> IO (Either String B.ByteString)
    -- ^ apply the function to one argument's @store@ encoding: the
    -- result's encoding, or why not (a "Herd.Par" child stolen here)
  }

-- | Wrap a function so that it can be shipped as a static pointer.
--
-- Inlined where it is used, so that the loops over runs of values are
-- compiled for the task's own types (no dictionary call per value).
task :: forall a b. (Store a, Store b, Typeable a, Typeable b) => (a -> b) -> Task a b
task f = Closure
  { closureKind = TaskClosure
  , closureLabel = Nothing
  , closureIn = typeRepFingerprint (typeRep (Proxy :: Proxy a))
  , closureOut = typeRepFingerprint (typeRep (Proxy :: Proxy b))
  , closureTypes = show (typeRep (Proxy :: Proxy a)) ++ " -> " ++ show (typeRep (Proxy :: Proxy b))
  , closureCodecs = TaskCodecs buildArgTable decodeRun (constantWidth (Proxy :: Proxy b))
                               (stageRun (Proxy :: Proxy b)) arenaValues Nothing f
  , closureRunner = Runner (runChunk f) (runOne f)
  }
{-# INLINE task #-}

-- One argument's encoding in, its result's out (forced by encoding it).
runOne :: forall a b. (Store a, Store b) => (a -> b) -> B.ByteString -> IO (Either String B.ByteString)
runOne f bytes = case decode bytes :: Either PeekException a of
  Left e -> pure (Left ("its argument does not decode: " ++ displayException e))
  Right x -> tryUser (evaluate (encode (f x)))
{-# INLINE runOne #-}

-- | The same task, whose errors also show the input they are about
-- (cut to 200 characters): a farm's 'Herd.Error.TaskFailed' and
-- 'Herd.Error.TaskKilledWorkers' then end with @its input: ...@.
--
-- > hogTask = static (showingInputs (task hog))
showingInputs :: forall a b. (Show a, Store a) => Task a b -> Task a b
showingInputs t = t { closureCodecs = (closureCodecs t) { showArgument = Just shown } }
  where
    shown bytes = case decode bytes :: Either PeekException a of
      Right x -> cut (show x)
      Left _ -> "(does not decode)"
    cut s = case splitAt 200 s of
      (front, []) -> front
      (front, _) -> front ++ "..."

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

-- | The reference for a static task.
taskRef :: StaticPtr (Task a b) -> TaskRef
taskRef = closureRef

-- | The caller's codecs of a static task.
taskCodecs :: StaticPtr (Task a b) -> TaskCodecs a b
taskCodecs ptr = closureCodecs (deRefStaticPtr ptr)

-- | Find the runner for a reference in this binary's static pointer table,
-- checking its kind and types; 'Left' says why it cannot run here.
lookupRunner :: TaskRef -> IO (Either String Runner)
lookupRunner ref = either (Left . describeClosureError) Right <$> lookupClosure TaskClosure ref
