#include "text/jinja_parser.h"

#include <algorithm>
#include <initializer_list>

#include "text/jinja_error.h"
#include "text/jinja_lexer.h"
#include "text/jinja_parse_state.h"

namespace specrun::jinja {

namespace {

using Type = Token::Type;
using parse::DepthGuard;

// The statements; expressions go to ExprParser (jinja_parser_expr.cpp).
class Parser {
 public:
  Parser(const std::string& source, std::vector<Token> tokens)
      : source_(source), s_(std::move(tokens)), exprs_(s_) {}

  Body parse() { return subparse({}, "", 0); }

 private:
  // Statements up to a `{% name %}` with name among `ends` (not consumed) or the end of the
  // template (an error when `ends` is not empty: `open` names the unclosed statement).
  Body subparse(std::initializer_list<std::string_view> ends, const std::string& open,
                int open_line) {
    DepthGuard guard(s_);
    struct OpenBlock {
      OpenBlock(Parser& p, const std::string& name, int line) : parser(p), active(!name.empty()) {
        if (active) parser.open_.emplace_back(name, line);
      }
      ~OpenBlock() {
        if (active) parser.open_.pop_back();
      }
      Parser& parser;
      bool active;
    } open_block(*this, open, open_line);
    Body body;
    while (true) {
      const Token& t = s_.cur();
      switch (t.type) {
        case Type::kEnd:
          if (ends.size() != 0)
            throw TemplateError("unexpected end of template: the '" + open + "' of line " +
                                    std::to_string(open_line) + " is not closed (expected '{% end" +
                                    open + " %}')",
                                t.line);
          return body;
        case Type::kText:
          body.push_back(std::make_unique<TextStmt>(t.value, t.line));
          s_.next();
          break;
        case Type::kVariableBegin: {
          s_.next();
          ExprPtr e = exprs_.parse_tuple(false, true, {});
          if (s_.cur().type != Type::kVariableEnd) s_.fail_expected("'}}'");
          s_.next();
          body.push_back(std::make_unique<OutputStmt>(std::move(e), t.line));
          break;
        }
        case Type::kBlockBegin: {
          const Token& name = s_.peek();
          if (name.type == Type::kName &&
              std::find(ends.begin(), ends.end(), name.value) != ends.end())
            return body;
          body.push_back(parse_statement());
          break;
        }
        default:
          s_.fail("unexpected " + s_.describe(t));
      }
    }
  }

  // Consumes `{% name` where name is one of `ends` (the caller knows one is next).
  std::string take_end(std::initializer_list<std::string_view> ends) {
    s_.next();  // {%
    std::string name = s_.next().value;
    if (std::find(ends.begin(), ends.end(), name) == ends.end()) s_.fail_expected("an end tag");
    return name;
  }

  StmtPtr parse_statement() {
    s_.next();  // {%
    if (s_.cur().type != Type::kName) s_.fail_expected("a statement name after '{%'");
    const Token& t = s_.cur();
    const std::string name = t.value;
    const int line = t.line;
    if (name == "for") return parse_for();
    if (name == "if") return parse_if();
    if (name == "set") return parse_set();
    if (name == "macro") return parse_macro();
    if (name == "filter") return parse_filter_block();
    if (name == "generation") {
      s_.next();
      s_.expect_block_end();
      auto stmt = std::make_unique<BlockStmt>(line);
      stmt->body = subparse({"endgeneration"}, "generation", line);
      take_end({"endgeneration"});
      s_.expect_block_end();
      return stmt;
    }
    if (name == "break" || name == "continue") {
      if (s_.loop_depth == 0) s_.fail("'" + name + "' outside a for loop");
      s_.next();
      s_.expect_block_end();
      return std::make_unique<Stmt>(name == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue,
                                    line);
    }
    static constexpr std::string_view kUnsupported[] = {
        "include", "import",     "from", "extends", "block",     "call",
        "with",    "autoescape", "do",   "trans",   "pluralize", "print"};
    if (std::find(std::begin(kUnsupported), std::end(kUnsupported), name) != std::end(kUnsupported))
      s_.fail("unsupported construct '{% " + name +
              " %}': the chat-template engine implements the Jinja subset that chat templates use");
    static constexpr std::string_view kEnds[] = {"endfor", "endif",    "elif",      "else",
                                                 "endset", "endmacro", "endfilter", "endgeneration",
                                                 "endraw", "endcall",  "endblock",  "endwith"};
    if (std::find(std::begin(kEnds), std::end(kEnds), name) != std::end(kEnds))
      s_.fail("unexpected '{% " + name + " %}' " +
              (open_.empty()
                   ? std::string("(nothing open that it would close)")
                   : "(the '" + open_.back().first + "' of line " +
                         std::to_string(open_.back().second) + " is still open: expected '{% end" +
                         open_.back().first + " %}')"));
    s_.fail("unknown statement '{% " + name + " %}'");
  }

