-- | The layering rule, checked on the source: the pure modules (the
-- master's core, the schedulers, the packet policy, the protocol and the
-- base they share) import only each other and pure libraries. A pure
-- module that starts to import a socket, a thread, a process or one of
-- herd's IO modules fails this test, so the master's decisions stay
-- testable without a network.
module ImportSpec (spec, pureModules, importsOf) where

import Data.Char (isSpace)
import Data.List (isPrefixOf)
import System.Directory (doesFileExist)
import Test.Hspec

-- | herd's pure modules.
pureModules :: [String]
pureModules =
  [ "Herd.Base", "Herd.Bytes", "Herd.Error", "Herd.Scheduler", "Herd.Scheduler.Presence", "Herd.Scheduler.Sizing", "Herd.Scheduler.State", "Herd.Scheduler.Loss", "Herd.Scheduler.Straggle", "Herd.Packet.Policy", "Herd.Packet.Split", "Herd.Wire", "Herd.Wire.Codec", "Herd.Wire.Tags", "Herd.Wire.Handshake", "Herd.Wire.Evolved", "Herd.Wire.Messages"
  , "Herd.Evolve.Schedule", "Herd.Evolve.Settle", "Herd.Evolve.Balance", "Herd.Evolve.Plan", "Herd.Evolve.HeldStates", "Herd.Evolve.Registry", "Herd.Evolve.StateMap", "Herd.Evolve.Checkpoint", "Herd.Evolve.Call", "Herd.Evolve.Start", "Herd.Master.Core", "Herd.Master.CoreFarm", "Herd.Master.CoreState", "Herd.Master.Events", "Herd.Master.Expect", "Herd.Master.Session"
  , "Herd.Worker.Step", "Herd.Monitor.Ledger", "Herd.Evolve.Held", "Herd.Simulate.Wheel", "Herd.Launch.Backoff", "Herd.Fuzz.Mutate" ]

-- Libraries a pure module may use: containers, bytes, text, and the
-- pieces of base that do no IO of their own (pointers appear only in
-- encoders' types and pokes). The Prelude, which every module imports
-- anyway, may be imported to hide names.
pureLibraries :: [String]
pureLibraries =
  [ "Prelude", "Data.", "Control.Monad", "Control.Exception", "GHC.Fingerprint", "GHC.Generics", "GHC.StaticPtr"
  , "Foreign.Ptr", "Foreign.Storable" ]

-- | The modules a source file imports, in order.
importsOf :: String -> [String]
importsOf src =
  [ takeWhile (\c -> not (isSpace c) && c /= '(') (dropQualified (drop 7 l))
  | l <- lines src, "import " `isPrefixOf` l ]
  where dropQualified s = let s' = dropWhile isSpace s
                          in if "qualified " `isPrefixOf` s' then dropWhile isSpace (drop 10 s') else s'

pathOf :: String -> FilePath
pathOf m = "src/" ++ map (\c -> if c == '.' then '/' else c) m ++ ".hs"

allowed :: String -> Bool
allowed m
  | "Herd" `isPrefixOf` m = m `elem` pureModules
  | otherwise = any (`isPrefixOf` m) pureLibraries

spec :: Spec
spec = describe "the layering of herd's modules" $ do
  it "finds the imports of a module, qualified or not" $
    importsOf "module X where\nimport qualified Data.Map.Strict as M\nimport Herd.Base (Range (..))\nimport  System.IO\n"
      `shouldBe` ["Data.Map.Strict", "Herd.Base", "System.IO"]
  it "refuses what a pure module must not import" $ do
    map allowed ["Herd.Transport", "Control.Concurrent", "System.IO", "Network.Socket", "Herd.Config"]
      `shouldBe` replicate 5 False
    map allowed ["Herd.Base", "Data.Map.Strict", "Herd.Master.Session"] `shouldBe` replicate 3 True
  it "keeps the pure modules pure: they import only each other and pure libraries" $ do
    found <- mapM (doesFileExist . pathOf) pureModules
    case [ m | (m, False) <- zip pureModules found ] of
      [] -> pure ()
      missing -> expectationFailure ("run the tests from the project's root; not found: " ++ unwords (map pathOf missing))
    bad <- fmap concat $ mapM (\m -> do
      src <- readFile (pathOf m)
      pure [ m ++ " imports " ++ i | i <- importsOf src, not (allowed i) ]) pureModules
    bad `shouldBe` []
