// The added tokens of tokenizer.json ("added_tokens": special tokens such as <|eot_id|> and
// others such as <think>), found in the text as the Rust library's AddedVocabulary finds them:
// leftmost first and, of those starting there, the longest (Aho-Corasick leftmost-longest);
// lstrip / rstrip take the white space on that side into the token. Tokens with normalized false
// are looked for in the raw text, those with normalized true in each normalized piece between
// them (the caller keeps one matcher of each).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace specrun::hf {

struct AddedToken {
  std::string content;
  int id = -1;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

// A range of a text: an added token (`token` >= 0, the value add() was given for it; the range
// widened by lstrip/rstrip) or text between tokens (`token` == -1).
struct TextSpan {
  std::size_t start;
  std::size_t end;
  int token;
};

class AddedTokenMatcher {
 public:
  // Looks for `pattern` (the token's content, or its normalized form; empty ones are never
  // found); `token` (>= 0, the id) is what a match reports.
  void add(std::string_view pattern, int token, bool lstrip, bool rstrip);
  bool empty() const { return nodes_.size() <= 1; }

  // Replaces `out` by the spans of `text`, in order, covering it; empty ones are left out.
  void split(std::string_view text, std::vector<TextSpan>* out) const;

 private:
  struct Node {
    int token = -1;
    bool lstrip = false;
    bool rstrip = false;
  };
  int child(int node, unsigned char byte) const;

  std::vector<Node> nodes_{Node{}};  // nodes_[0] is the root
  std::vector<int> root_children_ = std::vector<int>(256, -1);
  std::unordered_map<std::uint64_t, int> children_;  // (node << 8 | byte) -> node, below the root
};

}  // namespace specrun::hf
