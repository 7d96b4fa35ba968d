-- | The docs stay true to the code: every Haskell block in README.md and
-- docs/ either names the file it is taken from (@```haskell file=PATH@),
-- which the build compiles and which must still hold the block verbatim,
-- or says it is a fragment (@```haskell fragment@); and every relative
-- link leads to a file, and to a heading of it when it names one. Run
-- from the project's root (make test and make check do).
module DocsSpec (spec, slugOf, codeBlocks, linksOf) where

import Data.Char (isAlphaNum, isSpace, toLower)
import Data.List (isInfixOf, isPrefixOf)
import System.Directory (doesFileExist, listDirectory)
import System.FilePath (takeDirectory, takeExtension, (</>))
import Test.Hspec

-- | A fenced block: the line it starts on, its info string, its lines.
data Block = Block Int String [String]

-- | The fenced code blocks of a Markdown text.
codeBlocks :: String -> [(Int, String, [String])]
codeBlocks text = [ (n, info, body) | Block n info body <- go (zip [1 ..] (lines text)) ]
  where
    go ((n, l) : rest)
      | "```" `isPrefixOf` l =
          let (body, after) = break (("```" `isPrefixOf`) . snd) rest
          in Block n (dropWhile isSpace (drop 3 l)) (map snd body) : go (drop 1 after)
      | otherwise = go rest
    go [] = []

-- | The targets of the Markdown links and images in a text, outside code.
linksOf :: String -> [String]
linksOf = go . outsideCode
  where
    go ('[' : rest) = case break (== ']') rest of
      (_, ']' : '(' : more) -> let (target, after) = break (== ')') more in target : go after
      _ -> go rest
    go (_ : rest) = go rest
    go [] = []
    -- fenced blocks and inline code spans blanked out
    outsideCode = unlines . spans . fenced . lines
    fenced (l : ls) | "```" `isPrefixOf` l = let (_, after) = break ("```" `isPrefixOf`) ls in fenced (drop 1 after)
                    | otherwise = l : fenced ls
    fenced [] = []
    spans = map dropSpans
    dropSpans ('`' : rest) = case break (== '`') rest of
      (_, '`' : after) -> ' ' : dropSpans after
      _ -> rest
    dropSpans (c : rest) = c : dropSpans rest
    dropSpans [] = []

-- | The anchor GitHub gives a heading: lower case, spaces to hyphens,
-- other punctuation dropped.
slugOf :: String -> String
slugOf = concatMap keep . map toLower . dropWhile isSpace
  where
    keep c | isAlphaNum c || c == '-' || c == '_' = [c]
           | c == ' ' = "-"
           | otherwise = ""

-- The headings of a Markdown text, as anchors.
anchorsOf :: String -> [String]
anchorsOf text = [ slugOf (dropWhile (== '#') l) | l <- outsideFences (lines text), "#" `isPrefixOf` l ]
  where
    outsideFences (l : ls) | "```" `isPrefixOf` l = let (_, after) = break ("```" `isPrefixOf`) ls in outsideFences (drop 1 after)
                           | otherwise = l : outsideFences ls
    outsideFences [] = []

-- The Markdown files the checks cover.
docFiles :: IO [FilePath]
docFiles = do
  docs <- listDirectory "docs"
  pure ("README.md" : [ "docs" </> f | f <- docs, takeExtension f == ".md" ])

spec :: Spec
spec = describe "the docs" $ do
  it "reads blocks, links and anchors as GitHub does" $ do
    slugOf " What herd promises under failure" `shouldBe` "what-herd-promises-under-failure"
    slugOf " 1. Get herd and its libraries" `shouldBe` "1-get-herd-and-its-libraries"
    linksOf "see [a](b.md#c), `[x](not-a-link)` and ![img](d.svg)\n```\n[e](f)\n```\n" `shouldBe` ["b.md#c", "d.svg"]
    [ (n, info) | (n, info, _) <- codeBlocks "x\n```haskell fragment\na\n```\n```\nb\n```\n" ]
      `shouldBe` [(2, "haskell fragment"), (5, "")]

  it "takes every Haskell block from a file the build compiles, or marks it a fragment" $ do
    files <- docFiles
    problems <- fmap concat $ mapM (\doc -> do
      text <- readFile doc
      fmap concat $ mapM (check doc) (codeBlocks text)) files
    problems `shouldBe` []

  it "links only to files and headings that exist" $ do
    files <- docFiles
    problems <- fmap concat $ mapM (\doc -> do
      text <- readFile doc
      fmap concat $ mapM (resolve doc) [ l | l <- linksOf text, not (external l) ]) files
    problems `shouldBe` []
  where
    external l = any (`isPrefixOf` l) ["http://", "https://", "mailto:"]
    check doc (n, info, body) = case words info of
      ("haskell" : rest) -> case rest of
        ["fragment"] -> pure []
        [ref] | "file=" `isPrefixOf` ref -> do
          let path = drop 5 ref
          exists <- doesFileExist path
          if not exists then pure [where_ ++ "names " ++ path ++ ", which does not exist"] else do
            source <- readFile path
            pure [ where_ ++ "is no longer what " ++ path ++ " holds" | not (unlines body `isInfixOf` source) ]
        _ -> pure [where_ ++ "must name its file (```haskell file=PATH) or say ```haskell fragment"]
      _ -> pure []
      where where_ = doc ++ ":" ++ show n ++ ": the Haskell block "
    resolve doc link = do
      let (file, anchor) = break (== '#') link
          target = if null file then doc else takeDirectory doc </> file
      exists <- doesFileExist target
      if not exists then pure [doc ++ ": the link " ++ link ++ " leads to no file"] else
        if null anchor || takeExtension target /= ".md" then pure [] else do
          text <- readFile target
          pure [ doc ++ ": the link " ++ link ++ " names no heading of " ++ target | drop 1 anchor `notElem` anchorsOf text ]
