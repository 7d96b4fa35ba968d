{-# LANGUAGE ScopedTypeVariables #-}
-- | The worker side: connect to a master, prove the build, run batches.
--
-- A worker is the user's own executable started in worker mode (by
-- 'Herd.withCluster' through environment variables, or by hand with
-- @herd worker --connect HOST:PORT@). It never runs the program's body. It
-- answers every batch, either with one outcome per task (stopping at the
-- first task that throws) or with a refusal naming the function when its
-- static key or types do not match. It exits when the master closes the
-- connection, asks it to stop, when the link has been silent for the
-- master's liveness timeout (the kernel's keepalive probes go unanswered),
-- or (for workers started by herd) when the process that started it dies,
-- even mid-task: a C thread watches a pipe from it, so this holds while a
-- non-allocating computation keeps the Haskell scheduler from running.
-- Before anything else it proves the shared secret and checks the
-- master's proof ("Herd.Auth").
module Herd.Worker
  ( serveIfWorker
  , runWorker
  , WorkerOptions (..)
  , parseHostPort
  ) where

import Control.Exception
import Control.Monad (forM_, unless, when)
import qualified Data.ByteString as B
import qualified Data.ByteString.Lazy as BL
import Data.IORef
import Data.Word (Word64)
import qualified Data.Map.Strict as M
import qualified Data.Text as T
import GHC.Fingerprint (Fingerprint)
import Herd.Auth
import Herd.BuildId (buildIdentity)
import Herd.Launch.Agent (parseAgentCount, runAgent)
import Herd.Launch.Env
import Herd.Launch.Topology (physicalCores)
import Herd.Sys (exitWhenStdinCloses, pinProcessThreads)
import Herd.Task (BatchFailure (..), Runner (..), TaskRef (..), lookupRunner)
import Herd.Transport.Tcp
import Herd.Wire
import System.Posix.Unistd (getSystemID, nodeName)
import System.Clock (Clock (Monotonic), getTime, toNanoSecs)
import System.Environment (lookupEnv)
import System.Exit
import System.IO
import System.Posix.Process (getProcessID)
import System.Timeout (timeout)
import Text.Read (readMaybe)

-- | How a worker runs.
data WorkerOptions = WorkerOptions
  { workerHost       :: String        -- ^ master's host
  , workerPort       :: Int           -- ^ master's port
  , workerCpu        :: Maybe Int     -- ^ CPU to pin to
  , workerWatchStdin :: Bool          -- ^ exit when standard input closes
  , workerSecret     :: SecretSource  -- ^ the secret to prove to the master
  , workerGroup      :: String        -- ^ the launch it belongs to (empty: by hand)
  } deriving (Eq, Show)

-- | Parse @HOST:PORT@, naming what is wrong.
parseHostPort :: String -> Either String (String, Int)
parseHostPort s = case break (== ':') (reverse s) of
  (rport, ':' : rhost)
    | null rhost -> Left ("no host in " ++ show s ++ " (expected HOST:PORT)")
    | Just p <- readMaybe (reverse rport), p > 0, p < 65536 -> Right (stripBrackets (reverse rhost), p)
    | otherwise -> Left ("bad port in " ++ show s ++ " (expected a number 1..65535)")
  _ -> Left ("no port in " ++ show s ++ " (expected HOST:PORT)")
  where
    stripBrackets h@('[' : rest) | not (null rest), last rest == ']' = init rest
                                 | otherwise = h
    stripBrackets h = h

