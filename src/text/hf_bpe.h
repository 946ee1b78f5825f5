// tokenizer.json "model" of type BPE: the vocabulary, the ranked merges and the merge loop, as
// the Rust library runs them (models/bpe): each character of a pre-token is looked up in the
// vocabulary (missing ones become <0xHH> byte tokens with byte_fallback, else unk_token, fused
// when fuse_unk, else nothing); then the adjacent pair of lowest merge rank is merged, the
// leftmost of equal rank first, until no pair has a rank. A priority queue over (rank, position)
// keeps that O(n log n) in the length of the pre-token (Llama 2's whole text is one).
// ignore_merges: a pre-token that is itself in the vocabulary is one token, merges unused.
// Refused at load: dropout, continuing_subword_prefix, end_of_word_suffix (non-empty).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/hf_json.h"

namespace specrun::hf {

// Hash of std::string keys that also takes std::string_view (heterogeneous lookup).
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringIdMap = std::unordered_map<std::string, int, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // `json`: tokenizer.json's "model" object.
  explicit BpeModel(const JsonField& json);

  // Appends the ids of pre-token `word` (valid UTF-8) to `ids`.
  void encode(std::string_view word, std::vector<int>* ids) const;

  // The vocabulary: piece -> id.
  const StringIdMap& vocab() const { return vocab_; }
  // The id of `piece` in the vocabulary, or -1.
  int id_of(std::string_view piece) const {
    auto it = vocab_.find(piece);
    return it == vocab_.end() ? -1 : it->second;
  }

 private:
  struct MergeRule {
    int rank;
    int new_id;
  };
  static std::uint64_t pair_key(int left, int right) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) |
           static_cast<std::uint32_t>(right);
  }
  const MergeRule* find_merge(int left, int right) const {
    auto it = merges_.find(pair_key(left, right));
    return it == merges_.end() ? nullptr : &it->second;
  }
  void merge(std::vector<int>& symbols) const;

  StringIdMap vocab_;
  std::unordered_map<std::uint64_t, MergeRule> merges_;
  std::array<int, 256> byte_ids_;  // id of <0xHH>, or -1
  int unk_id_ = -1;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
};

}  // namespace specrun::hf
