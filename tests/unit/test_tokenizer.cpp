// Decode-only tokenizers against the shared files: llama2.c's tok512.bin with the golden stories
// output, and the sentencepiece tokenizer.model against vocab.txt and the prompt texts.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error.h"
#include "common/utf8.h"
#include "text/tokenizer.h"

namespace specrun {
namespace {

namespace fs = std::filesystem;
const std::string kShared = SPECRUN_SOURCE_DIR "/../shared";
const std::string kTok512 = kShared + "/models/stories260K/tok512.bin";
const std::string kSpModel = kShared + "/models/tokenizer/tokenizer.model";

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Greedy ids from BOS of stories260K (docs/reference.md, "stories260K", first 60).
const std::vector<int> kStoriesIds = {403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421,
                                      395, 317, 426, 338, 401, 396, 267, 337, 410, 408, 419, 292,
                                      411, 322, 265, 282, 295, 433, 426, 385, 328, 432, 358, 394,
                                      261, 370, 432, 352, 266, 268, 388, 426, 338, 391, 266, 267,
                                      337, 335, 312, 432, 398, 312, 286, 267, 414, 270, 333, 415};

TEST(Llama2cTokenizer, DecodesTheStoriesGoldenOutput) {
  auto tok = load_llama2c_tokenizer(kTok512, 512);
  EXPECT_EQ(tok->vocab_size(), 512);
  EXPECT_STREQ(tok->format(), "llama2c");
  std::string text = tok->decode(kStoriesIds);
  const std::string expected = "Once upon a time, there was a little girl named Lily.";
  EXPECT_EQ(text.substr(0, expected.size()), expected) << text;
  // The same ids with their BOS give the same text.
  std::vector<int> with_bos = {1};
  with_bos.insert(with_bos.end(), kStoriesIds.begin(), kStoriesIds.end());
  EXPECT_EQ(tok->decode(with_bos), text);
  // encode("Once upon a time", bos) = [1, 403, 407, 261, 378]
  EXPECT_EQ(tok->decode({1, 403, 407, 261, 378}), "Once upon a time");
  // Not after BOS: the leading space of " Once" stays.
  EXPECT_EQ(tok->decode_after({403}, 378), " Once");
  EXPECT_EQ(tok->piece(410), " ");
  EXPECT_EQ(tok->decode_after({13}, 378), "\n");  // <0x0A>
  EXPECT_EQ(tok->piece(13), "<0x0A>");
}

TEST(Llama2cTokenizer, Errors) {
  auto tok = load_llama2c_tokenizer(kTok512, 512);
  EXPECT_NE(error_of([&] { tok->decode({512}); }).find("token id 512 is outside the vocabulary"),
            std::string::npos);
  // The model says 600 tokens but the file holds 512.
  std::string msg = error_of([] { load_llama2c_tokenizer(kTok512, 600); });
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find(kTok512), std::string::npos) << msg;
  EXPECT_NE(
      error_of([] { load_llama2c_tokenizer("/nonexistent/tok.bin", 10); }).find("cannot open"),
      std::string::npos);
}

TEST(SentencePieceTokenizer, PiecesMatchVocabTxt) {
  auto tok = load_sentencepiece_tokenizer(kSpModel);
  EXPECT_STREQ(tok->format(), "sentencepiece");
  std::ifstream vocab(kShared + "/models/tokenizer/vocab.txt");
  int n = 0;
  for (std::string line; std::getline(vocab, line); ++n) {
    std::istringstream fields(line);
    std::string id, piece;
    std::getline(fields, id, '\t');
    std::getline(fields, piece, '\t');
    ASSERT_EQ(std::stoi(id), n);
    EXPECT_EQ(tok->piece(n), piece) << "id " << n;
  }
  EXPECT_EQ(n, 2048);
  EXPECT_EQ(tok->vocab_size(), 2048);
}

TEST(SentencePieceTokenizer, DecodesEveryPromptToItsText) {
  auto tok = load_sentencepiece_tokenizer(kSpModel);
  std::ifstream in(kShared + "/prompts/code_prompts.jsonl");
  ASSERT_TRUE(in.good());
  int count = 0;
  for (std::string line; std::getline(in, line); ++count) {
    nlohmann::json p = nlohmann::json::parse(line);
    std::vector<int> tokens = p["tokens"].get<std::vector<int>>();
    ASSERT_EQ(tokens.at(0), 1);
    std::vector<int> body(tokens.begin() + 1, tokens.end());
    ASSERT_EQ(tok->decode(body), p["text"].get<std::string>()) << "prompt " << p["id"];
    // With the BOS included the control token adds nothing.
    ASSERT_EQ(tok->decode(tokens), p["text"].get<std::string>()) << "prompt " << p["id"];
  }
  EXPECT_EQ(count, 250);
  // Spaces: "▁▁▁▁" (260) is four spaces, also at the start (no dummy prefix in this model).
  EXPECT_EQ(tok->decode({260}), "    ");
  EXPECT_EQ(tok->decode({13}), "\n");
  EXPECT_EQ(tok->decode({2}), "");
}

TEST(SentencePieceTokenizer, MalformedFile) {
  std::string tmpl = (fs::temp_directory_path() / "specrun_tok_XXXXXX").string();
  std::string dir = ::mkdtemp(tmpl.data());
  const std::string path = dir + "/tokenizer.model";
  std::ofstream(path) << "\x0a\x7f"
                      << "abc";  // field 1, length 127, but only 3 bytes follow
  std::string msg = error_of([&] { load_sentencepiece_tokenizer(path); });
  EXPECT_NE(msg.find("runs past the end"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  fs::remove_all(dir);
}

TEST(LoadTokenizerFor, FindsTheFormatInAModelDirectory) {
  auto sp = load_tokenizer_for(kShared + "/models/code-target");
  ASSERT_NE(sp, nullptr);
  EXPECT_STREQ(sp->format(), "sentencepiece");
  EXPECT_EQ(load_tokenizer_for(kShared + "/models/stories260K"), nullptr);  // tok512.bin only

  std::string tmpl = (fs::temp_directory_path() / "specrun_tok_XXXXXX").string();
  std::string dir = ::mkdtemp(tmpl.data());
  fs::copy_file(kTok512, dir + "/tokenizer.bin");
  std::ofstream(dir + "/config.json")
      << R"({"architectures":["LlamaForCausalLM"],"hidden_size":64,"intermediate_size":172,
            "num_hidden_layers":5,"num_attention_heads":8,"vocab_size":512})";
  auto l2c = load_tokenizer_for(dir);
  ASSERT_NE(l2c, nullptr);
  EXPECT_STREQ(l2c->format(), "llama2c");
  EXPECT_EQ(l2c->vocab_size(), 512);
  fs::remove_all(dir);
}

// Encoding goes through libsentencepiece; these ids are python3-sentencepiece's for the code
// pair's tokenizer (tests/e2e/sentencepiece_ref.sh compares thousands of strings).
TEST(SentencePieceTokenizer, EncodesWithBosAndSpecialTokensInText) {
  auto tok = load_tokenizer_for(kShared + "/models/code-target");
  ASSERT_NE(tok, nullptr);
  ASSERT_TRUE(tok->can_encode());
  const std::vector<int> ids = tok->encode("def foo(x):\n    return", /*add_special=*/false);
  EXPECT_EQ(ids, (std::vector<int>{308, 286, 1967, 1967, 1981, 1988, 291, 13, 260, 320}));
  std::vector<int> with_bos = tok->encode("def", /*add_special=*/true);
  ASSERT_FALSE(with_bos.empty());
  EXPECT_EQ(with_bos.front(), 1);  // tokenizer_config.json add_bos_token
  // "</s>" in the text is the EOS id, as transformers' LlamaTokenizer splits on it.
  const std::vector<int> eos = tok->encode("x</s>", false);
  ASSERT_FALSE(eos.empty());
  EXPECT_EQ(eos.back(), 2);
  EXPECT_EQ(tok->token_to_id("</s>"), 2);
  EXPECT_EQ(tok->token_to_id("no such piece"), -1);
  EXPECT_TRUE(tok->is_special(1));
  EXPECT_FALSE(tok->is_special(308));
  EXPECT_EQ(tok->decode(tok->encode("return  x+1  # ü", false)), "return  x+1  # ü");
  const std::string bad = error_of([&] { tok->encode("a\xff", false); });
  EXPECT_NE(bad.find("not valid UTF-8"), std::string::npos) << bad;
}

TEST(SentencePieceTokenizer, DecodingBytesCutInsideACharacterGivesReplacementCharacters) {
  auto tok = load_tokenizer_for(kShared + "/models/code-target");
  ASSERT_NE(tok, nullptr);
  const int c3 = tok->token_to_id("<0xC3>");
  ASSERT_GE(c3, 0);
  EXPECT_EQ(tok->decode({c3}), "\xEF\xBF\xBD");  // a lone lead byte of "ü"
}

TEST(Utf8ReplaceInvalid, OneReplacementPerMaximalSubpart) {
  EXPECT_EQ(utf8_replace_invalid("abc"), "abc");
  EXPECT_EQ(utf8_replace_invalid("\xC3\xBC"), "\xC3\xBC");
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8_replace_invalid("a\xC3"), "a" + r);
  EXPECT_EQ(utf8_replace_invalid("\xE6\x97"), r);  // truncated 3-byte: one subpart
  EXPECT_EQ(utf8_replace_invalid("\xE6\x97x"), r + "x");
  EXPECT_EQ(utf8_replace_invalid("\xFF\xFE"), r + r);          // never valid: one each
  EXPECT_EQ(utf8_replace_invalid("\xED\xA0\x80"), r + r + r);  // a surrogate: E0-style rule
  EXPECT_EQ(utf8_replace_invalid("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");
}

}  // namespace
}  // namespace specrun
