{-# LANGUAGE ScopedTypeVariables, StaticPointers #-}
-- | Results that stay on the workers: a farm whose results are left where
-- they were made, behind 'Ref's, and later tasks that run where their
-- inputs live (Ray's object references, Dask's futures, Spark's cached
-- partitions).
--
-- > squareTask :: StaticPtr (RefTask Int Int)
-- > squareTask = static (refTask (\x -> x * x))     -- top level, not in Main
-- >
-- > squares <- farmRefs cluster squareTask [1 .. 1000]   -- results stay on the workers
-- > halves  <- mapRefs cluster halfTask squares           -- each runs where its input is
-- > xs      <- fetchMany cluster halves                   -- only now do values come back
-- > releaseMany cluster (squares ++ halves)
--
-- Refs are states of a population of their own, held and stepped as the
-- evolve API's ("Herd.Master.Job.Evolve"), which keeps values on the
-- workers behind ids, runs each step
-- where its state is (moving a state only when an idle worker would
-- otherwise wait longer), and recomputes a state lost with its worker from
-- its lineage: so do Refs. A 'mapRefs' keeps its inputs (each input is
-- also a child of its step, under a new id the 'Ref' then names), and a
-- 'fetch' keeps the value where it is.
--
-- Promises: a value computed once is the value every later use sees, also
-- when the worker holding it was killed meanwhile (it is recomputed from
-- the task and input that made it, as evolve states are); a released
-- 'Ref' is gone from its worker, and using it throws 'UnknownStates';
-- calls that use Refs take turns with each other, and run beside evolve
-- calls (a 'Herd.Master.Job.Evolve.resetStates' keeps every Ref); a call
-- that fails (a throwing function) loses the Refs it was given (they are
-- refused afterwards), and every other Ref stays.
module Herd.Master.Job.Refs
  ( Ref
  , RefTask
  , RefCodecs
  , refTask
  , putRefs
  , farmRefs
  , mapRefs
  , RefTaskWith
  , RefWithCodecs
  , refTaskWith
  , mapRefsWith
  , RefQuery
  , QueryCodecs
  , refQuery
  , queryRefs
  , fetch
  , fetchMany
  , release
  , releaseMany
  ) where

import Control.Exception (evaluate, throwIO)
import Control.Monad (forM, forM_)
import qualified Data.ByteString as B
import Data.IORef
import qualified Data.Map.Strict as M
import qualified Data.Set as S
import Herd.Wire.Writer (Encoder)
import Data.Store (Store, encode)
import Data.Typeable (Proxy (..), Typeable, typeRep, typeRepFingerprint)
import GHC.StaticPtr (StaticPtr, deRefStaticPtr)
import Herd.Task.Closure
import Herd.Core.Error (HerdError (..))
import Herd.Master.Job.Evolve (defaultEvolveOptions, evolveRaw)
import Herd.Core.Evolve.StateMap (StateId)
import Herd.Master.Job.Population (addStatesRaw, releaseStatesRaw)
import Herd.Task.Evolver (EvolveRunner (..), decodedRunner)
import Herd.Master (Cluster, clusterRefRegistry)
import Herd.Master.Cluster (clusterTag, describeTag)
import Data.Word (Word64)
import Herd.Wire.Value (decodeValueIO, valueEncoder)

-- | A value of type @a@ held on one of the cluster's workers. It carries
-- its cluster's tag: given to another cluster, it is refused
-- ('ForeignHandle').
data Ref a = Ref !Word64 !(IORef (Maybe StateId))

instance Eq (Ref a) where
  Ref _ a == Ref _ b = a == b

instance Show (Ref a) where
  show (Ref t _) = "Ref of " ++ describeTag t

-- | What the caller needs of a 'RefTask': how to encode its inputs.
newtype RefCodecs a b = RefCodecs (a -> B.ByteString)

-- | A function whose results stay on the workers. Build one with
-- 'refTask' inside a @static@ form.
type RefTask a b = Closure (RefCodecs a b) EvolveRunner

-- | Wrap a function for 'farmRefs' and 'mapRefs'.
refTask :: forall a b. (Store a, Store b, Typeable a, Typeable b) => (a -> b) -> RefTask a b
refTask f = Closure
  { closureKind = EvolverClosure
  , closureLabel = Nothing
  , closureIn = typeRepFingerprint (typeRep (Proxy :: Proxy (a, Bool)))
  , closureOut = typeRepFingerprint (typeRep (Proxy :: Proxy (a, b)))
  , closureTypes = show (typeRep (Proxy :: Proxy a)) ++ " -> " ++ show (typeRep (Proxy :: Proxy b))
  , closureCodecs = RefCodecs encode
  , closureRunner = decodedRunner $ \stateBytes (x :: a) (keep :: Bool) -> do
      made <- evaluate (encode (f x))
      -- kept: the input stays too, as the first child (its bytes as they are)
      pure ([ (stateBytes, B.empty) | keep ] ++ [(made, B.empty)])
  }
{-# INLINE refTask #-}

-- | What the caller needs of a 'RefTaskWith': how to encode its arguments.
newtype RefWithCodecs a c b = RefWithCodecs (c -> Encoder)

-- | A function of a held value and an argument whose result stays on the
-- worker beside the value. Build one with 'refTaskWith' inside a
-- @static@ form.
type RefTaskWith a c b = Closure (RefWithCodecs a c b) EvolveRunner

-- | Wrap a function for 'mapRefsWith'.
refTaskWith :: forall a c b. (Store a, Store c, Store b, Typeable a, Typeable c, Typeable b) => (a -> c -> b) -> RefTaskWith a c b
refTaskWith f = withArgument (Proxy :: Proxy b) (RefWithCodecs valueEncoder) $ \stateBytes (x :: a) (arg :: c) -> do
  made <- evaluate (encode (f x arg))
  -- the input stays, as the first child (its bytes as they are)
  pure [(stateBytes, B.empty), (made, B.empty)]
{-# INLINE refTaskWith #-}

-- A held value's bytes, kept where they are and given back as the output.
fetchStep :: StaticPtr (Closure () EvolveRunner)
fetchStep = static (named "fetch" (Closure EvolverClosure Nothing fp fp "a -> a" ()
                                     (EvolveRunner (\stateBytes _ -> pure (Right [(stateBytes, stateBytes)])))))
  where fp = typeRepFingerprint (typeRep (Proxy :: Proxy B.ByteString))

-- | What the caller needs of a 'RefQuery': how to encode its arguments
-- and decode its results.
data QueryCodecs a c b = QueryCodecs (c -> Encoder) (B.ByteString -> IO b)

-- | A function of a held value and an argument whose result comes back,
-- the value staying where it is. Build one with 'refQuery' inside a
-- @static@ form.
type RefQuery a c b = Closure (QueryCodecs a c b) EvolveRunner

-- | Wrap a function for 'queryRefs'.
refQuery :: forall a c b. (Store a, Store c, Store b, Typeable a, Typeable c, Typeable b) => (a -> c -> b) -> RefQuery a c b
refQuery f = withArgument (Proxy :: Proxy b) (QueryCodecs valueEncoder decodeValueIO) $ \stateBytes (x :: a) (arg :: c) -> do
  answer <- evaluate (encode (f x arg))
  pure [(stateBytes, answer)]

-- A step of a held value of type @a@ and an argument of type @c@ that
-- makes a @b@: its types, its caller's codecs and what it gives.
withArgument :: forall a c b k. (Store a, Store c, Typeable a, Typeable c, Typeable b)
             => Proxy b -> k -> (B.ByteString -> a -> c -> IO [(B.ByteString, B.ByteString)]) -> Closure k EvolveRunner
withArgument _ codecs step = Closure
  { closureKind = EvolverClosure
  , closureLabel = Nothing
  , closureIn = typeRepFingerprint (typeRep (Proxy :: Proxy (a, c)))
  , closureOut = typeRepFingerprint (typeRep (Proxy :: Proxy (a, b)))
  , closureTypes = show (typeRep (Proxy :: Proxy a)) ++ " -> " ++ show (typeRep (Proxy :: Proxy c))
                   ++ " -> " ++ show (typeRep (Proxy :: Proxy b))
  , closureCodecs = codecs
  , closureRunner = decodedRunner step
  }
{-# INLINE withArgument #-}
{-# INLINE refQuery #-}

-- | Hold these values on the workers, spread over them, without running
-- anything (Ray's @put@).
putRefs :: Store a => Cluster -> [a] -> IO [Ref a]
putRefs cluster xs = do
  ids <- addStatesRaw (clusterRefRegistry cluster) Nothing cluster (map encode xs)
  mapM (newRef cluster) ids

-- | Run the function on each referenced value with its argument, where the
-- value is held, and bring the results back, in order; the values stay.
-- A Ref may appear once per call.
queryRefs :: Cluster -> StaticPtr (RefQuery a c b) -> [(Ref a, c)] -> IO [b]
queryRefs cluster f pairs = do
  let QueryCodecs encodeArg decodeAnswer = closureCodecs (deRefStaticPtr f)
  ids <- distinct (closureName f) =<< mapM (current cluster . fst) pairs
  (out, _) <- evolveRaw (clusterRefRegistry cluster) M.empty defaultEvolveOptions cluster (closureRef f) encodeArg decodeAnswer
                        (M.fromList (zip ids (map snd pairs)))
  forM (zip pairs ids) $ \((Ref _ r, _), i) -> case M.lookup i out of
    Just [(kept, answer)] -> answer <$ writeIORef r (Just kept)
    _ -> throwIO (EvolveFailed (closureName f) (show i) "its step did not keep its value and give one result")

-- | Run the function on every input on the workers and leave each result
-- where it was made.
farmRefs :: Cluster -> StaticPtr (RefTask a b) -> [a] -> IO [Ref b]
farmRefs cluster f xs = do
  let RefCodecs enc = closureCodecs (deRefStaticPtr f)
  ids <- addStatesRaw (clusterRefRegistry cluster) Nothing cluster (map enc xs)
  (out, _) <- evolveRaw (clusterRefRegistry cluster) M.empty defaultEvolveOptions cluster (closureRef f) valueEncoder (\_ -> pure ())
                        (M.fromList [ (i, False) | i <- ids ])
  forM ids $ \i -> case M.lookup i out of
    Just [(child, ())] -> newRef cluster child
    _ -> throwIO (EvolveFailed (closureName f) (show i) "its step did not leave one result")

-- | Run the function on every referenced value, where it is held, and
-- leave each result there. The inputs stay held.
mapRefs :: Cluster -> StaticPtr (RefTask a b) -> [Ref a] -> IO [Ref b]
mapRefs cluster f refs = do
  ids <- distinct (closureName f) =<< mapM (current cluster) refs
  (out, _) <- evolveRaw (clusterRefRegistry cluster) M.empty defaultEvolveOptions cluster (closureRef f) valueEncoder (\_ -> pure ())
                        (M.fromList [ (i, True) | i <- ids ])
  keptAndMade cluster (closureName f) (zip refs ids) out

-- | Run the function on every referenced value with its argument, where
-- the value is held, and leave each result there. The inputs stay held.
-- A Ref may appear once per call.
mapRefsWith :: Cluster -> StaticPtr (RefTaskWith a c b) -> [(Ref a, c)] -> IO [Ref b]
mapRefsWith cluster f pairs = do
  let RefWithCodecs enc = closureCodecs (deRefStaticPtr f)
  ids <- distinct (closureName f) =<< mapM (current cluster . fst) pairs
  (out, _) <- evolveRaw (clusterRefRegistry cluster) M.empty defaultEvolveOptions cluster (closureRef f) enc (\_ -> pure ())
                        (M.fromList (zip ids (map snd pairs)))
  keptAndMade cluster (closureName f) (zip (map fst pairs) ids) out

-- Each input lives on as the first child of its step, and the second is
-- the new value.
keptAndMade :: Cluster -> String -> [(Ref a, StateId)] -> M.Map StateId [(StateId, ())] -> IO [Ref b]
keptAndMade cluster name inputs out = do
  forM_ inputs $ \(Ref _ r, i) -> case M.lookup i out of
    Just ((kept, ()) : _) -> writeIORef r (Just kept)
    _ -> pure ()
  forM inputs $ \(_, i) -> case M.lookup i out of
    Just [_, (made, ())] -> newRef cluster made
    _ -> throwIO (EvolveFailed name (show i) "its step did not leave its input and one result")

-- | Bring one referenced value back; it stays held.
fetch :: Store a => Cluster -> Ref a -> IO a
fetch cluster r = head <$> fetchMany cluster [r]

-- | Bring these referenced values back, in order; they stay held.
fetchMany :: Store a => Cluster -> [Ref a] -> IO [a]
fetchMany cluster refs = do
  ids <- mapM (current cluster) refs
  (out, _) <- evolveRaw (clusterRefRegistry cluster) M.empty defaultEvolveOptions cluster (closureRef fetchStep) (\() -> valueEncoder ()) decodeValueIO
                        (M.fromList [ (i, ()) | i <- ids ])
  forM (zip refs ids) $ \(Ref _ r, i) -> case M.lookup i out of
    Just [(kept, value)] -> value <$ writeIORef r (Just kept)
    _ -> throwIO (EvolveFailed "fetch" (show i) "the value did not come back")

-- | Drop this value from its worker; the Ref may not be used again.
release :: Cluster -> Ref a -> IO ()
release cluster r = releaseMany cluster [r]

-- | Drop these values from the workers; the Refs may not be used again.
releaseMany :: Cluster -> [Ref a] -> IO ()
releaseMany cluster refs = do
  mapM_ (ownRef cluster) refs
  ids <- fmap concat $ forM refs $ \(Ref _ r) -> atomicModifyIORef' r (\i -> (Nothing, maybe [] pure i))
  releaseStatesRaw (clusterRefRegistry cluster) cluster ids

-- The states of one call, refused with 'ArgumentError' if one comes twice
-- (a step's input is per state, and a value named twice would be stepped
-- once).
distinct :: String -> [StateId] -> IO [StateId]
distinct name ids = case [ k | (k, (i, before)) <- zip [0 ..] (zip ids (scanl (flip S.insert) S.empty ids)), S.member i before ] of
  [] -> pure ids
  k : _ -> throwIO (ArgumentError k name "this Ref is named twice in one call")

-- A Ref's state now, or 'UnknownStates' if it was released
-- ('ForeignHandle' if another cluster made it).
current :: Cluster -> Ref a -> IO StateId
current cluster ref@(Ref _ r) = do
  ownRef cluster ref
  readIORef r >>= maybe (throwIO (UnknownStates ["a released Ref"])) pure

-- Refuse a Ref that another cluster made.
ownRef :: Cluster -> Ref a -> IO ()
ownRef cluster (Ref t _)
  | t == clusterTag cluster = pure ()
  | otherwise = throwIO (ForeignHandle "a Ref" (describeTag t) (describeTag (clusterTag cluster)))

-- A Ref of this cluster for this state.
newRef :: Cluster -> StateId -> IO (Ref a)
newRef cluster i = Ref (clusterTag cluster) <$> newIORef (Just i)

closureName :: StaticPtr (Closure c r) -> String
closureName f = describePtr f (closureLabel (deRefStaticPtr f))

