// The stages of a Hugging Face tokenizer.json pipeline (text/hf_*.cpp) one by one: the
// Oniguruma regexes on PCRE2, the pre-tokenizers (split behaviours, Metaspace, ByteLevel with
// GPT-2's regex), the normalizers, the decoders and the added-token matcher. test_hf_tokenizer.cpp
// tests whole tokenizers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "text/hf_added_tokens.h"
#include "text/hf_decode.h"
#include "text/hf_json.h"
#include "text/hf_normalize.h"
#include "text/hf_pretokenize.h"
#include "text/hf_regex.h"

namespace specrun {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// Llama 3's Split pre-tokenizer pattern, as its tokenizer.json writes it.
const char* kLlama3Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// ---- the Oniguruma patterns on PCRE2 ----

TEST(HfRegex, Rewrites) {
  EXPECT_EQ(hf::oniguruma_to_pcre2("(?i:'s|'t)"), "(?:'[sS]|'[tT])");
  EXPECT_EQ(hf::oniguruma_to_pcre2(R"(\s+(?!\S))"), R"(\p{White_Space}+(?!\P{White_Space}))");
  EXPECT_EQ(hf::oniguruma_to_pcre2(R"([^\s\p{L}])"), R"([^\p{White_Space}\p{L}])");
  EXPECT_EQ(hf::oniguruma_to_pcre2(R"(\p{N}{1,3})"), R"(\p{N}{1,3})");
  EXPECT_EQ(hf::oniguruma_to_pcre2("a{,3}"), "a{0,3}");
  EXPECT_EQ(hf::oniguruma_to_pcre2("x{2}+"), "(?:x{2})+");
  EXPECT_EQ(hf::oniguruma_to_pcre2("(?i:[a-c_])"), "(?:[a-c_A-C])");
  EXPECT_EQ(hf::oniguruma_to_pcre2("."), R"([^\n])");
  EXPECT_EQ(hf::oniguruma_to_pcre2(R"(\u00e9\h)"), R"(\x{00e9}[0-9A-Fa-f])");
  EXPECT_EQ(hf::oniguruma_to_pcre2("a{x"), R"(a\{x)");
  for (const char* bad : {"[a&&b]", "[[a]]", "(?i)a", "(?x:a)", "a\\", "(a", "a)", "[\\W]"})
    EXPECT_THROW(hf::oniguruma_to_pcre2(bad), std::invalid_argument) << bad;
}

std::vector<std::string> llama3_pieces(const std::string& text) {
  static const hf::Regex re(hf::oniguruma_to_pcre2(kLlama3Split), "test");
  std::vector<hf::Match> matches;
  re.find_all(text, &matches);
  std::vector<std::string> out;
  for (const auto& [start, end] :
       hf::split_ranges(matches, text.size(), hf::SplitBehavior::kIsolated, false))
    out.push_back(text.substr(start, end - start));
  return out;
}

using Pieces = std::vector<std::string>;

TEST(HfRegex, Llama3SplitSemantics) {
  EXPECT_EQ(llama3_pieces("I'M here"), (Pieces{"I", "'M", " here"}));
  // (?i:...) folds ASCII only, as tokenizers.js: 'ſ is no contraction.
  EXPECT_EQ(llama3_pieces("'ſt"), (Pieces{"'ſt"}));
  EXPECT_EQ(llama3_pieces("12345"), (Pieces{"123", "45"}));
  EXPECT_EQ(llama3_pieces("a  b"), (Pieces{"a", " ", " b"}));
  EXPECT_EQ(llama3_pieces("a\n\nb"), (Pieces{"a", "\n\n", "b"}));
  EXPECT_EQ(llama3_pieces("a \n b"), (Pieces{"a", " \n", " b"}));
  // \s is Unicode White_Space: U+0085 is white space, U+FEFF and U+180E are not.
  EXPECT_EQ(llama3_pieces("x\xC2\x85\xC2\x85y"), (Pieces{"x", "\xC2\x85", "\xC2\x85y"}));
  EXPECT_EQ(llama3_pieces("x\xEF\xBB\xBF\xEF\xBB\xBFy"),
            (Pieces{"x", "\xEF\xBB\xBF\xEF\xBB\xBF", "y"}));
  EXPECT_EQ(llama3_pieces("x\xE1\xA0\x8E\xE1\xA0\x8Ey"),
            (Pieces{"x", "\xE1\xA0\x8E\xE1\xA0\x8E", "y"}));
  EXPECT_EQ(llama3_pieces("x\xC2\xA0y"), (Pieces{"x", "\xC2\xA0y"}));
}

TEST(HfRegex, WhiteSpaceIsUnicodeWhiteSpace) {
  // PCRE2's own \s would also match U+180E; JavaScript's would match U+FEFF and not U+0085.
  const hf::Regex re(hf::oniguruma_to_pcre2(R"(\s+)"), "test");
  std::vector<hf::Match> m;
  const std::string text =
      "a\xE1\xA0\x8E"
      "b\xEF\xBB\xBF"
      "c\xC2\x85\xE3\x80\x80"
      "d\t\v e";
  re.find_all(text, &m);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(text.substr(m[0].start, m[0].end - m[0].start), "\xC2\x85\xE3\x80\x80");
  EXPECT_EQ(text.substr(m[1].start, m[1].end - m[1].start), "\t\v ");
}

TEST(HfRegex, EmptyMatchesAdvanceOneCharacter) {
  const hf::Regex re(hf::oniguruma_to_pcre2("x*"), "test");
  std::vector<hf::Match> m;
  re.find_all("éxb", &m);  // é is two bytes
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0].start, 0u);
  EXPECT_EQ(m[0].end, 0u);
  EXPECT_EQ(m[1].start, 2u);
  EXPECT_EQ(m[1].end, 3u);
  EXPECT_EQ(m[2].start, 3u);
  EXPECT_EQ(m[3].start, 4u);
}

