// Internals of the Jinja parser (jinja_parser.h), shared by its statement part
// (jinja_parser.cpp) and its expression part (jinja_parser_expr.cpp): the token stream with the
// parser's position and what it is inside, and the expression parser's entry points.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "text/jinja_ast.h"
#include "text/jinja_error.h"
#include "text/jinja_lexer.h"

namespace specrun::jinja::parse {

inline constexpr int kMaxNesting = 200;  // expression and statement nesting: the stack stays small

class TokenStream {
 public:
  explicit TokenStream(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  const Token& cur() const { return tokens_[pos_]; }
  const Token& peek(std::size_t n = 1) const {
    return tokens_[std::min(pos_ + n, tokens_.size() - 1)];
  }
  const Token& previous() const { return tokens_[pos_ == 0 ? 0 : pos_ - 1]; }
  const Token& next() {
    const Token& t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }
  void back() {
    if (pos_ > 0) --pos_;
  }
  bool is_op(std::string_view op) const {
    return cur().type == Token::Type::kOperator && cur().value == op;
  }
  bool is_name(std::string_view name) const {
    return cur().type == Token::Type::kName && cur().value == name;
  }
  bool is_block_end() const { return cur().type == Token::Type::kBlockEnd; }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case Token::Type::kEnd:
        return "end of template";
      case Token::Type::kText:
        return "template text";
      case Token::Type::kString:
        return "string literal";
      default:
        return "'" + t.value + "'";
    }
  }
  [[noreturn]] void fail(const std::string& message) const {
    throw TemplateError(message, cur().line);
  }
  [[noreturn]] void fail_expected(const std::string& what) const {
    fail("expected " + what + ", got " + describe(cur()));
  }
  void expect_op(std::string_view op) {
    if (!is_op(op)) fail_expected("'" + std::string(op) + "'");
    next();
  }
  std::string expect_name(const std::string& what) {
    if (cur().type != Token::Type::kName) fail_expected(what);
    return next().value;
  }
  void expect_block_end() {
    if (!is_block_end()) fail_expected("'%}'");
    next();
  }

  int depth = 0;       // nesting of the parse functions now running (DepthGuard)
  int loop_depth = 0;  // for loops around the current statement (break and continue need one)
  int if_depth = 0;    // if statements around the current expression

 private:
  std::vector<Token> tokens_;
  std::size_t pos_ = 0;
};

// Bounds the recursion of the parser: templates nested deeper than kMaxNesting are refused.
struct DepthGuard {
  explicit DepthGuard(TokenStream& s) : stream(s) {
    if (++stream.depth > kMaxNesting) stream.fail("template nested too deeply");
  }
  ~DepthGuard() { --stream.depth; }
  TokenStream& stream;
};

// A left-deep chain that the parser builds in a loop (a + b + c, x.a.b, x | f | g, a if b else
// c if d ...): each operator nests the tree one level deeper although the parser does not
// recurse, so it is counted as one more level for the rest of the chain. Evaluating or freeing
// a tree of 300,000 chained operators (a 1.2 MB template) overflowed the stack.
struct ChainGuard {
  explicit ChainGuard(TokenStream& s) : stream(s) {}
  void deeper() {
    ++levels;
    if (++stream.depth > kMaxNesting) stream.fail("template nested too deeply");
  }
  ~ChainGuard() { stream.depth -= levels; }
  TokenStream& stream;
  int levels = 0;
};

// Expressions, with Jinja2's grammar and precedence (jinja_parser.h).
class ExprParser {
 public:
  explicit ExprParser(TokenStream& s) : s_(s) {}
  // A full expression; without `with_condexpr`, no `a if b else c` at the top (a for loop's
  // iterable, whose `if` filters the items).
  ExprPtr parse_expression(bool with_condexpr = true);
  // Comma-separated expressions; more than one (or a trailing comma) makes a tuple. Ends before
  // `}}`, `%}`, `)` or a name among `extra_end_names`.
  ExprPtr parse_tuple(bool explicit_parentheses, bool with_condexpr,
                      std::initializer_list<std::string_view> extra_end_names);
  // `| name(args)` applied to `node` (null in a filter block); `after_pipe` false when the
  // stream is at the name.
  std::unique_ptr<FilterExpr> parse_filter(ExprPtr node, bool after_pipe = true);

 private:
  TokenStream& s_;
};

}  // namespace specrun::jinja::parse
