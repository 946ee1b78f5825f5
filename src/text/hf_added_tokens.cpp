#include "text/hf_added_tokens.h"

#include <algorithm>

#include "text/hf_unicode.h"

namespace specrun::hf {

std::string_view AddedTokenMatcher::edge(int node) const {
  const Node& n = nodes_[static_cast<std::size_t>(node)];
  return std::string_view(patterns_[n.pattern]).substr(n.begin, n.end - n.begin);
}

int AddedTokenMatcher::child(int node, unsigned char byte) const {
  if (node == 0) return root_children_[byte];
  for (int c : nodes_[static_cast<std::size_t>(node)].children)
    if (static_cast<unsigned char>(edge(c)[0]) == byte) return c;
  return -1;
}

int AddedTokenMatcher::new_node(std::uint32_t pattern, std::size_t begin, std::size_t end) {
  Node n;
  n.pattern = pattern;
  n.begin = static_cast<std::uint32_t>(begin);
  n.end = static_cast<std::uint32_t>(end);
  nodes_.push_back(std::move(n));
  return static_cast<int>(nodes_.size() - 1);
}

void AddedTokenMatcher::add(std::string_view pattern, int token, bool lstrip, bool rstrip) {
  if (pattern.empty()) return;
  const auto p = static_cast<std::uint32_t>(patterns_.size());
  patterns_.emplace_back(pattern);
  int node = 0;
  std::size_t i = 0;
  while (i < pattern.size()) {
    const auto byte = static_cast<unsigned char>(pattern[i]);
    int next = child(node, byte);
    if (next < 0) {  // the rest of the pattern is one new edge
      next = new_node(p, i, pattern.size());
      if (node == 0)
        root_children_[byte] = next;
      else
        nodes_[static_cast<std::size_t>(node)].children.push_back(next);
      node = next;
      break;
    }
    const std::string_view e = edge(next);
    std::size_t k = 1;  // bytes of the edge the pattern follows; the first one selected it
    while (k < e.size() && i + k < pattern.size() && e[k] == pattern[i + k]) ++k;
    if (k < e.size()) {
      // The pattern leaves the edge (or ends) inside it: a node `mid` takes the edge's first k
      // bytes, and `next`, below it, the rest.
      const Node& split = nodes_[static_cast<std::size_t>(next)];
      const int mid = new_node(split.pattern, split.begin, split.begin + k);
      nodes_[static_cast<std::size_t>(next)].begin += static_cast<std::uint32_t>(k);
      nodes_[static_cast<std::size_t>(mid)].children.push_back(next);
      if (node == 0) {
        root_children_[byte] = mid;
      } else {
        auto& siblings = nodes_[static_cast<std::size_t>(node)].children;
        *std::find(siblings.begin(), siblings.end(), next) = mid;
      }
      next = mid;
    }
    node = next;
    i += k;
  }
  Node& n = nodes_[static_cast<std::size_t>(node)];
  n.token = token;
  n.lstrip = lstrip;
  n.rstrip = rstrip;
}

void AddedTokenMatcher::split(std::string_view text, std::vector<TextSpan>* out) const {
  out->clear();
  const std::size_t n = text.size();
  std::size_t done = 0;  // the text before this is in `out`
  std::size_t pos = 0;
  while (pos < n) {
    int node = root_children_[static_cast<unsigned char>(text[pos])];
    // The longest token that starts at `pos`.
    int best = -1;
    std::size_t best_end = 0;
    for (std::size_t j = pos; node >= 0;) {
      const std::string_view e = edge(node);
      if (text.substr(j, e.size()) != e) break;
      j += e.size();
      if (nodes_[static_cast<std::size_t>(node)].token >= 0) {
        best = node;
        best_end = j;
      }
      if (j >= n) break;
      node = child(node, static_cast<unsigned char>(text[j]));
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
