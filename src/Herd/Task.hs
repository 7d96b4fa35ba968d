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
  , taskEncodeArgs
  , taskDecodeResults
  , Runner (..)
  , BatchFailure (..)
  , lookupRunner
  ) where

import Control.Exception
  (SomeAsyncException, SomeException, evaluate, fromException, throwIO, try, displayException)
import qualified Data.ByteString as B
import Data.Store (Store, decode, encode)
import Data.Typeable (Proxy (..), Typeable, typeRep)
import GHC.Fingerprint (Fingerprint (..))
import GHC.StaticPtr
  (StaticKey, StaticPtr, StaticPtrInfo (..), deRefStaticPtr, staticKey, staticPtrInfo,
   unsafeLookupStaticPtr)
import Data.Typeable (typeRepFingerprint)

-- | A function from @a@ to @b@ that a worker can run, with what it takes to
-- ship its arguments and results. Build one with 'task' inside a @static@
-- form.
data Task a b = Task
  { taskLabel   :: !(Maybe String)
  , taskEncode  :: [a] -> B.ByteString
  , taskDecode  :: Int -> B.ByteString -> Either String [b]
  , taskRunner  :: !Runner
  }

-- | The type-erased side of a task that a worker runs: it only ever sees
-- bytes.
data Runner = Runner
  { runnerArgType     :: !Fingerprint  -- ^ fingerprint of the argument type
  , runnerResultType  :: !Fingerprint  -- ^ fingerprint of the result type
  , runnerTypes       :: !String       -- ^ the function's type, for messages
  , runnerRun         :: Int -> B.ByteString -> IO (Either BatchFailure B.ByteString)
    -- ^ decode a batch of this many arguments, apply the function to each,
    -- force and encode the results as one list.
  }

-- | Why a batch produced no results.
data BatchFailure
  = ArgumentsUndecodable String
    -- ^ the arguments did not decode as the expected count of the argument type
  | TaskThrew Int String
    -- ^ the function threw on the task at this position in the batch
  deriving (Eq, Show)

-- | Wrap a function so that it can be shipped as a static pointer.
task :: forall a b. (Store a, Store b, Typeable a, Typeable b) => (a -> b) -> Task a b
task f = Task
  { taskLabel  = Nothing
  , taskEncode = encode
  , taskDecode = \count bytes -> do
      checkListLength count bytes
      either (Left . displayException) Right (decode bytes)
  , taskRunner = Runner
      { runnerArgType    = typeRepFingerprint (typeRep (Proxy :: Proxy a))
      , runnerResultType = typeRepFingerprint (typeRep (Proxy :: Proxy b))
      , runnerTypes      = show (typeRep (Proxy :: Proxy a)) ++ " -> "
                             ++ show (typeRep (Proxy :: Proxy b))
      , runnerRun        = run
      }
  }
  where
    -- One decode and one encode per batch, not per task: per-task buffers
    -- cost more than a microsecond task itself. Only when the batch throws
    -- are the results forced one by one, to find the task that threw.
    run count bytes = case checkListLength count bytes >> firstLeft (decode bytes) of
      Left err -> pure (Left (ArgumentsUndecodable err))
      Right (xs :: [a]) -> do
            let ys = map f xs
            whole <- tryUser (evaluate (encode ys))
            case whole of
              Right encoded -> pure (Right encoded)
              Left batchMsg -> Left <$> firstFailure batchMsg (zip [0 ..] ys)
    -- If no single result throws on its own, report the batch's own error.
    firstFailure batchMsg [] = pure (TaskThrew 0 batchMsg)
    firstFailure batchMsg ((i, y) : rest) = do
      one <- tryUser (evaluate (encode y))
      case one of
        Left msg -> pure (TaskThrew i msg)
        Right _ -> firstFailure batchMsg rest

    firstLeft = either (Left . displayException) Right

-- | Check the element count a @store@-encoded list claims (its first eight
-- bytes, little-endian) against the count the envelope promised, before
-- @store@ sees it: store would otherwise allocate or loop for whatever
-- count a peer claims (a list of zero-size elements costs no bytes).
checkListLength :: Int -> B.ByteString -> Either String ()
checkListLength count bytes
  | B.length bytes < 8 = Left "list shorter than its length field"
  | claimed /= toInteger count =
      Left ("list claims " ++ show claimed ++ " elements where the batch has " ++ show count)
  | otherwise = Right ()
  where
    claimed = foldr (\w acc -> acc * 256 + toInteger w) 0 (B.unpack (B.take 8 bytes)) :: Integer

-- Run an action, turning any synchronous exception into its text.
tryUser :: IO x -> IO (Either String x)
tryUser act = do
  outcome <- try act
  case outcome of
    Right x -> pure (Right x)
    Left (e :: SomeException)
      | Just (_ :: SomeAsyncException) <- fromException e -> throwIO e
      | otherwise -> pure (Left (displayException e))

-- | Give a task a human name, used in error messages and statistics.
named :: String -> Task a b -> Task a b
named label t = t { taskLabel = Just label }

-- | What a master sends to name a function: its static key, a readable
-- name, and the fingerprints of the types it expects.
data TaskRef = TaskRef
  { refKey        :: !StaticKey
  , refName       :: !String
  , refArgType    :: !Fingerprint
  , refResultType :: !Fingerprint
  } deriving (Eq, Show)

-- | The reference a master sends for a static task.
taskRef :: StaticPtr (Task a b) -> TaskRef
taskRef ptr = TaskRef
  { refKey        = staticKey ptr
  , refName       = describe
  , refArgType    = runnerArgType runner
  , refResultType = runnerResultType runner
  }
  where
    t = deRefStaticPtr ptr
    runner = taskRunner t
    info = staticPtrInfo ptr
    place = spInfoModuleName info ++ ":" ++ show (fst (spInfoSrcLoc info))
            ++ ":" ++ show (snd (spInfoSrcLoc info))
    describe = maybe ("static task at " ++ place) (\l -> l ++ " (" ++ place ++ ")") (taskLabel t)

-- | Encode a batch of arguments on the master.
taskEncodeArgs :: StaticPtr (Task a b) -> [a] -> B.ByteString
taskEncodeArgs ptr = taskEncode (deRefStaticPtr ptr)

-- | Decode a batch of results on the master, given how many it must hold.
taskDecodeResults :: StaticPtr (Task a b) -> Int -> B.ByteString -> Either String [b]
taskDecodeResults ptr = taskDecode (deRefStaticPtr ptr)

-- | Find the runner for a reference in this binary's static pointer table,
-- checking the types. 'Left' says why it cannot run, naming the function.
--
-- Keys are trusted to point at tasks once the peer has passed the build
-- handshake: a master of the same build only sends keys of @StaticPtr (Task
-- a b)@ values, which the compiler typed.
lookupRunner :: TaskRef -> IO (Either String Runner)
lookupRunner ref = do
  found <- unsafeLookupStaticPtr (refKey ref)
  pure $ case found of
    Nothing -> Left ("unknown static key " ++ show (refKey ref) ++ " for " ++ refName ref
                     ++ ": this worker's binary has no such function")
    Just (ptr :: StaticPtr (Task () ())) ->
      let runner = taskRunner (deRefStaticPtr ptr)
      in if runnerArgType runner /= refArgType ref || runnerResultType runner /= refResultType ref
           then Left ("type mismatch for " ++ refName ref ++ ": the worker's function has type "
                      ++ runnerTypes runner ++ ", the caller expected other types")
           else Right runner
