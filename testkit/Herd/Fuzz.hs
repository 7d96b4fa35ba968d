{-# LANGUAGE ScopedTypeVariables #-}
-- | Throwing mutated frames at herd's receivers: at a master, from a peer
-- that passed the handshake with the right secret, and at a worker's
-- serving loop, from its master's side of a link; over TCP, Unix sockets
-- and shared memory.
--
-- Each session sends one frame ("Herd.Fuzz.Mutate") and then a frame no
-- receiver accepts, and waits for the receiver to close the link: so every
-- frame is known to have been read, and a receiver that neither answers
-- nor closes within 5 s is counted as a hang. One session in 509 at a
-- master instead starts its frame and stops halfway: the master (its
-- 'configFrameDeadline' set to 1 s here) must drop it, not wait for ever. A master must keep serving
-- its real worker meanwhile (a small farm is checked every half second);
-- a worker's loop must end with its protocol-error exit, never another
-- exception (a crash).
module Herd.Fuzz
  ( FuzzTarget (..)
  , targetName
  , FuzzRow (..)
  , fuzzMaster
  , fuzzWorker
  , stallAtMaster
  , liveMB
  ) where

import Control.Concurrent
import Control.Concurrent.Async (forConcurrently_, withAsync)
import Control.Exception
import Control.Monad
import qualified Data.ByteString as B
import qualified Data.ByteString.Char8 as BC
import Data.IORef
import qualified Data.Text as T
import Data.Word (Word64)
import GHC.Stats (gcdetails_live_bytes, gc, getRTSStats, getRTSStatsEnabled)
import Herd.Transport.Auth (mkSecret)
import Herd.Core.Base (TaskRef)
import Herd.Core.Error (HerdError)
import Herd.Wire.Writer (Encoder)
import Herd.Sys.BuildId (buildIdentity)
import Herd.Sys.Clock (monotonicSeconds)
import Herd.Settings
import Herd.Fuzz.Mutate
import Herd.Master (Cluster, clusterAddress, withCluster)
import Herd.Packet (packetOf)
import Herd.Core.Packet.Policy (defaultPacketPolicy)
import Herd.Transport
import Herd.Transport.Shm (shmLoopback, upgradeWorker)
import Herd.Transport.Tcp (acceptTcp, connectTcp, listenPort, listenTcp)
import Herd.Transport.Unix (acceptUnix, connectUnix, listenUnix)
import Herd.Core.Wire
import Herd.Wire.Encode
import Herd.Node.Join (JoinRefused (..), joinMaster)
import Herd.Node.Worker (serve)
import Network.Socket (close)
import System.Exit (ExitCode (..))
import System.IO
import GHC.IO.Handle (hDuplicate, hDuplicateTo)
import System.Mem (performMajorGC)
import System.Posix.Process (getProcessID)
import System.Timeout (timeout)

-- | Whose receiver is fuzzed.
data FuzzTarget = AtMaster | AtWorker
  deriving (Eq, Show)

-- | The target's name in reports.
targetName :: FuzzTarget -> String
targetName t = case t of { AtMaster -> "master"; AtWorker -> "worker" }

-- | What one target over one transport did.
data FuzzRow = FuzzRow
  { rowTarget    :: !FuzzTarget
  , rowTransport :: !TransportKind
  , rowFrames    :: !Int     -- ^ mutated frames the receiver read
  , rowCrashes   :: !Int     -- ^ the receiver died of something other than its error exit
  , rowHangs     :: !Int     -- ^ sessions or checks that did not end within their time
  , rowDropped   :: !Int     -- ^ sessions the receiver ended by dropping the peer
  , rowChecks    :: !Int     -- ^ farms run on the master's real worker meanwhile (master only)
  , rowSeconds   :: !Double
  , rowLiveStart :: !(Maybe Double)  -- ^ live heap in MB before (needs @+RTS -T@)
  , rowLiveEnd   :: !(Maybe Double)  -- ^ and after
  }

-- | A peer that joins a master (with no worker of its own, and this
-- 'configFrameDeadline') over TCP, sends half of a frame and then
-- nothing: whether the master closed the link within five seconds, and
-- the master's log lines.
stallAtMaster :: Double -> IO (Bool, [String])
stallAtMaster deadline = do
  build <- buildIdentity
  secret <- either fail pure (mkSecret fuzzSecret)
  pid <- getProcessID
  logged <- newIORef []
  let cfg = defaultConfig { configWorkers = Just 0, configTransport = Just TcpTransport, configSecret = SecretValue fuzzSecret
                          , configLog = \l -> atomicModifyIORef' logged (\ls -> (l : ls, ())), configFrameDeadline = deadline }
      hello = WorkerHello protocolVersion build (fromIntegral pid) (T.pack "stall") (T.pack "stall") DirectLink noCpu
  closed <- withCluster cfg $ \cluster ->
    bracket (connectTcp "127.0.0.1" (snd (clusterAddress cluster))) closeConnection $ \conn -> do
      joined <- joinMaster secret B.empty build "the stalled master" hello conn
      either (throwIO . JoinRefused) (const (pure ())) joined
      sendRaw conn (B.take 10 (framed (B.replicate 64 7)))
      (/= Nothing) <$> timeout 5000000 (drain conn)
  ls <- readIORef logged
  pure (closed, reverse ls)

fuzzSecret :: B.ByteString
fuzzSecret = BC.pack "herd fuzz secret, on loopback only"

-- The frames of one session: the corpus packets, mutated by the seed.
corpusPackets :: [Encoder] -> IO [B.ByteString]
corpusPackets encs = do
  singles <- mapM (\e -> packetOf [e]) encs
  pairs <- mapM packetOf [ [a, b] | (a, b) <- zip encs (drop 1 encs) ]
  pure (singles ++ pairs)

pickFrame :: [B.ByteString] -> Word64 -> B.ByteString
pickFrame corpus seed = mutate seed (corpus !! fromIntegral (mixSeed seed 99 `mod` fromIntegral (length corpus)))

-- | Fuzz a master (with one real local worker over the transport) with
-- this many frames; the check runs a small farm and says whether it gave
-- the right results.
fuzzMaster :: TransportKind -> Int -> Word64 -> (Cluster -> IO Bool) -> IO FuzzRow
fuzzMaster kind frames seed check = do
  drops <- newIORef (0 :: Int)
  hangs <- newIORef (0 :: Int)
  checks <- newIORef (0 :: Int)
  corpus <- corpusPackets (map encodeFromWorker toMasterCorpus)
  build <- buildIdentity
  secret <- either fail pure (mkSecret fuzzSecret)
  pid <- getProcessID
  lives <- newIORef (Nothing, Nothing)
  t0 <- monotonicSeconds
  let cfg = defaultConfig
        { configWorkers = Just 1, configTransport = Just kind, configSecret = SecretValue fuzzSecret
        , configLog = \_ -> pure (), configFrameDeadline = 1
          -- the fuzzing peers join as workers and take the check's tasks
          -- before they are dropped: their ends are not the tasks' fault
        , configMaxTaskDeaths = 1000, configMaxJobDeaths = 1000000 }
      bump r = atomicModifyIORef' r (\n -> (n + 1, ()))
      lanes = 8 :: Int
  outcome <- try $ withCluster cfg $ \cluster -> do
    -- the heap is measured with the cluster up, before and after
    live0 <- liveMB
    let port = snd (clusterAddress cluster)
        connect = case kind of
          TcpTransport -> connectTcp "127.0.0.1" port
          _ -> connectUnix ("herd-" ++ show pid ++ "-" ++ show port)
        hello = WorkerHello protocolVersion build (fromIntegral pid) (T.pack "fuzz") (T.pack "fuzz")
                            (if kind == ShmTransport then ShmLink else DirectLink) noCpu
        session i = bracket connect closeConnection $ \conn -> do
          joined <- joinMaster secret B.empty build "the fuzzed master" hello conn
          case joined of
            Left why -> throwIO (JoinRefused ("the fuzzer could not join: " ++ why))
            Right _ -> do
              link <- if kind == ShmTransport then upgradeWorker 10 conn else pure conn
              let frame = pickFrame corpus (mixSeed seed (fromIntegral i))
                  -- half a frame: its header and less than its body
                  -- (one session in 509, spread over the lanes: each costs the deadline)
                  stalls = i `mod` 509 == 3 && B.length frame >= 2
                  half = B.take (4 + B.length frame `div` 2) (framed frame)
              if stalls
                then sendRaw link half `catch` \(_ :: SomeException) -> pure ()
                else mapM_ (\f -> sendFrameStrict link f `catch` \(_ :: SomeException) -> pure ()) [frame, sentinelFrame]
              -- a stalled frame is dropped by its deadline, well before any other rule
              closed <- timeout (if stalls then 3000000 else 5000000) (drain link)
              maybe (bump hangs) (const (bump drops)) closed
              when (kind == ShmTransport) (closeConnection link)
        -- a check that fails (throws) counts as a hang too: the loop goes on
        checking = forever $ do
          threadDelay 500000
          ok <- try (timeout 10000000 (check cluster))
          case ok of
            Right (Just True) -> pure ()
            Right _ -> bump hangs
            Left (_ :: HerdError) -> bump hangs
          bump checks
    withAsync checking $ \_ ->
      forConcurrently_ [0 .. lanes - 1] $ \lane -> forM_ [lane, lane + lanes .. frames - 1] session
    -- the real worker still serves after the last frame
    ok <- timeout 10000000 (check cluster)
    when (ok /= Just True) (bump hangs)
    live1 <- liveMB
    writeIORef lives (live0, live1)
  t1 <- monotonicSeconds
  (live0, live1) <- readIORef lives
  crashes <- case outcome of
    Right () -> pure 0
    Left (e :: SomeException) -> hPutStrLn stderr ("fuzz: the master failed: " ++ displayException e) >> pure 1
  row AtMaster kind frames crashes hangs drops checks (t1 - t0) live0 live1

-- | Fuzz a worker's serving loop with this many frames, each session on a
-- fresh link of the transport. The loop's error lines go to @/dev/null@
-- meanwhile.
fuzzWorker :: TransportKind -> Int -> Word64 -> TaskRef -> IO FuzzRow
fuzzWorker kind frames seed ref = do
  drops <- newIORef (0 :: Int)
  hangs <- newIORef (0 :: Int)
  crashes <- newIORef (0 :: Int)
  corpus <- corpusPackets (map encodeToWorker (toWorkerCorpus ref))
  let bump r = atomicModifyIORef' r (\n -> (n + 1, ()))
      maxFrame = 1024 * 1024
  live0 <- liveMB
  t0 <- monotonicSeconds
  withLinks kind $ \pairUp -> quietStderr $ forM_ [0 .. frames - 1] $ \i -> do
    (master, worker, release) <- pairUp
    done <- newEmptyMVar
    _ <- forkIO (try (serve worker 1 maxFrame defaultPacketPolicy 16) >>= putMVar done)
    -- what the worker answers (a few small messages for one frame) waits
    -- in the kernel's buffers: nothing needs to read it
    let frame = pickFrame corpus (mixSeed seed (fromIntegral i))
    mapM_ (\f -> sendFrameStrict master f `catch` \(_ :: SomeException) -> pure ()) [frame, sentinelFrame]
    ended <- timeout 5000000 (takeMVar done)
    case ended of
      Nothing -> bump hangs
      Just (Right ()) -> bump drops   -- it was told to stop, and did
      Just (Left (e :: SomeException))
        | Just (ExitFailure _) <- fromException e -> bump drops
        | otherwise -> bump crashes
    closeConnection master
    closeConnection worker
    release
  t1 <- monotonicSeconds
  live1 <- liveMB
  c <- readIORef crashes
  none <- newIORef 0
  row AtWorker kind frames c hangs drops none (t1 - t0) live0 live1

row :: FuzzTarget -> TransportKind -> Int -> Int -> IORef Int -> IORef Int -> IORef Int -> Double
    -> Maybe Double -> Maybe Double -> IO FuzzRow
row target kind frames crashes hangs drops checks secs live0 live1 = do
  h <- readIORef hangs
  d <- readIORef drops
  c <- readIORef checks
  pure (FuzzRow target kind frames crashes h d c secs live0 live1)

-- Read frames until the peer closes the link (or breaks it).
drain :: Connection -> IO ()
drain conn = do
  frame <- (recvFrame (64 * 1024 * 1024) conn) `catch` \(_ :: SomeException) -> pure Nothing
  maybe (pure ()) (const (drain conn)) frame

-- | The live heap after a major collection, in MB, when the RTS keeps
-- statistics.
liveMB :: IO (Maybe Double)
liveMB = do
  enabled <- getRTSStatsEnabled
  if not enabled then pure Nothing else do
    performMajorGC
    s <- getRTSStats
    pure (Just (fromIntegral (gcdetails_live_bytes (gc s)) / 1e6))

-- Fresh connected pairs of the transport (the master's end first, and
-- what to release after), made while the action runs.
withLinks :: TransportKind -> (IO (Connection, Connection, IO ()) -> IO a) -> IO a
withLinks kind act = case kind of
  ShmTransport -> act shmLoopback
  TcpTransport -> bracket (listenTcp "127.0.0.1" 0) close $ \lsock -> do
    port <- listenPort lsock
    act $ do
      w <- connectTcp "127.0.0.1" port
      m <- acceptTcp lsock
      pure (m, w, pure ())
  UnixTransport -> do
    salt <- (+ 1000000) . fromIntegral <$> getProcessID
    bracket (listenUnix salt) (close . fst) $ \(lsock, name) -> act $ do
      w <- connectUnix name
      m <- acceptUnix lsock
      pure (m, w, pure ())

-- Send standard error to /dev/null while the action runs.
quietStderr :: IO a -> IO a
quietStderr act = do
  hFlush stderr
  saved <- hDuplicate stderr
  bracket_ (withFile "/dev/null" WriteMode (\null -> hDuplicateTo null stderr))
           (hDuplicateTo saved stderr >> hClose saved) act
