{-# LANGUAGE ScopedTypeVariables #-}
-- | The one closure record of herd: a function a worker can run, as a
-- value behind a GHC static pointer. A bare @StaticPtr (a -> b)@ is not
-- enough: GHC's static pointer table keeps only the value, so a worker
-- given a key could neither decode the argument nor check that the types
-- are the ones the master meant. A 'Closure' is the function's worker side
-- (type-erased, working on bytes) together with its kind, the fingerprints
-- of its two sides and the caller's codecs, captured where the types are
-- known. Tasks ("Herd.Task"), stream processes ("Herd.Task.Process") and evolve
-- functions ("Herd.Task.Evolver") are thin constructors over it.
--
-- Promise: 'lookupClosure' returns a runner only for a key this binary
-- holds, of the kind asked for, whose fingerprints are the caller's; in
-- every other case it says which ('ClosureError').
module Herd.Task.Closure
  ( Closure (..)
  , ClosureKind (..)
  , closureRef
  , named
  , ClosureError (..)
  , describeClosureError
  , lookupClosure
  , cachedLookup
  , describePtr
  ) where

import GHC.Fingerprint (Fingerprint)
import GHC.StaticPtr (StaticPtr, StaticPtrInfo (..), deRefStaticPtr, staticKey, staticPtrInfo, unsafeLookupStaticPtr)
import Data.IORef (IORef, modifyIORef', readIORef)
import qualified Data.Map.Strict as M
import Herd.Core.Base (TaskRef (..))

-- | What a closure is for: the message that names it must agree.
data ClosureKind = TaskClosure | ProcessClosure | EvolverClosure | ReducerClosure | PartitionClosure | ShuffleClosure
  deriving (Eq, Show)

-- | A function a worker can run: @c@ is the caller's side (codecs), @r@
-- the worker's side (a runner on bytes).
data Closure c r = Closure
  { closureKind   :: !ClosureKind
  , closureLabel  :: !(Maybe String)   -- ^ a name for messages and statistics
  , closureIn     :: !Fingerprint      -- ^ the argument side's type
  , closureOut    :: !Fingerprint      -- ^ the result side's type
  , closureTypes  :: !String           -- ^ the function's type, for messages
  , closureCodecs :: c                 -- ^ never forced on a worker
  , closureRunner :: r
  }

-- | Give a closure a name for error messages and statistics.
named :: String -> Closure c r -> Closure c r
named label c = c { closureLabel = Just label }

-- | The reference the master sends to name a static closure.
closureRef :: StaticPtr (Closure c r) -> TaskRef
closureRef ptr = TaskRef
  { refKey        = staticKey ptr
  , refName       = describePtr ptr (closureLabel c)
  , refArgType    = closureIn c
  , refResultType = closureOut c
  }
  where c = deRefStaticPtr ptr

-- | A readable name for a static pointer: its label if it has one, and
-- where it was written.
describePtr :: StaticPtr x -> Maybe String -> String
describePtr ptr label = maybe ("static function at " ++ place) (\l -> l ++ " (" ++ place ++ ")") label
  where
    info = staticPtrInfo ptr
    place = spInfoModuleName info ++ ":" ++ show (fst (spInfoSrcLoc info))
            ++ ":" ++ show (snd (spInfoSrcLoc info))

-- | Why a closure cannot run here, or an argument cannot be given to it.
data ClosureError
  = NotInThisBuild !String              -- ^ no such key in this binary (the function's name)
  | WrongKind !String !ClosureKind !ClosureKind
    -- ^ the key names another kind of closure (name, asked for, found)
  | TypesDiffer !String !String         -- ^ name, and the worker's type of it
  | DoesNotDecode !String               -- ^ an argument, state or input does not decode
  deriving (Eq, Show)

-- | The sentence a worker sends back.
describeClosureError :: ClosureError -> String
describeClosureError e = case e of
  NotInThisBuild name -> "unknown static key for " ++ name ++ ": this worker's binary has no such function"
  WrongKind name wanted found -> name ++ " is a " ++ kindName found ++ ", not a " ++ kindName wanted
  TypesDiffer name types -> "type mismatch for " ++ name ++ ": the worker's function has type " ++ types
                            ++ ", the caller expected other types"
  DoesNotDecode why -> why
  where
    kindName k = case k of
      TaskClosure -> "task"
      ProcessClosure -> "stream process"
      EvolverClosure -> "evolve function"
      ReducerClosure -> "keyed reducer"
      PartitionClosure -> "partition function"
      ShuffleClosure -> "shuffle"

-- | Find the runner of a closure of this kind in this binary's static
-- pointer table, checking its kind and its types. Sound because the
-- master sends only keys of closures, and a peer with another binary is
-- refused at the handshake.
lookupClosure :: forall r. ClosureKind -> TaskRef -> IO (Either ClosureError r)
lookupClosure kind ref = do
  found <- unsafeLookupStaticPtr (refKey ref)
  pure $ case found of
    Nothing -> Left (NotInThisBuild (refName ref))
    Just ptr ->
      let c = deRefStaticPtr ptr :: Closure () r
      in if closureKind c /= kind then Left (WrongKind (refName ref) kind (closureKind c))
         else if closureIn c /= refArgType ref || closureOut c /= refResultType ref
           then Left (TypesDiffer (refName ref) (closureTypes c))
           else Right (closureRunner c)

-- | A lookup done once per reference: the answer (found, or why not) is
-- kept in the cache, so a worker looks each function up once.
cachedLookup :: IORef (M.Map TaskRef (Either String r)) -> (TaskRef -> IO (Either String r)) -> TaskRef
             -> IO (Either String r)
cachedLookup cache look ref = do
  known <- M.lookup ref <$> readIORef cache
  case known of
    Just r -> pure r
    Nothing -> do
      r <- look ref
      modifyIORef' cache (M.insert ref r)
      pure r