-- | If this process was started as a herd worker (or as the per-host agent
-- of an ssh launch), serve the master and exit without returning;
-- otherwise return at once. 'Herd.withCluster' calls it first; call it at
-- the top of @main@ if @main@ does work before that.
serveIfWorker :: IO ()
serveIfWorker = do
  connectTo <- lookupEnv envConnect
  case connectTo of
    Nothing -> pure ()
    Just addr -> do
      (host, port) <- either (die' . ((envConnect ++ ": ") ++)) pure (parseHostPort addr)
      cpuText <- lookupEnv envCpu
      cpu <- case cpuText of
        Nothing -> pure Nothing
        Just t | Just n <- readMaybe t, n >= 0 -> pure (Just n)
               | otherwise -> die' (envCpu ++ ": not a CPU number: " ++ show t)
      watch <- (== Just "1") <$> lookupEnv envWatchStdin
      fromStdin <- (== Just "1") <$> lookupEnv envSecretStdin
      source <- if not fromStdin then pure SecretAuto else do
        -- unbuffered, so nothing past the line is taken from the pipe
        hSetBuffering stdin NoBuffering
        line <- try (hGetLine stdin)
        case line of
          Left (e :: IOException) -> die' ("no secret on standard input: " ++ displayException e)
          Right l -> either (die' . ("the secret on standard input: " ++)) (pure . SecretGiven)
                            (secretFromLine l)
      group <- maybe "" id <$> lookupEnv envGroup
      cpu' <- if cpu /= Nothing || group /= "slurm" then pure cpu else slurmCpu
      agent <- lookupEnv envAgent
      case agent of
        Just countText -> do
          count <- either (die' . ((envAgent ++ ": ") ++)) pure (parseAgentCount countText)
          secret <- loadSecret source >>= either (die' . ("no usable secret: " ++)) pure
          runAgent addr count group secret
        Nothing -> runWorker (WorkerOptions host port cpu' watch source group)
      exitSuccess
  where die' msg = hPutStrLn stderr ("herd worker: " ++ msg) >> exitWith (ExitFailure 2)

-- Under srun: the physical core numbered by this task's SLURM_LOCALID among
-- those the allocation lets it use.
slurmCpu :: IO (Maybe Int)
slurmCpu = do
  localId <- (>>= readMaybe) <$> lookupEnv "SLURM_LOCALID"
  cores <- physicalCores
  pure $ case localId of
    Just i | i >= 0, not (null cores) -> Just (cores !! (i `mod` length cores))
    _ -> Nothing

-- | Run a worker until the master lets it go. Exits the process with a
-- non-zero code if the master refuses it, cannot prove the secret, or
-- breaks the protocol.
runWorker :: WorkerOptions -> IO ()
runWorker opts = do
  when (workerWatchStdin opts) $ do
    rc <- exitWhenStdinCloses
    when (rc /= 0) $ warn ("cannot watch the master's pipe (error " ++ show rc ++ ")")
  forM_ (workerCpu opts) $ \cpu -> do
    rc <- pinProcessThreads cpu
    when (rc /= 0) $ warn ("cannot pin to CPU " ++ show cpu ++ " (errno " ++ show rc ++ "); running unpinned")
  secret <- loadSecret (workerSecret opts) >>= either (failWith 2 . ("no usable secret: " ++)) pure
  build <- buildIdentity
  conn <- connectTcp (workerHost opts) (workerPort opts) `catch` \(e :: IOException) ->
    failWith 3 ("cannot connect to master at " ++ where_ ++ ": " ++ displayException e)
  pid <- getProcessID
  host <- nodeName <$> getSystemID
  let hello = WorkerHello protocolVersion build (fromIntegral pid) (T.pack host) (T.pack (workerGroup opts))
  -- A master that stalls the handshake must not hold a worker forever.
  answer <- timeout (60 * 1000000) $ try $ do
    auth <- authenticateToMaster secret conn
    case auth of
      Left (WrongSecret why) -> failWith 3 ("authentication with master at " ++ where_ ++ " failed: " ++ why)
      Left (AuthProtocol why) -> failWith 3 ("handshake with master at " ++ where_ ++ " failed: " ++ why)
      Right () -> do
        sendFrame conn (lazy (encodeWorkerHello hello))
        recvFrame handshakeFrameLimit conn
  reply <- case answer of
    Nothing -> failWith 3 ("master at " ++ where_ ++ " did not complete the handshake within 60 s")
    Just (Left (e :: IOException)) -> failWith 3 ("handshake with " ++ where_ ++ " failed: " ++ displayException e)
    Just (Right r) -> pure r
  case fmap decodeMasterReply reply of
    Nothing -> failWith 3 ("master at " ++ where_ ++ " closed the connection during the handshake")
    Just (Left why) -> failWith 3 ("bad handshake from " ++ where_ ++ ": " ++ why)
    Just (Right (Refused why)) -> failWith 3 ("refused by master at " ++ where_ ++ ": " ++ T.unpack why)
    Just (Right (Welcome theirBuild _ maxFrame livenessMs)) -> do
      unless (theirBuild == build) $
        failWith 3 ("master at " ++ where_ ++ " is a different build; refusing to serve it")
      rc <- setLiveness (max 1 (fromIntegral livenessMs / 1000)) conn
      when (rc /= 0) $ warn ("cannot set keepalive on the master's link (errno " ++ show rc ++ ")")
      cache <- newIORef M.empty
      serve conn (fromIntegral maxFrame) cache `finally` closeConnection conn
    Just (Right _) -> failWith 3 ("master at " ++ where_ ++ " sent an unexpected handshake frame")
  where
    where_ = workerHost opts ++ ":" ++ show (workerPort opts)
    warn msg = hPutStrLn stderr ("herd worker: " ++ msg)

failWith :: Int -> String -> IO a
failWith code msg = hPutStrLn stderr ("herd worker: " ++ msg) >> exitWith (ExitFailure code)

lazy :: B.ByteString -> BL.ByteString
lazy = BL.fromStrict

type RunnerCache = IORef (M.Map (Fingerprint, Fingerprint, Fingerprint) (Either String Runner))

serve :: Connection -> Int -> RunnerCache -> IO ()
serve conn maxFrame cache = loop
  where
    loop = do
      frame <- recvFrame maxFrame conn `catch` \(e :: SomeException) ->
        failWith 4 ("connection to master broke: " ++ displayException e)
      case frame of
        Nothing -> pure ()  -- the master is gone: stop quietly
        Just bytes -> case decodeToWorker bytes of
          Left why -> failWith 4 ("bad message from master: " ++ why)
          Right Shutdown -> pure ()
          Right (RunBatch bid ref count args) -> do
            runner <- cachedRunner cache ref
            reply <- case runner of
              Left why -> pure (BatchRejected bid (T.pack why))
              Right r -> runBatch bid ref r (fromIntegral count) args
            sendFrame conn (encodeFromWorker reply)
            loop

cachedRunner :: RunnerCache -> TaskRef -> IO (Either String Runner)
cachedRunner cache ref = do
  let k = (refKey ref, refArgType ref, refResultType ref)
  known <- M.lookup k <$> readIORef cache
  case known of
    Just r -> pure r
    Nothing -> do
      r <- lookupRunner ref
      modifyIORef' cache (M.insert k r)
      pure r

-- Run a batch and time it. Arguments that do not decode mean master and
-- worker disagree about the function, so the batch is refused, naming it.
runBatch :: Word64 -> TaskRef -> Runner -> Int -> B.ByteString -> IO FromWorker
runBatch bid ref runner count args = do
  start <- getTime Monotonic
  outcome <- runnerRun runner count args
  end <- getTime Monotonic
  let busy = fromIntegral (max 0 (toNanoSecs end - toNanoSecs start))
  pure $ case outcome of
    Right results -> BatchResult bid busy (Right results)
    Left (TaskThrew pos msg) -> BatchResult bid busy (Left (fromIntegral pos, T.pack msg))
    Left (ArgumentsUndecodable why) ->
      BatchRejected bid (T.pack ("arguments for " ++ refName ref ++ " do not decode: " ++ why))
