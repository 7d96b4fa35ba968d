{-# LANGUAGE ScopedTypeVariables #-}
-- | Evolve functions that can run on a worker: the step of the stateful
-- evolve API ("Herd.Master.Job.Evolve"), shipped as a static pointer with the codecs
-- of its state, input and output types.
--
-- > stepTask :: StaticPtr (Evolver Particle Obs Weight)
-- > stepTask = static (evolver step)
--
-- As with "Herd.Task", bind the pointers at top level in a module other
-- than @Main@.
--
-- Promise: a worker only runs an evolve function whose key it holds and
-- whose state, input and output types are the caller's; it refuses with a
-- message naming the function otherwise.
module Herd.Task.Evolver
  ( Evolve
  , Evolver
  , EvolverCodecs (..)
  , evolver
    -- * For the drivers
  , EvolveRunner (..)
  , decodedRunner
  , evolverRef
  , evolverStateEncoder
  , evolverInputEncoder
  , evolverOutputDecoder
  , lookupEvolver
  ) where

import Control.Exception (SomeException, displayException, evaluate, try)
import qualified Data.ByteString as B
import Data.Store (Store, encode)
import Data.Typeable (Proxy (..), Typeable, typeRep, typeRepFingerprint)
import GHC.StaticPtr (StaticPtr, deRefStaticPtr)
import Herd.Core.Base (TaskRef)
import Herd.Wire.Writer (Encoder)
import Herd.Task.Closure
import Herd.Wire.Value (decodeValueIO, valueEncoder)

-- | One step of a stateful computation: a state and its input give the
-- children (zero, one or many new states), each with an output.
type Evolve s i o = s -> i -> [(s, o)]

-- | An evolve function that a worker can run: a 'Closure'. Build one with
-- 'evolver' inside a @static@ form.
type Evolver s i o = Closure (EvolverCodecs s i o) EvolveRunner

-- | The caller's side of an evolve function.
data EvolverCodecs s i o = EvolverCodecs
  { encodeState  :: s -> Encoder
  , encodeInput  :: i -> Encoder
  , decodeOutput :: B.ByteString -> IO o
  }

-- | The type-erased side of an evolve function that a worker runs.
newtype EvolveRunner = EvolveRunner
  { erApply :: B.ByteString -> B.ByteString -> IO (Either ClosureError [(B.ByteString, B.ByteString)])
    -- ^ from an encoded state and input to the children's encoded states
    -- and outputs, all forced; 'Left' when the state or input does not
    -- decode; throws what the function throws
  }

-- | Wrap an evolve function so it can be shipped as a static pointer.
evolver :: forall s i o. (Store s, Store i, Store o, Typeable s, Typeable i, Typeable o)
        => Evolve s i o -> Evolver s i o
evolver f = Closure
  { closureKind = EvolverClosure
  , closureLabel = Nothing
  , closureIn = typeRepFingerprint (typeRep (Proxy :: Proxy (s, i)))
  , closureOut = typeRepFingerprint (typeRep (Proxy :: Proxy [(s, o)]))
  , closureTypes = show (typeRep (Proxy :: Proxy s)) ++ " -> " ++ show (typeRep (Proxy :: Proxy i))
                   ++ " -> [(" ++ show (typeRep (Proxy :: Proxy s)) ++ ", " ++ show (typeRep (Proxy :: Proxy o)) ++ ")]"
  , closureCodecs = EvolverCodecs valueEncoder valueEncoder decodeValueIO
  , closureRunner = decodedRunner $ \_ (s :: s) (i :: i) ->
      -- encoding forces every child and output, so a throw happens here
      evaluate (forceAll [ (encode s', encode o) | (s', o) <- f s i ])
  }
  where
    forceAll xs = foldr (\(a, b) rest -> a `seq` b `seq` rest) xs xs

-- | A runner whose step is given the state and input decoded (and the
-- state's bytes as they came); a state or input that does not decode is
-- 'DoesNotDecode', what the step throws is thrown.
decodedRunner :: (Store s, Store i) => (B.ByteString -> s -> i -> IO [(B.ByteString, B.ByteString)]) -> EvolveRunner
decodedRunner step = EvolveRunner $ \stateBytes inputBytes -> do
  decoded <- try ((,) <$> decodeValueIO stateBytes <*> decodeValueIO inputBytes)
  case decoded of
    Left (e :: SomeException) -> pure (Left (DoesNotDecode (displayException e)))
    Right (s, i) -> Right <$> step stateBytes s i

-- | The reference the master sends to name a static evolve function.
evolverRef :: StaticPtr (Evolver s i o) -> TaskRef
evolverRef = closureRef

-- | The caller's encoder for a state (to upload or move it).
evolverStateEncoder :: StaticPtr (Evolver s i o) -> s -> Encoder
evolverStateEncoder ptr = encodeState (closureCodecs (deRefStaticPtr ptr))

-- | The caller's encoder for an input.
evolverInputEncoder :: StaticPtr (Evolver s i o) -> i -> Encoder
evolverInputEncoder ptr = encodeInput (closureCodecs (deRefStaticPtr ptr))

-- | The caller's decoder for an output (throws if the bytes are not one).
evolverOutputDecoder :: StaticPtr (Evolver s i o) -> B.ByteString -> IO o
evolverOutputDecoder ptr = decodeOutput (closureCodecs (deRefStaticPtr ptr))

-- | Find an evolve function in this binary's static pointer table,
-- checking its kind and types.
lookupEvolver :: TaskRef -> IO (Either String EvolveRunner)
lookupEvolver ref = either (Left . describeClosureError) Right <$> lookupClosure EvolverClosure ref
