-- | Herd.Options: the cluster flags a user's program gets, parsed into a
-- configuration, and refused with the flag's name when bad.
module OptionsSpec (spec) where

import Control.Exception (try)
import Data.List (isInfixOf)
import Herd
import Herd.Config
import Herd.Options
import Herd.Settings (validateConfig)
import Options.Applicative
import System.Directory (getTemporaryDirectory, removeFile)
import System.IO (hClose, hPutStr, openTempFile)
import Test.Hspec

-- The flags as a program would parse them (beside one flag of its own).
parseArgs :: [String] -> Either String (ClusterFlags, Int)
parseArgs args = case execParserPure (prefs noBacktrack) (info (((,) <$> clusterFlags <*> own) <**> helper) fullDesc) args of
  Success x -> Right x
  Failure f -> Left (fst (renderFailure f "prog"))
  CompletionInvoked _ -> Left "completion"
  where own = option auto (long "count" <> value 10)

spec :: Spec
spec = describe "Herd.Options" $ do
  it "gives the defaults with no flags, and the program's own flags beside herd's" $ do
    fmap fst (parseArgs []) `shouldSatisfy` either (const False) ((== Nothing) . flagWorkers)
    fmap snd (parseArgs ["--count", "7", "--workers", "3"]) `shouldBe` Right 7
  it "turns the flags into the configuration they name" $ do
    dir <- getTemporaryDirectory
    (secretPath, h) <- openTempFile dir "secret"
    hClose h
    let Right (flags, _) = parseArgs [ "--workers", "3", "--hosts", "a:2,b", "--listen", "0.0.0.0:7000"
                                     , "--tls", "--transport", "tcp", "--dashboard", "127.0.0.1:0"
                                     , "--liveness", "6", "--secret-file", secretPath, "--memory-limit", "300" ]
    cfg <- configFromFlags flags defaultConfig
    removeFile secretPath
    configWorkers cfg `shouldBe` Just 3
    map hostTarget (configHosts cfg) `shouldBe` ["a", "b"]
    (configListenHost cfg, configListenPort cfg) `shouldBe` (Just "0.0.0.0", 7000)
    configTls cfg `shouldBe` True
    configTransport cfg `shouldBe` Just TcpTransport
    configDashboard cfg `shouldBe` Just "127.0.0.1:0"
    configLivenessTimeout cfg `shouldBe` 6
    configSecret cfg `shouldBe` SecretFile secretPath
    configWorkerMemoryLimit cfg `shouldBe` MemoryLimitMiB 300
    let limitOf args = either (const (pure Nothing)) (\(f, _) -> Just . configWorkerMemoryLimit <$> configFromFlags f defaultConfig) (parseArgs args)
    limitOf ["--memory-limit", "none"] `shouldReturn` Just NoMemoryLimit
    limitOf [] `shouldReturn` Just MemoryLimitAuto
  it "starts no local worker when the workers come from elsewhere, unless --workers says so" $ do
    let workersOf args = either (const (pure Nothing)) (\(f, _) -> configWorkers <$> configFromFlags f defaultConfig) (parseArgs args)
    workersOf ["--slurm"] `shouldReturn` Just 0
    workersOf ["--wait-workers", "2"] `shouldReturn` Just 0
    workersOf ["--slurm", "--workers", "1"] `shouldReturn` Just 1
    workersOf [] `shouldReturn` configWorkers defaultConfig
  it "refuses a bad flag, naming it and what it accepts" $ do
    let refused args needle = either (needle `isInfixOf`) (const False) (parseArgs args)
    refused ["--workers", "many"] "--workers" `shouldBe` True
    refused ["--workers", "5000"] "from 0 to 4096" `shouldBe` True
    refused ["--transport", "carrier-pigeon"] "transport" `shouldBe` True
    refused ["--dashboard", "nowhere"] "--dashboard" `shouldBe` True
    refused ["--hosts", "a:x"] "a:x" `shouldBe` True
    refused ["--hosts", "a,,b"] "entry 2 of 3 in the host list is empty" `shouldBe` True
    refused ["--hosts", "a,"] "entry 2 of 2 in the host list is empty" `shouldBe` True
    refused ["--liveness", "0"] "seconds" `shouldBe` True
    refused ["--memory-limit", "8"] "MiB from 16, auto or none" `shouldBe` True
    refused ["--memory-limit", "lots"] "--memory-limit" `shouldBe` True
    refused ["--bogus"] "--bogus" `shouldBe` True
  it "reads a hosts file, and names --hosts-file when it does not parse" $ do
    dir <- getTemporaryDirectory
    (good, h1) <- openTempFile dir "hosts"
    hPutStr h1 "# two hosts\nnode1 4\nnode2\n" >> hClose h1
    (bad, h2) <- openTempFile dir "hosts"
    hPutStr h2 "node1 four\n" >> hClose h2
    let Right (goodFlags, _) = parseArgs ["--hosts-file", good]
        Right (badFlags, _) = parseArgs ["--hosts-file", bad]
    cfg <- configFromFlags goodFlags defaultConfig
    map hostTarget (configHosts cfg) `shouldBe` ["node1", "node2"]
    r <- try (configFromFlags badFlags defaultConfig)
    case r of
      Left (ConfigError field why) -> (field, bad `isInfixOf` why) `shouldBe` ("--hosts-file", True)
      other -> expectationFailure ("expected a ConfigError naming --hosts-file, got " ++ either show (const "a configuration") other)
    mapM_ removeFile [good, bad]
  it "names --hosts-file and --secret-file when their file is missing" $ do
    let failsNaming args flag = case parseArgs args of
          Left why -> expectationFailure ("the flags did not parse: " ++ why)
          Right (flags, _) -> do
            r <- try (configFromFlags flags defaultConfig)
            case r of
              Left (ConfigError field why) -> (field, "no such file" `isInfixOf` why) `shouldBe` (flag, True)
              other -> expectationFailure ("expected a ConfigError naming " ++ flag ++ ", got " ++ either show (const "a configuration") other)
    failsNaming ["--hosts-file", "/nonexistent/hosts"] "--hosts-file"
    failsNaming ["--secret-file", "/nonexistent/secret"] "--secret-file"
  it "turns --slurm-adapt and its job flags into adaptive settings, and refuses job flags alone" $ do
    let adaptOf args = case parseArgs args of
          Left why -> expectationFailure ("the flags did not parse: " ++ why) >> pure Nothing
          Right (flags, _) -> do
            cfg <- configFromFlags flags defaultConfig
            pure (Just (configWorkers cfg, configSlurmAdapt cfg, validateOk cfg))
        validateOk cfg = either (const False) (const True) (validateConfig cfg)
    Just (workers, Just a, ok) <- adaptOf [ "--slurm-adapt", "2..8", "--slurm-job-workers", "4", "--slurm-time", "1:00:00"
                                          , "--slurm-lead", "120", "--slurm-partition", "short", "--adapt-idle", "30"
                                          , "--slurm-option=--account=proj", "--slurm-option=--qos=low" ]
    (workers, ok) `shouldBe` (Just 0, True)
    let l = slurmAdaptLimits a
    (adaptMin l, adaptMax l, adaptHostSlots l, adaptIdleAfter l, adaptGrowAfter l) `shouldBe` (2, 8, 4, 30, 2)
    (slurmAdaptPartition a, slurmAdaptWalltime a, slurmAdaptLead a) `shouldBe` (Just "short", Just "1:00:00", 120)
    slurmAdaptOptions a `shouldBe` ["--account=proj", "--qos=low"]
    let refused args needle = either (needle `isInfixOf`) (const False) (parseArgs args)
    refused ["--slurm-adapt", "4..2"] "exceed" `shouldBe` True
    refused ["--slurm-adapt", "1..x"] "--slurm-adapt" `shouldBe` True
    refused ["--slurm-adapt", "1..2", "--slurm-time", "soon"] "SLURM time limit" `shouldBe` True
    let Right (alone, _) = parseArgs ["--slurm-time", "30"]
    r <- try (configFromFlags alone defaultConfig)
    case r of
      Left (ConfigError field why) -> (field, "give --slurm-adapt" `isInfixOf` why) `shouldBe` ("--slurm-adapt", True)
      other -> expectationFailure ("expected a ConfigError naming --slurm-adapt, got " ++ either show (const "a configuration") other)
    let Right (tooLong, _) = parseArgs ["--slurm-adapt", "1..2", "--slurm-time", "1", "--slurm-lead", "90"]
    cfg <- configFromFlags tooLong defaultConfig
    let fieldOf e = case e of { ConfigError field _ -> field; other -> show other }
    either fieldOf (const "valid") (validateConfig cfg) `shouldBe` "configSlurmAdapt"
