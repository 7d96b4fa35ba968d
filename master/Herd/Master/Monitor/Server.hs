{-# LANGUAGE OverloadedStrings #-}
{-# LANGUAGE ScopedTypeVariables #-}
-- | The dashboard's web server (warp): the live page at @/@, the snapshot
-- as JSON at @/api/status@, Prometheus metrics at @/metrics@, and a
-- stream of snapshots as server-sent events at @/events@, which the page
-- reads to update itself without reloading.
--
-- Promises: read-only (any method but GET and HEAD is refused with 405);
-- every asset is in the response (no CDN, works offline); a snapshot is
-- taken only when a client asks or listens, so a cluster nobody watches
-- pays nothing; the listening socket is bound before the cluster's work
-- starts, and an address that cannot be bound is a 'ConfigError' naming
-- @configDashboard@.
module Herd.Master.Monitor.Server
  ( withDashboard
  , eventInterval
  ) where

import Control.Concurrent (threadDelay)
import Control.Concurrent.Async (AsyncCancelled (..), withAsync)
import Control.Exception (IOException, SomeException, bracketOnError, catch, displayException, finally, fromException, throwIO, try)
import Control.Monad (forever, when)
import qualified Data.ByteString.Builder as BB
import qualified Data.ByteString.Char8 as BC
import qualified Data.ByteString.Lazy as BL
import Herd.Core.Error (HerdError (..))
import Herd.Master.Monitor.Page (dashboardPage)
import Herd.Master.Monitor.Render (prometheusText, statusJson)
import Herd.Core.Monitor.Status (Status)
import Network.HTTP.Types (hContentLength, hCacheControl, hContentType, methodGet, methodHead, status200, status404, status405)
import qualified Network.Socket as N
import Network.Wai (Application, pathInfo, requestMethod, responseLBS, responseStream)
import qualified Network.Wai.Handler.Warp as W

-- | Seconds between two snapshots on @/events@.
eventInterval :: Double
eventInterval = 0.5

-- | Serve the dashboard at this address (already validated, see
-- 'Herd.Settings.parseDashboardAddress') while the body runs; the body is
-- given the address actually bound (port 0 picks a free port).
withDashboard :: (String -> IO ()) -> (String, Int) -> IO Status -> ((String, Int) -> IO a) -> IO a
withDashboard logLine (host, port) snapshot body = do
  sock <- listenOn host port
  (`finally` N.close sock) $ do
    bound <- N.socketPort sock
    let settings = W.setOnException quiet W.defaultSettings
        quiet _ e = when (W.defaultShouldDisplayException e) $ logLine ("herd: dashboard: " ++ displayException e)
        -- the server ends only when cancelled; anything else is said, and
        -- the cluster goes on without its page
        serve = W.runSettingsSocket settings sock (app snapshot) `catch` \e ->
          case fromException e of
            Just AsyncCancelled -> throwIO e
            Nothing -> logLine ("herd: the dashboard stopped: " ++ displayException (e :: SomeException))
    withAsync serve $ \_ -> do
      logLine ("herd: dashboard at http://" ++ showHost host ++ ":" ++ show bound ++ "/")
      body (host, fromIntegral bound)
  where
    showHost h = if ':' `elem` h then "[" ++ h ++ "]" else h

-- Bind and listen, or fail naming the field.
listenOn :: String -> Int -> IO N.Socket
listenOn host port = do
  let hints = N.defaultHints { N.addrSocketType = N.Stream, N.addrFlags = [N.AI_NUMERICSERV] }
  found <- try (N.getAddrInfo (Just hints) (Just host) (Just (show port)))
  addr <- case found of
    Right (a : _) -> pure a
    Right [] -> failure "no such address"
    Left (e :: IOException) -> failure (displayException e)
  r <- try $ bracketOnError (N.socket (N.addrFamily addr) N.Stream N.defaultProtocol) N.close $ \s -> do
    N.setSocketOption s N.ReuseAddr 1
    N.bind s (N.addrAddress addr)
    N.listen s 64
    pure s
  either (\(e :: IOException) -> failure (displayException e)) pure r
  where
    failure why = throwIO (ConfigError "configDashboard"
                            ("cannot serve the dashboard at " ++ host ++ ":" ++ show port ++ ": " ++ why))

-- The routes.
app :: IO Status -> Application
app snapshot req respond
  | requestMethod req /= methodGet && requestMethod req /= methodHead =
      respond (responseLBS status405 [("Allow", "GET, HEAD"), text] "read-only: only GET and HEAD\n")
  | otherwise = case pathInfo req of
      [] -> respond (whole "text/html; charset=utf-8" dashboardPage)
      ["api", "status"] -> do
        s <- snapshot
        respond (whole "application/json" (utf8 (statusJson s)))
      ["metrics"] -> do
        s <- snapshot
        respond (whole "text/plain; version=0.0.4; charset=utf-8" (utf8 (prometheusText s)))
      ["events"] -> respond $ responseStream status200
        [(hContentType, "text/event-stream"), noStore] $ \write flush -> forever $ do
          s <- snapshot
          -- one event per snapshot; the JSON is on one line, as SSE needs
          write (BB.stringUtf8 "data: " <> BB.stringUtf8 (statusJson s) <> BB.stringUtf8 "\n\n")
          flush
          threadDelay (round (eventInterval * 1e6))
      _ -> respond (responseLBS status404 [text] "not found: the dashboard serves /, /api/status, /metrics and /events\n")
  where
    text = (hContentType, "text/plain; charset=utf-8")
    noStore = (hCacheControl, "no-store")
    utf8 = BB.toLazyByteString . BB.stringUtf8
    -- with its length, not chunked: simple scrapers and HTTP/1.0 clients read it whole
    whole kind body = responseLBS status200
      [(hContentType, kind), noStore, (hContentLength, BC.pack (show (BL.length body)))] body
