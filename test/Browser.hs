{-# LANGUAGE ScopedTypeVariables #-}
-- | A real browser for the dashboard's tests: Debian's chromium, headless,
-- driven over the DevTools protocol (a websocket), so a test can look at
-- a live page as a user would (what the script drew, after it drew it)
-- and take a screenshot. Also a plain HTTP GET, and a check that a PNG is
-- not blank.
module Browser
  ( Page
  , withBrowser
  , evaluateJs
  , screenshot
  , httpGet
  , httpRequest
  , pngVariety
  ) where

import Codec.Compression.Zlib (decompress)
import Control.Concurrent (threadDelay)
import Control.Exception
import Control.Monad (unless, when)
import Data.Bits (xor)
import qualified Data.ByteArray.Encoding as BA
import qualified Data.ByteString as B
import qualified Data.ByteString.Char8 as BC
import qualified Data.ByteString.Lazy as BL
import Data.IORef
import Data.Char (toLower)
import Data.List (sortOn)
import qualified Data.Map.Strict as M
import qualified Data.Text as T
import Data.Word (Word8)
import Herd.Testkit.Json
import qualified Network.Socket as N
import qualified Network.Socket.ByteString as NB
import qualified Network.WebSockets as WS
import Herd.Core.Report (Json (..), renderJson)
import System.Directory (doesFileExist, findExecutable, removeDirectoryRecursive)
import System.Environment (getEnvironment)
import System.IO
import System.Posix.Signals (signalProcessGroup, sigKILL)
import System.Posix.Temp (mkdtemp)
import System.Process
import System.Timeout (timeout)

-- | An open page and the next request number.
data Page = Page WS.Connection (IORef Int)

-- | Open this URL in a headless chromium and run the body with the page;
-- the browser is stopped afterwards.
withBrowser :: String -> (Page -> IO a) -> IO a
withBrowser url body = do
  exe <- findExecutable "chromium" >>= maybe (throwIO (userError
           "chromium is not installed (make test installs Debian's chromium)")) pure
  bracket (mkdtemp "/tmp/herd-chromium-") removeProfile $ \dir ->
   withFile "/dev/null" ReadWriteMode $ \devNull -> do
    let args = [ "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions"
               , "--remote-debugging-port=0", "--remote-allow-origins=*", "--user-data-dir=" ++ dir
               , "--window-size=1400,1000", url ]
    -- its temporary files go inside the profile too, and with it
    env <- (("TMPDIR", dir) :) . filter ((/= "TMPDIR") . fst) <$> getEnvironment
    -- a group of its own, stopped whole before the profile is removed:
    -- stopping the main process alone left the profile behind in one run
    -- of two (its helpers, which can outlive it, are the likely writers)
    bracket (createProcess (proc exe args) { std_in = UseHandle devNull, std_out = UseHandle devNull
                                           , std_err = UseHandle devNull, create_group = True, env = Just env })
            (\(_, _, _, ph) -> stopGroup ph) $ \_ -> do
      port <- waitForPort (dir ++ "/DevToolsActivePort") (200 :: Int)
      wsPath <- pageSocket port (100 :: Int)
      WS.runClient "127.0.0.1" port wsPath $ \conn -> do
        next <- newIORef 1
        body (Page conn next)
  where
    ignore act = act `catch` \(_ :: SomeException) -> pure ()
    stopGroup ph = do
      group <- getPid ph
      terminateProcess ph
      ignore (() <$ timeout 5000000 (waitForProcess ph))
      mapM_ (\pid -> ignore (signalProcessGroup sigKILL pid)) group
    -- a helper killed a moment ago may still have files open: a few tries
    removeProfile dir = retryRemove dir (20 :: Int)
    retryRemove dir n = do
      r <- try (removeDirectoryRecursive dir)
      case r of
        Right () -> pure ()
        Left (e :: SomeException)
          | n <= 0 -> hPutStrLn stderr ("warning: could not remove the browser profile " ++ dir ++ ": " ++ show e)
          | otherwise -> threadDelay 100000 >> retryRemove dir (n - 1)
    waitForPort file n = do
      there <- doesFileExist file
      text <- if there then readFile file else pure ""
      case lines text of
        (p : _ : _) | [(port, "")] <- reads p -> pure port
        _ | n <= 0 -> throwIO (userError "chromium did not open its DevTools port within 20 s")
          | otherwise -> threadDelay 100000 >> waitForPort file (n - 1)
    -- the page's websocket, from the list of targets
    pageSocket port n = do
      listing <- try (httpGet "127.0.0.1" port "/json/list") :: IO (Either SomeException (Int, String))
      let found = case listing of
            Right (200, text) | Right (Array ts) <- parseJson text ->
              [ u | t <- ts, field "type" t == Just (String "page")
                  , Just (String u) <- [field "webSocketDebuggerUrl" t] ]
            _ -> []
      case found of
        u : _ -> pure (dropHost u)
        [] | n <= 0 -> throwIO (userError "chromium listed no page")
           | otherwise -> threadDelay 100000 >> pageSocket port (n - 1 :: Int)
    dropHost u = let rest = drop (length "ws://") u in dropWhile (/= '/') rest

-- Send one DevTools command and wait for its answer (events in between
-- are skipped).
call :: Page -> String -> [(String, Json)] -> IO Value
call (Page conn next) method params = do
  n <- atomicModifyIORef' next (\k -> (k + 1, k))
  WS.sendTextData conn (T.pack (renderJson (JObject [("id", JInt (fromIntegral n)), ("method", JString method)
                                                   , ("params", JObject params)])))
  let await = do
        msg <- WS.receiveData conn
        case parseJson (T.unpack msg) of
          Right v | field "id" v == Just (Number (fromIntegral n)) ->
            case field "error" v of
              Just e -> throwIO (userError (method ++ " failed: " ++ show e))
              Nothing -> maybe (throwIO (userError (method ++ ": no result"))) pure (field "result" v)
          Right _ -> await
          Left why -> throwIO (userError ("unreadable DevTools message: " ++ why))
  r <- timeout 20000000 await
  maybe (throwIO (userError (method ++ ": no answer within 20 s"))) pure r

-- | Evaluate a JavaScript expression in the page; its value, as JSON.
evaluateJs :: Page -> String -> IO Value
evaluateJs page expr = do
  r <- call page "Runtime.evaluate" [("expression", JString expr), ("returnByValue", JBool True)]
  case (path ["exceptionDetails"] r, path ["result", "value"] r) of
    (Just e, _) -> throwIO (userError ("the page threw: " ++ show e))
    (_, Just v) -> pure v
    _ -> pure Null

-- | A PNG screenshot of the page as it is now.
screenshot :: Page -> IO B.ByteString
screenshot page = do
  r <- call page "Page.captureScreenshot" [("format", JString "png")]
  case field "data" r of
    Just (String b64) -> either (throwIO . userError) pure (BA.convertFromBase BA.Base64 (BC.pack b64))
    _ -> throwIO (userError "the screenshot had no data")

-- | GET a path over HTTP/1.0: the status and the body.
httpGet :: String -> Int -> String -> IO (Int, String)
httpGet = httpRequest "GET"

-- | A request with this method and no body, over HTTP/1.1 with
-- @Connection: close@: the status and the body (read to its
-- Content-Length, or to the end of the connection).
httpRequest :: String -> String -> Int -> String -> IO (Int, String)
httpRequest method host port p = do
  addr : _ <- N.getAddrInfo (Just N.defaultHints { N.addrSocketType = N.Stream }) (Just host) (Just (show port))
  bracket (N.socket (N.addrFamily addr) N.Stream N.defaultProtocol) N.close $ \s -> do
    N.connect s (N.addrAddress addr)
    NB.sendAll s (BC.pack (method ++ " " ++ p ++ " HTTP/1.1\r\nHost: " ++ host ++ ":" ++ show port
                           ++ "\r\nConnection: close\r\n\r\n"))
    let readMore acc = do
          chunk <- NB.recv s 65536
          pure (if B.null chunk then Nothing else Just (acc <> chunk))
        headersOf acc = case B.breakSubstring (BC.pack "\r\n\r\n") acc of
          (h, rest) | not (B.null rest) -> Just (BC.unpack h, B.drop 4 rest)
          _ -> Nothing
        readHead acc = case headersOf acc of
          Just hr -> pure hr
          Nothing -> readMore acc >>= maybe (throwIO (userError ("no HTTP answer from " ++ p))) readHead
        readBody want acc
          | maybe False (B.length acc >=) want = pure (maybe acc (`B.take` acc) want)
          | otherwise = readMore acc >>= maybe (pure acc) (readBody want)
    (headers, start) <- readHead B.empty
    let lengthOf l = case break (== ':') l of
          (k, ':' : v) | map toLower k == "content-length", [(n, "")] <- reads (filter (/= '\r') v) -> Just n
          _ -> Nothing
        want = case [ n | l <- lines headers, Just n <- [lengthOf l] ] of
          n : _ -> Just n
          [] -> Nothing
    body <- readBody want start
    case words headers of
      _ : code : _ | [(c, "")] <- reads code -> pure (c, BC.unpack body)
      _ -> throwIO (userError ("not an HTTP answer: " ++ take 80 headers))

-- | How varied a PNG's pixels are: the number of distinct colours (up to
-- 1000) and the share of pixels that differ from the most common colour.
-- A blank page has one colour and a share of 0. Reads 8-bit RGB and RGBA
-- PNGs without interlacing (what chromium writes).
pngVariety :: B.ByteString -> Either String (Int, Double)
pngVariety png = do
  unless (B.take 8 png == B.pack [137, 80, 78, 71, 13, 10, 26, 10]) $ Left "not a PNG"
  let chunks = readChunks (B.drop 8 png)
  ihdr <- maybe (Left "no IHDR") Right (lookup "IHDR" chunks)
  let width = be32 (B.take 4 ihdr)
      height = be32 (B.take 4 (B.drop 4 ihdr))
      depth = B.index ihdr 8
      colour = B.index ihdr 9
      interlace = B.index ihdr 12
  when (depth /= 8 || colour `notElem` [2, 6] || interlace /= 0) $
    Left ("unsupported PNG (depth " ++ show depth ++ ", colour type " ++ show colour ++ ")")
  let bpp = if colour == 6 then 4 else 3
      stride = width * bpp
      raw = BL.toStrict (decompress (BL.fromChunks [ d | ("IDAT", d) <- chunks ]))
  when (B.length raw < height * (stride + 1)) $ Left "truncated image data"
  let rows = unfilter bpp stride height raw
      pixels = [ B.take bpp (B.drop (x * bpp) r) | r <- rows, x <- [0, 7 .. width - 1] ]
      counts = M.fromListWith (+) [ (p, 1 :: Int) | p <- pixels ]
      top = maybe 0 snd (lookupMax' counts)
      total = length pixels
  pure (min 1000 (M.size counts), fromIntegral (total - top) / fromIntegral (max 1 total))
  where
    lookupMax' m = case sortOn (negate . snd) (M.toList m) of
      x : _ -> Just x
      [] -> Nothing
    be32 b = foldl (\acc w -> acc * 256 + fromIntegral w) 0 (B.unpack b) :: Int
    readChunks b
      | B.length b < 12 = []
      | otherwise =
          let len = be32 (B.take 4 b)
              kind = BC.unpack (B.take 4 (B.drop 4 b))
          in (kind, B.take len (B.drop 8 b)) : readChunks (B.drop (12 + len) b)

-- Undo PNG's per-row filters.
unfilter :: Int -> Int -> Int -> B.ByteString -> [B.ByteString]
unfilter bpp stride height raw = go 0 (B.replicate stride 0)
  where
    go y prev
      | y >= height = []
      | otherwise =
          let off = y * (stride + 1)
              kind = B.index raw off
              line = B.take stride (B.drop (off + 1) raw)
              out = decodeRow kind prev line
          in out : go (y + 1) out
    decodeRow :: Word8 -> B.ByteString -> B.ByteString -> B.ByteString
    decodeRow kind prev line = fst (B.unfoldrN stride stepByte (0, []))
      where
        stepByte (i, done) =
          let x = B.index line i
              a = if i >= bpp then done !! (bpp - 1) else 0
              b = B.index prev i
              c = if i >= bpp then B.index prev (i - bpp) else 0
              v = case kind of
                0 -> x
                1 -> x + a
                2 -> x + b
                3 -> x + fromIntegral ((fromIntegral a + fromIntegral b :: Int) `div` 2)
                4 -> x + paeth a b c
                _ -> x `xor` 0
          in Just (v, (i + 1, take bpp (v : done)))
    paeth a b c =
      let p = fromIntegral a + fromIntegral b - fromIntegral c :: Int
          pa = abs (p - fromIntegral a)
          pb = abs (p - fromIntegral b)
          pc = abs (p - fromIntegral c)
      in if pa <= pb && pa <= pc then a else if pb <= pc then b else c