std::vector<std::string> split_text(const std::string& text, const std::string& delimiter,
                                    hf::SplitBehavior behavior, bool invert = false) {
  std::vector<hf::Match> matches;
  for (std::size_t p = text.find(delimiter); p != std::string::npos;
       p = text.find(delimiter, p + 1))
    matches.push_back({p, p + delimiter.size()});
  std::vector<std::string> out;
  for (const auto& [start, end] : hf::split_ranges(matches, text.size(), behavior, invert))
    out.push_back(text.substr(start, end - start));
  return out;
}

TEST(HfPreTokenizer, SplitBehaviors) {
  using B = hf::SplitBehavior;
  const std::string s = "How are you doing?";
  EXPECT_EQ(split_text(s, " ", B::kRemoved), (Pieces{"How", "are", "you", "doing?"}));
  EXPECT_EQ(split_text(s, " ", B::kIsolated),
            (Pieces{"How", " ", "are", " ", "you", " ", "doing?"}));
  EXPECT_EQ(split_text(s, " ", B::kMergedWithPrevious), (Pieces{"How ", "are ", "you ", "doing?"}));
  EXPECT_EQ(split_text(s, " ", B::kMergedWithNext), (Pieces{"How", " are", " you", " doing?"}));
  EXPECT_EQ(split_text("a  b", " ", B::kContiguous), (Pieces{"a", "  ", "b"}));
  // invert: the matches are what is kept.
  EXPECT_EQ(split_text("a b", " ", B::kRemoved, true), (Pieces{" "}));
}

std::vector<std::string> pre_tokenize(const json& config, const std::string& text,
                                      bool at_text_start = true) {
  static const std::string file = "test.json";
  auto pre = hf::make_pre_tokenizer(hf::JsonField(config, "pre_tokenizer", file));
  std::vector<hf::PreToken> pieces{{text, at_text_start}};
  pre->pre_tokenize(pieces);
  std::vector<std::string> out;
  for (const auto& p : pieces) out.push_back(p.text);
  return out;
}

