-- | The shared secret's types: a secret, and where a configuration takes
-- it from. Apart from "Herd.Transport.Auth" (which loads secrets and proves them),
-- so that a configuration record can name its secret without depending on
-- the links that use it.
--
-- Promise: no 'Show' instance here can print a secret's bytes, and secrets
-- compare in constant time.
module Herd.Sys.Secret
  ( Secret (..)
  , SecretSource (..)
  ) where

import qualified Data.ByteArray as BA
import qualified Data.ByteString as B

-- | A shared secret. Its 'Show' instance never reveals it. (The
-- constructor is for "Herd.Transport.Auth"; make one with 'Herd.Transport.Auth.mkSecret'.)
newtype Secret = Secret B.ByteString

instance Show Secret where
  show _ = "<secret>"

instance Eq Secret where
  Secret a == Secret b = B.length a == B.length b && BA.constEq a b

-- | Where a secret comes from.
data SecretSource
  = SecretAuto
    -- ^ @HERD_SECRET@ if set and non-empty, else 'defaultCookiePath'
    -- (created on first use)
  | SecretFile FilePath
    -- ^ this file, which must exist and be readable by its owner only
  | SecretValue B.ByteString
    -- ^ this value
  | SecretGiven Secret
    -- ^ a secret already loaded
  deriving (Eq)

-- Written by hand so that no log line or error can print a secret.
instance Show SecretSource where
  show SecretAuto = "SecretAuto"
  show (SecretFile p) = "SecretFile " ++ show p
  show (SecretValue _) = "SecretValue <secret>"
  show (SecretGiven _) = "SecretGiven <secret>"

