-- | Validation of configuration, flags' parsers and environment values.
module ConfigSpec (spec) where

import Herd
import Herd.Config
import Data.List (isInfixOf, sort)
import Herd.Settings (listenHostFor, parseHostList, parseHostsFile, validateConfig)
import Herd.Node.Agent (parseAgentCount)
import Herd.Master.Launch.Slurm (slurmTaskCount)
import Herd.Core.Config.Parse (parseTasksPerNode)
import Herd.Master.Launch.Ssh (remoteAgentCommand)
import Herd.Node.Topology (parseCpuList)
import Herd.Node (parseHostPort)
import Test.Hspec
import Test.QuickCheck

fieldOf :: Either HerdError Config -> Maybe String
fieldOf (Left (ConfigError f _)) = Just f
fieldOf _ = Nothing

spec :: Spec
spec = do
  describe "validateConfig" $ do
    it "accepts the defaults" $
      fieldOf (validateConfig defaultConfig) `shouldBe` Nothing
    it "names the field that is wrong" $ do
      fieldOf (validateConfig defaultConfig { configWorkers = Just (-1) }) `shouldBe` Just "configWorkers"
      fieldOf (validateConfig defaultConfig { configPinning = PinCores [] }) `shouldBe` Just "configPinning"
      fieldOf (validateConfig defaultConfig { configPinning = PinCores [0, 0] }) `shouldBe` Just "configPinning"
      fieldOf (validateConfig defaultConfig { configMaxFrameBytes = 10 }) `shouldBe` Just "configMaxFrameBytes"
      fieldOf (validateConfig defaultConfig { configBatching = FixedBatch 0 }) `shouldBe` Just "configBatching"
      fieldOf (validateConfig defaultConfig { configBatchTarget = 0 }) `shouldBe` Just "configBatchTarget"
      fieldOf (validateConfig defaultConfig { configListenPort = 70000 }) `shouldBe` Just "configListenPort"
      fieldOf (validateConfig defaultConfig { configWorkerRtsOptions = ["N1"] }) `shouldBe` Just "configWorkerRtsOptions"
  describe "parseCpuList" $ do
    it "reads Linux CPU lists" $ do
      parseCpuList "0-3,8,10-11\n" `shouldBe` Right [0, 1, 2, 3, 8, 10, 11]
      parseCpuList "5" `shouldBe` Right [5]
    it "rejects malformed lists" $ do
      parseCpuList "" `shouldSatisfy` isLeft
      parseCpuList "3-1" `shouldSatisfy` isLeft
      parseCpuList "a,b" `shouldSatisfy` isLeft
      parseCpuList "0-99999999" `shouldSatisfy` isLeft
    it "reads back any list it could print" $ property $ \(xs :: [NonNegative Int]) ->
      let cpus = map ((`mod` 4096) . getNonNegative) xs
      in not (null cpus) ==> parseCpuList (commas (map show cpus)) === Right (sort (uniq cpus))
  describe "parseHostPort" $ do
    it "splits host and port" $ do
      parseHostPort "127.0.0.1:4000" `shouldBe` Right ("127.0.0.1", 4000)
      parseHostPort "[::1]:4000" `shouldBe` Right ("::1", 4000)
    it "names what is wrong" $ do
      parseHostPort "localhost" `shouldSatisfy` isLeft
      parseHostPort ":80" `shouldSatisfy` isLeft
      parseHostPort "h:0" `shouldSatisfy` isLeft
      parseHostPort "h:99999" `shouldSatisfy` isLeft
      parseHostPort "h:http" `shouldSatisfy` isLeft
  describe "host lists" $ do
    it "parse HOST[:N] entries" $
      parseHostList "a:8, alice@b:2,c" `shouldBe`
        Right [HostSpec "a" (Just 8), HostSpec "alice@b" (Just 2), HostSpec "c" Nothing]
    it "name the entry that does not parse" $ do
      parseHostList "a:8,b:x" `shouldSatisfy` either ("\"b:x\"" `isInfixOf`) (const False)
      parseHostList "a:0" `shouldSatisfy` isLeft
      parseHostList "" `shouldSatisfy` isLeft
      parseHostList "a,,b" `shouldSatisfy` either ("entry 2 of 3" `isInfixOf`) (const False)
      parseHostList ",a" `shouldSatisfy` either ("entry 1 of 2" `isInfixOf`) (const False)
      parseHostList "-oProxyCommand=x" `shouldSatisfy` isLeft
      parseHostList "a;rm:2" `shouldSatisfy` isLeft
    it "reads SLURM's tasks per node, and names a bad list" $ do
      parseTasksPerNode "2(x3),1" `shouldBe` Right [2, 2, 2, 1]
      parseTasksPerNode "4" `shouldBe` Right [4]
      parseTasksPerNode "2(x3" `shouldSatisfy` either ("2(x3" `isInfixOf`) (const False)
      parseTasksPerNode "0" `shouldSatisfy` isLeft
      parseTasksPerNode "" `shouldSatisfy` isLeft
    it "read a hosts file with comments, naming a bad line" $ do
      parseHostsFile "# cluster\nnode1 8\n\nnode2:4  # spare\nnode3\n" `shouldBe`
        Right [HostSpec "node1" (Just 8), HostSpec "node2" (Just 4), HostSpec "node3" Nothing]
      parseHostsFile "node1 8\nnode2 eight\n" `shouldSatisfy` either ("line 2" `isInfixOf`) (const False)
      parseHostsFile "# nothing\n" `shouldSatisfy` isLeft
  describe "remote launch settings" $ do
    it "listen on loopback for local workers and on all interfaces for remote ones" $ do
      listenHostFor defaultConfig `shouldBe` "127.0.0.1"
      listenHostFor defaultConfig { configHosts = [HostSpec "a" Nothing] } `shouldBe` "0.0.0.0"
      listenHostFor defaultConfig { configSlurm = True } `shouldBe` "0.0.0.0"
      listenHostFor defaultConfig { configSlurm = True, configListenHost = Just "10.0.0.1" } `shouldBe` "10.0.0.1"
    it "refuse contradictory or empty launch settings" $ do
      fieldOf (validateConfig defaultConfig { configShip = True }) `shouldBe` Just "configShip"
      fieldOf (validateConfig defaultConfig { configSlurm = True, configHosts = [HostSpec "a" Nothing] })
        `shouldBe` Just "configSlurm"
      fieldOf (validateConfig defaultConfig { configSshCommand = [] }) `shouldBe` Just "configSshCommand"
      fieldOf (validateConfig defaultConfig { configLivenessTimeout = 0.5 }) `shouldBe` Just "configLivenessTimeout"
    it "read the task count of a SLURM allocation, or say what is missing" $ do
      slurmTaskCount [("SLURM_JOB_ID", "7"), ("SLURM_NTASKS", "16")] `shouldBe` Right 16
      slurmTaskCount [("SLURM_JOB_ID", "7"), ("SLURM_NPROCS", "4")] `shouldBe` Right 4
      slurmTaskCount [("SLURM_NTASKS", "16")] `shouldSatisfy` either ("SLURM_JOB_ID" `isInfixOf`) (const False)
      slurmTaskCount [("SLURM_JOB_ID", "7")] `shouldSatisfy` isLeft
      slurmTaskCount [("SLURM_JOB_ID", "7"), ("SLURM_NTASKS", "many")] `shouldSatisfy` isLeft
    it "parse the agent's worker count" $ do
      parseAgentCount "auto" `shouldBe` Right Nothing
      parseAgentCount "8" `shouldBe` Right (Just 8)
      parseAgentCount "0" `shouldSatisfy` isLeft
    it "quote every word of the remote command and keep the secret off it" $ do
      let cmd = remoteAgentCommand "m:7000" (Just 8) "ssh:a" ["-N1"] 64 "/home/it's" (Left "/opt/my prog")
                                   ["--x", "a'b"]
      cmd `shouldContain` "'/opt/my prog'"
      cmd `shouldContain` "'/home/it'\\''s'"
      cmd `shouldContain` "'a'\\''b'"
      cmd `shouldContain` "HERD_SECRET_STDIN=1"
      cmd `shouldContain` "HERD_WORKER_HEAP_RESERVE=64"
      cmd `shouldNotContain` "HERD_SECRET="
  where
    isLeft = either (const True) (const False)
    commas [] = ""
    commas [x] = x
    commas (x : rest) = x ++ "," ++ commas rest
    uniq = foldr (\x acc -> if x `elem` acc then acc else x : acc) []