  Target parse_target(bool allow_attribute) {
    Target target;
    const bool parenthesized = s_.is_op("(");
    if (parenthesized) s_.next();
    target.names.push_back(s_.expect_name("a variable name"));
    if (allow_attribute && !parenthesized && s_.is_op(".")) {
      s_.next();
      target.attribute = s_.expect_name("an attribute name after '.'");
      return target;
    }
    while (s_.is_op(",")) {
      s_.next();
      target.unpack = true;
      if (s_.cur().type != Type::kName) break;  // trailing comma
      target.names.push_back(s_.next().value);
    }
    if (parenthesized) {
      target.unpack = true;
      s_.expect_op(")");
    }
    for (const std::string& n : target.names)
      if (n == "true" || n == "false" || n == "none" || n == "True" || n == "False" || n == "None")
        s_.fail("cannot assign to '" + n + "'");
    return target;
  }

  StmtPtr parse_for() {
    const Token& for_token = s_.next();
    auto stmt = std::make_unique<ForStmt>(for_token.line);
    stmt->target = parse_target(false);
    if (!s_.is_name("in")) s_.fail_expected("'in' after the loop variable");
    s_.next();
    stmt->iterable = exprs_.parse_tuple(false, false, {"recursive"});
    const std::size_t header_end = s_.previous().end;
    stmt->header = source_.substr(for_token.begin, header_end - for_token.begin);
    if (s_.is_name("if")) {
      s_.next();
      stmt->filter = exprs_.parse_expression();
    }
    if (s_.is_name("recursive")) s_.fail("unsupported construct: recursive for loops");
    s_.expect_block_end();
    ++s_.loop_depth;
    stmt->body = subparse({"endfor", "else"}, "for", stmt->line);
    --s_.loop_depth;
    if (take_end({"endfor", "else"}) == "else") {
      s_.expect_block_end();
      stmt->else_body = subparse({"endfor"}, "for", stmt->line);
      take_end({"endfor"});
    }
    s_.expect_block_end();
    return stmt;
  }

  StmtPtr parse_if() {
    auto stmt = std::make_unique<IfStmt>(s_.next().line);
    ++s_.if_depth;
    struct Leave {
      int& depth;
      ~Leave() { --depth; }
    } leave{s_.if_depth};
    while (true) {
      ExprPtr test = exprs_.parse_tuple(false, true, {});
      s_.expect_block_end();
      Body body = subparse({"elif", "else", "endif"}, "if", stmt->line);
      stmt->branches.emplace_back(std::move(test), std::move(body));
      const std::string end = take_end({"elif", "else", "endif"});
      if (end == "elif") continue;
      if (end == "else") {
        s_.expect_block_end();
        stmt->else_body = subparse({"endif"}, "if", stmt->line);
        take_end({"endif"});
      }
      s_.expect_block_end();
      return stmt;
    }
  }

  StmtPtr parse_set() {
    const int line = s_.next().line;
    Target target = parse_target(true);
    if (s_.is_op("=")) {
      s_.next();
      auto stmt = std::make_unique<SetStmt>(line);
      stmt->target = std::move(target);
      stmt->value = exprs_.parse_tuple(false, true, {});
      s_.expect_block_end();
      return stmt;
    }
    if (target.unpack || !target.attribute.empty())
      s_.fail("a block set ({% set x %}...{% endset %}) assigns one plain name");
    auto stmt = std::make_unique<SetBlockStmt>(line);
    stmt->target = std::move(target);
    while (s_.is_op("|")) stmt->filters.push_back(exprs_.parse_filter(nullptr));
    s_.expect_block_end();
    stmt->body = subparse({"endset"}, "set", line);
    take_end({"endset"});
    s_.expect_block_end();
    return stmt;
  }

  StmtPtr parse_macro() {
    auto stmt = std::make_unique<MacroStmt>(s_.next().line);
    stmt->name = s_.expect_name("a macro name");
    s_.expect_op("(");
    while (!s_.is_op(")")) {
      if (!stmt->params.empty()) s_.expect_op(",");
      if (s_.is_op(")")) break;
      std::string param = s_.expect_name("a parameter name");
      ExprPtr fallback;
      if (s_.is_op("=")) {
        s_.next();
        fallback = exprs_.parse_expression();
      } else if (!stmt->params.empty() && stmt->params.back().second) {
        s_.fail("non-default parameter '" + param + "' follows a default parameter");
      }
      stmt->params.emplace_back(std::move(param), std::move(fallback));
    }
    s_.next();  // )
    s_.expect_block_end();
    const int saved_loop_depth = s_.loop_depth;
    s_.loop_depth = 0;
    stmt->body = subparse({"endmacro"}, "macro", stmt->line);
    s_.loop_depth = saved_loop_depth;
    take_end({"endmacro"});
    if (s_.cur().type == Type::kName && s_.cur().value == stmt->name) s_.next();
    s_.expect_block_end();
    return stmt;
  }

  StmtPtr parse_filter_block() {
    auto stmt = std::make_unique<FilterBlockStmt>(s_.next().line);
    stmt->filters.push_back(exprs_.parse_filter(nullptr, false));
    while (s_.is_op("|")) stmt->filters.push_back(exprs_.parse_filter(nullptr));
    s_.expect_block_end();
    stmt->body = subparse({"endfilter"}, "filter", stmt->line);
    take_end({"endfilter"});
    s_.expect_block_end();
    return stmt;
  }

  const std::string& source_;
  parse::TokenStream s_;
  parse::ExprParser exprs_;
  std::vector<std::pair<std::string, int>> open_;  // statements being parsed, with their lines
};

}  // namespace

Body parse_template(const std::string& normalized) {
  return Parser(normalized, tokenize(normalized)).parse();
}

}  // namespace specrun::jinja
