-- | Validation of configuration, flags' parsers and environment values.
module ConfigSpec (spec) where

import Herd
import Herd.Config (validateConfig)
import Herd.Launch.Topology (parseCpuList)
import Herd.Worker (parseHostPort)
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
      in not (null cpus) ==> fmap length (parseCpuList (commas (map show cpus)))
           === Right (length (uniq cpus))
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
  where
    isLeft = either (const True) (const False)
    commas [] = ""
    commas [x] = x
    commas (x : rest) = x ++ "," ++ commas rest
    uniq = foldr (\x acc -> if x `elem` acc then acc else x : acc) []