TEST(HfPreTokenizer, Metaspace) {
  const json always = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "always"}};
  EXPECT_EQ(pre_tokenize(always, "Hey friend!"), (Pieces{"▁Hey", "▁friend!"}));
  EXPECT_EQ(pre_tokenize(always, "Hey friend!", false), (Pieces{"▁Hey", "▁friend!"}));
  EXPECT_EQ(pre_tokenize(always, " Hey  friend"), (Pieces{"▁Hey", "▁", "▁friend"}));
  json first = always;
  first["prepend_scheme"] = "first";
  EXPECT_EQ(pre_tokenize(first, "Hey friend!"), (Pieces{"▁Hey", "▁friend!"}));
  EXPECT_EQ(pre_tokenize(first, "Hey friend!", false), (Pieces{"Hey", "▁friend!"}));
  json never = always;
  never["prepend_scheme"] = "never";
  EXPECT_EQ(pre_tokenize(never, "Hey friend!"), (Pieces{"Hey", "▁friend!"}));
  json whole = always;
  whole["split"] = false;
  EXPECT_EQ(pre_tokenize(whole, "Hey friend!"), (Pieces{"▁Hey▁friend!"}));
  // The legacy field: add_prefix_space false is "never".
  const json legacy = {{"type", "Metaspace"}, {"replacement", "▁"}, {"add_prefix_space", false}};
  EXPECT_EQ(pre_tokenize(legacy, "Hey"), (Pieces{"Hey"}));
  const json legacy_true = {
      {"type", "Metaspace"}, {"replacement", "▁"}, {"add_prefix_space", true}};
  EXPECT_EQ(pre_tokenize(legacy_true, "Hey"), (Pieces{"▁Hey"}));
  json conflict = legacy;
  conflict["prepend_scheme"] = "always";
  EXPECT_THAT(error_of([&] { pre_tokenize(conflict, "x"); }),
              HasSubstr("test.json: pre_tokenizer.add_prefix_space false does not match"));
}

TEST(HfPreTokenizer, ByteLevelWithGpt2Regex) {
  const json config = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  EXPECT_EQ(pre_tokenize(config, "Hello my friend, how's it"),
            (Pieces{"ĠHello", "Ġmy", "Ġfriend", ",", "Ġhow", "'s", "Ġit"}));
  EXPECT_EQ(pre_tokenize(config, " x  y\n"), (Pieces{"Ġx", "Ġ", "Ġy", "Ċ"}));
  const json no_regex = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
  EXPECT_EQ(pre_tokenize(no_regex, "a b\n"), (Pieces{"aĠbĊ"}));
}

TEST(HfPreTokenizer, SplitStringPattern) {
  const json config = {{"type", "Split"},
                       {"pattern", {{"String", "--"}}},
                       {"behavior", "MergedWithPrevious"},
                       {"invert", false}};
  EXPECT_EQ(pre_tokenize(config, "a--b----c"), (Pieces{"a--", "b--", "--", "c"}));
}

// ---- normalizers and decoders ----

std::string normalize(const json& config, std::string text) {
  static const std::string file = "test.json";
  hf::make_normalizer(hf::JsonField(config, "normalizer", file))->normalize(text);
  return text;
}

