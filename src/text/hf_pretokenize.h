// tokenizer.json "pre_tokenizer": Split (Regex or String pattern, every behavior, invert),
// ByteLevel (GPT-2's regex when use_regex, add_prefix_space), Metaspace (replacement,
// prepend_scheme first/always/never or the legacy add_prefix_space, split) and Sequence, with the
// Rust library's semantics. Other types (Whitespace, Digits, BertPreTokenizer, ...) are refused
// at load. Also GPT-2's byte <-> character map that byte-level BPE vocabularies are written in.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/hf_json.h"
#include "text/hf_regex.h"

namespace specrun::hf {

// One piece of text on its way to the model.
struct PreToken {
  std::string text;
  // Whether the piece begins the text being encoded (Metaspace's prepend_scheme "first" adds its
  // replacement only there, as the Rust library's "original offset 0" test does).
  bool at_text_start = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their pre-tokens, in order; empty pieces are dropped.
  virtual void pre_tokenize(std::vector<PreToken>& pieces) const = 0;
};

// nullptr for a null pre-tokenizer. Throws naming the field for what it does not support.
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const JsonField& json);

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// The [start, end) byte ranges of the non-empty pieces of a text of `size` bytes, given the
// pattern's `matches` (ascending, non-overlapping): Rust's NormalizedString::split. `invert`
// swaps which ranges count as matches.
std::vector<std::pair<std::size_t, std::size_t>> split_ranges(const std::vector<Match>& matches,
                                                              std::size_t size,
                                                              SplitBehavior behavior, bool invert);

// GPT-2's printable stand-in for byte `b`, as UTF-8 ("Ġ" for the space, "a" for 'a').
const std::string& byte_level_char(unsigned char b);
// The byte that `cp` stands for in that map, or -1 when `cp` is not one of its 256 characters.
int byte_level_byte(char32_t cp);
// `bytes` written in that map.
std::string byte_level_encode(std::string_view bytes);

}  // namespace specrun::hf
