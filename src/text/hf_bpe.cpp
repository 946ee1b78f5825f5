#include "text/hf_bpe.h"

#include <algorithm>
#include <cstdio>

#include "common/error.h"
#include "text/hf_unicode.h"

namespace specrun::hf {

namespace {

// Merge `index` of model.merges: "left right" or ["left", "right"].
std::pair<std::string, std::string> merge_parts(const JsonField& merges, std::size_t index) {
  const JsonField item = merges.at(index);
  const nlohmann::json& v = item.value();
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    const std::size_t space = s.find(' ');
    SPEC_INPUT_CHECK(space != std::string::npos && space > 0 && space + 1 < s.size() &&
                         s.find(' ', space + 1) == std::string::npos,
                     item.where() << " \"" << s << "\" must be two tokens separated by one space");
    return {s.substr(0, space), s.substr(space + 1)};
  }
  SPEC_INPUT_CHECK(v.is_array() && v.size() == 2 && v[0].is_string() && v[1].is_string(),
                   item.where() << " must be \"left right\" or [\"left\", \"right\"]");
  return {v[0].get<std::string>(), v[1].get<std::string>()};
}

}  // namespace

BpeModel::BpeModel(const JsonField& json) {
  json.expect_object();
  const JsonField dropout = json.get("dropout");
  SPEC_INPUT_CHECK(
      dropout.is_null() || (dropout.value().is_number() && dropout.value().get<double>() == 0.0),
      dropout.where() << " " << dropout.value().dump()
                      << " is not supported (BPE dropout samples; use null)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const std::string affix = json.string_or(key, "");
    SPEC_INPUT_CHECK(affix.empty(), json.where(key) << " \"" << affix
                                                    << "\" is not supported (only null or \"\")");
  }
  fuse_unk_ = json.bool_or("fuse_unk", false);
  byte_fallback_ = json.bool_or("byte_fallback", false);
  ignore_merges_ = json.bool_or("ignore_merges", false);

  const JsonField vocab = json.require("vocab");
  vocab.expect_object();
  vocab_.reserve(vocab.value().size());
  for (const auto& item : vocab.value().items()) {
    const std::string& piece = item.key();
    const nlohmann::json& id = item.value();
    SPEC_INPUT_CHECK(
        id.is_number_integer() && id.get<long long>() >= 0 && id.get<long long>() < (1LL << 30),
        vocab.where() << "[\"" << piece << "\"] must be a non-negative integer id (it is "
                      << id.dump() << ")");
    vocab_.emplace(piece, id.get<int>());
  }

  const std::string unk = json.string_or("unk_token", "");
  if (!unk.empty()) {
    unk_id_ = id_of(unk);
    SPEC_INPUT_CHECK(unk_id_ >= 0, json.where("unk_token")
                                       << " \"" << unk << "\" is not in model.vocab");
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    byte_ids_[static_cast<std::size_t>(b)] = id_of(name);
  }

  const JsonField merges = json.require("merges");
  const std::size_t count = merges.array_size();
  merges_.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    const auto [left, right] = merge_parts(merges, i);
    const int left_id = id_of(left), right_id = id_of(right), new_id = id_of(left + right);
    SPEC_INPUT_CHECK(left_id >= 0 && right_id >= 0 && new_id >= 0,
                     merges.at(i).where() << " (\"" << left << "\", \"" << right << "\"): \""
                                          << (left_id < 0    ? left
                                              : right_id < 0 ? right
                                                             : left + right)
                                          << "\" is not in model.vocab");
    // A repeated pair takes its last rank, as the Rust library's map of merges does.
    merges_[pair_key(left_id, right_id)] = {static_cast<int>(i), new_id};
  }
}

void BpeModel::encode(std::string_view word, std::vector<int>* ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const int id = id_of(word);
    if (id >= 0) {
      ids->push_back(id);
      return;
    }
  }
  std::vector<int> symbols;
  symbols.reserve(word.size());
  bool pending_unk = false;  // an unk not yet added (fuse_unk extends it over the next misses)
  for (std::size_t pos = 0; pos < word.size();) {
    const std::size_t len =
        std::min(utf8_length(static_cast<unsigned char>(word[pos])), word.size() - pos);
    const std::string_view piece = word.substr(pos, len);
    pos += len;
    const int id = id_of(piece);
    if (id >= 0) {
      if (pending_unk) symbols.push_back(unk_id_);
      pending_unk = false;
      symbols.push_back(id);
      continue;
    }
    if (byte_fallback_ && std::all_of(piece.begin(), piece.end(), [this](char c) {
          return byte_ids_[static_cast<unsigned char>(c)] >= 0;
        })) {
      if (pending_unk) symbols.push_back(unk_id_);
      pending_unk = false;
      for (char c : piece) symbols.push_back(byte_ids_[static_cast<unsigned char>(c)]);
      continue;
    }
    if (unk_id_ >= 0) {
      if (pending_unk && !fuse_unk_) symbols.push_back(unk_id_);
      pending_unk = true;
    }
  }
  if (pending_unk) symbols.push_back(unk_id_);
  merge(symbols);
  ids->insert(ids->end(), symbols.begin(), symbols.end());
}

void BpeModel::merge(std::vector<int>& symbols) const {
  const int n = static_cast<int>(symbols.size());
  if (n < 2 || merges_.empty()) return;
  // A doubly linked list over the positions; a merged-away position is dead.
  std::vector<int> prev(static_cast<std::size_t>(n)), next(static_cast<std::size_t>(n));
  std::vector<char> alive(static_cast<std::size_t>(n), 1);
  for (int i = 0; i < n; ++i) {
    prev[static_cast<std::size_t>(i)] = i - 1;
    next[static_cast<std::size_t>(i)] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int rank;
    int pos;  // of the pair's left symbol
    int new_id;
  };
  // std::push_heap keeps the greatest on top: "greater" here is the lower rank, then the lower
  // position.
  const auto after = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  std::vector<Candidate> heap;
  heap.reserve(static_cast<std::size_t>(n));
  const auto push = [&](int pos) {
    const int right = next[static_cast<std::size_t>(pos)];
    if (right < 0) return;
    const MergeRule* rule = find_merge(symbols[static_cast<std::size_t>(pos)],
                                       symbols[static_cast<std::size_t>(right)]);
    if (rule == nullptr) return;
    heap.push_back({rule->rank, pos, rule->new_id});
    std::push_heap(heap.begin(), heap.end(), after);
  };
  for (int i = 0; i + 1 < n; ++i) push(i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), after);
    const Candidate top = heap.back();
    heap.pop_back();
    const auto pos = static_cast<std::size_t>(top.pos);
    if (!alive[pos] || next[pos] < 0) continue;
    const auto right = static_cast<std::size_t>(next[pos]);
    // An entry whose pair has changed since it was queued is stale.
    const MergeRule* rule = find_merge(symbols[pos], symbols[right]);
    if (rule == nullptr || rule->rank != top.rank || rule->new_id != top.new_id) continue;
    symbols[pos] = top.new_id;
    alive[right] = 0;
    next[pos] = next[right];
    if (next[right] >= 0) prev[static_cast<std::size_t>(next[right])] = top.pos;
    if (prev[pos] >= 0) push(prev[pos]);
    push(top.pos);
  }
  std::size_t kept = 0;
  for (std::size_t i = 0; i < symbols.size(); ++i)
    if (alive[i]) symbols[kept++] = symbols[i];
  symbols.resize(kept);
}

}  // namespace specrun::hf
