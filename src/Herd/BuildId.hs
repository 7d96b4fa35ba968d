-- | The build identity of the running executable.
--
-- Master and workers must run the same code, because a static key only
-- means something within one build. The identity is the SHA-256 of the
-- executable file, computed once per process on first use, so any rebuild
-- or any change to the file gives a different identity.
module Herd.BuildId
  ( buildIdentity
  , hashFile
  , hexEncode
  , shortBuildId
  ) where

import Crypto.Hash (Digest, SHA256, hashlazy)
import qualified Data.ByteArray as BA
import qualified Data.ByteString as B
import qualified Data.ByteString.Lazy as BL
import System.Environment (getExecutablePath)
import System.IO.Unsafe (unsafePerformIO)

-- | SHA-256 of this process's executable (32 bytes).
buildIdentity :: IO B.ByteString
buildIdentity = cachedIdentity `seq` pure cachedIdentity

cachedIdentity :: B.ByteString
cachedIdentity = unsafePerformIO (getExecutablePath >>= hashFile)
{-# NOINLINE cachedIdentity #-}

-- | Lower-case hexadecimal, two digits a byte.
hexEncode :: B.ByteString -> String
hexEncode = concatMap (\w -> [digits !! fromIntegral (w `div` 16), digits !! fromIntegral (w `mod` 16)]) . B.unpack
  where digits = "0123456789abcdef"

-- | The first 16 hex digits of a build identity: enough to tell builds
-- apart in messages and file names.
shortBuildId :: B.ByteString -> String
shortBuildId = take 16 . hexEncode

-- | SHA-256 of a file's contents.
hashFile :: FilePath -> IO B.ByteString
hashFile path = do
  bytes <- BL.readFile path
  let digest = hashlazy bytes :: Digest SHA256
  pure $! BA.convert digest