TEST(HfNormalizer, UnicodeFormsAndTheRest) {
  EXPECT_EQ(normalize({{"type", "NFC"}}, "e\u0301 \u212b \u1100\u1161"), "\u00e9 \u00c5 \uac00");
  EXPECT_EQ(normalize({{"type", "NFD"}}, "\u00e9"), "e\u0301");
  EXPECT_EQ(normalize({{"type", "NFKC"}}, "\ufb01 \u2460 \uff76"), "fi 1 \u30ab");
  EXPECT_EQ(normalize({{"type", "NFKD"}}, "\u00e9\ufb01"), "e\u0301fi");
  // Per code point, as the Rust library: İ -> i + U+0307, and no final-sigma rule.
  EXPECT_EQ(normalize({{"type", "Lowercase"}}, "HeLLo \u0130 \u0391\u03a3"),
            "hello i\u0307 \u03b1\u03c3");
  EXPECT_EQ(normalize({{"type", "Prepend"}, {"prepend", "▁"}}, ""), "");
  EXPECT_EQ(normalize({{"type", "Prepend"}, {"prepend", "▁"}}, "a"), "▁a");
  EXPECT_EQ(
      normalize({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}, "a b  c"),
      "a▁b▁▁c");
  EXPECT_EQ(normalize({{"type", "Replace"}, {"pattern", {{"Regex", "\\s+"}}}, {"content", " "}},
                      "a\t\n b\xC2\x85"),
            "a b ");
  // Strip removes White_Space (U+0085 is, U+FEFF is not).
  EXPECT_EQ(normalize({{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}},
                      " \xC2\x85"
                      "a\xEF\xBB\xBF "),
            "a\xEF\xBB\xBF");
  EXPECT_EQ(normalize({{"type", "Sequence"},
                       {"normalizers", {{{"type", "NFD"}}, {{"type", "StripAccents"}}}}},
                      "café naïve"),
            "cafe naive");
}

std::string decode_chain(const json& config, std::vector<std::string> tokens,
                         bool at_text_start = true) {
  static const std::string file = "test.json";
  hf::make_decoder(hf::JsonField(config, "decoder", file))->decode_chain(tokens, at_text_start);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

TEST(HfDecoder, MetaspaceAndByteLevel) {
  const json meta = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "always"}};
  EXPECT_EQ(decode_chain(meta, {"▁Hey", "▁friend"}), "Hey friend");
  EXPECT_EQ(decode_chain(meta, {"▁Hey", "▁friend"}, false), " Hey friend");
  json never = meta;
  never["prepend_scheme"] = "never";
  EXPECT_EQ(decode_chain(never, {"▁Hey"}), " Hey");
  const json byte_level = {{"type", "ByteLevel"}};
  EXPECT_EQ(decode_chain(byte_level, {"Hello", "Ġworld", "Ċ"}), "Hello world\n");
  // A token with a character outside the byte map (an added token) is taken as it is written.
  EXPECT_EQ(decode_chain(byte_level, {"<｜end｜>", "Ġa"}), "<｜end｜> a");
}

// The added-token matcher is a radix tree: at most two nodes per token whatever its length (a
// byte trie took one per byte: 6.7 GB for a 100 MB token), and still the longest token at the
// leftmost position, where tokens are prefixes of one another or share prefixes.
TEST(HfAddedTokens, RadixTreeFindsTheLongestTokenWithTwoNodesPerToken) {
  hf::AddedTokenMatcher m;
  EXPECT_TRUE(m.empty());
  m.add(std::string(1000, 'q'), 7, false, false);
  EXPECT_EQ(m.node_count(), 2u);  // the root and one edge of 1,000 bytes
  m.add("<|im_start|>", 1, false, false);
  m.add("<|im_end|>", 2, false, false);   // splits "<|im_" off the first
  m.add("<|im", 3, false, false);         // ends inside that edge: splits it again
  m.add("<|im_end|>x", 4, false, false);  // continues below a token
  m.add("", 9, false, false);             // never found
  EXPECT_LE(m.node_count(), 1u + 2u * 5u);
  std::vector<hf::TextSpan> spans;
  auto tokens = [&](std::string_view text) {
    m.split(text, &spans);
    std::string out;
    for (const hf::TextSpan& s : spans)
      out += (s.token >= 0 ? std::to_string(s.token)
                           : std::string(text.substr(s.start, s.end - s.start))) +
             "|";
    return out;
  };
  EXPECT_EQ(tokens("a<|im_start|>b<|im_end|><|im_end|>x<|im<|im_"), "a|1|b|2|4|3|3|_|");
  EXPECT_EQ(tokens(std::string(999, 'q') + "!" + std::string(1001, 'q')),
            std::string(999, 'q') + "!|7|q|");
  m.add("<|im", 5, false, false);  // again: the later id wins
  EXPECT_EQ(tokens("<|im"), "5|");
}

}  // namespace
}  // namespace specrun
