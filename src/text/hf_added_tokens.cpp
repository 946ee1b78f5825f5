#include "text/hf_added_tokens.h"

#include <algorithm>

#include "text/hf_unicode.h"

namespace specrun::hf {

int AddedTokenMatcher::child(int node, unsigned char byte) const {
  if (node == 0) return root_children_[byte];
  auto it = children_.find((static_cast<std::uint64_t>(node) << 8) | byte);
  return it == children_.end() ? -1 : it->second;
}

void AddedTokenMatcher::add(std::string_view pattern, int token, bool lstrip, bool rstrip) {
  if (pattern.empty()) return;
  int node = 0;
  for (char c : pattern) {
    const auto byte = static_cast<unsigned char>(c);
    int next = child(node, byte);
    if (next < 0) {
      next = static_cast<int>(nodes_.size());
      nodes_.emplace_back();
      if (node == 0)
        root_children_[byte] = next;
      else
        children_.emplace((static_cast<std::uint64_t>(node) << 8) | byte, next);
    }
    node = next;
  }
  nodes_[static_cast<std::size_t>(node)] = {token, lstrip, rstrip};
}

void AddedTokenMatcher::split(std::string_view text, std::vector<TextSpan>* out) const {
  out->clear();
  const std::size_t n = text.size();
  std::size_t done = 0;  // the text before this is in `out`
  std::size_t pos = 0;
  while (pos < n) {
    int node = root_children_[static_cast<unsigned char>(text[pos])];
    if (node < 0) {
      ++pos;
      continue;
    }
    // The longest token that starts at `pos`.
    int best = -1;
    std::size_t best_end = 0;
    for (std::size_t j = pos + 1;; ++j) {
      if (nodes_[static_cast<std::size_t>(node)].token >= 0) {
        best = node;
        best_end = j;
      }
      if (j >= n) break;
      node = child(node, static_cast<unsigned char>(text[j]));
      if (node < 0) break;
    }
    if (best < 0) {
      ++pos;
      continue;
    }
    const Node& match = nodes_[static_cast<std::size_t>(best)];
    std::size_t start = pos, stop = best_end;
    if (match.lstrip) start -= trailing_white_space(text.substr(done, start - done));
    if (match.rstrip) stop += leading_white_space(text.substr(stop));
    if (done < start) out->push_back({done, start, -1});
    out->push_back({start, stop, match.token});
    done = pos = stop;
  }
  if (done < n) out->push_back({done, n, -1});
}

}  // namespace specrun::hf
