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

// A trie whose chains of single children are one edge (a radix tree): at most two nodes per
// pattern, so its memory is the patterns' bytes plus a constant per pattern, however long they
// are (a byte trie cost ~60 bytes per byte: 6.7 GB for one 100 MB token). Finding the token at a
// position reads at most the longest pattern's length of text.
class AddedTokenMatcher {
 public:
  // Looks for `pattern` (the token's content, or its normalized form; empty ones are never
  // found); `token` (>= 0, the id) is what a match reports. A pattern added again replaces the
  // earlier one's token.
  void add(std::string_view pattern, int token, bool lstrip, bool rstrip);
  bool empty() const { return nodes_.size() <= 1; }
  // Nodes of the trie, the root included: at most 1 + 2 x the patterns added.
  std::size_t node_count() const { return nodes_.size(); }

  // Replaces `out` by the spans of `text`, in order, covering it; empty ones are left out.
  void split(std::string_view text, std::vector<TextSpan>* out) const;

 private:
  struct Node {
    // The edge into this node: bytes [begin, end) of patterns_[pattern].
    std::uint32_t pattern = 0;
    std::uint32_t begin = 0;
    std::uint32_t end = 0;
    int token = -1;
    bool lstrip = false;
    bool rstrip = false;
    std::vector<int> children;  // below the root; their edges start with different bytes
  };
  std::string_view edge(int node) const;
  int child(int node, unsigned char byte) const;
  int new_node(std::uint32_t pattern, std::size_t begin, std::size_t end);

  std::vector<std::string> patterns_;
  std::vector<Node> nodes_{Node{}};                             // nodes_[0] is the root
  std::vector<int> root_children_ = std::vector<int>(256, -1);  // by first byte
};

}  // namespace specrun::hf
