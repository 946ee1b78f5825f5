// The expression half of the parser (jinja_parser.h): Jinja2's grammar, lowest precedence first.
#include <algorithm>

#include "text/jinja_error.h"
#include "text/jinja_filters.h"
#include "text/jinja_parse_state.h"

namespace specrun::jinja::parse {

namespace {

using Type = Token::Type;

class Grammar {
 public:
  explicit Grammar(TokenStream& s) : s_(s) {}

  ExprPtr parse_expression(bool with_condexpr = true) {
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  // Comma-separated expressions; more than one (or a trailing comma) makes a tuple.
  ExprPtr parse_tuple(bool explicit_parentheses, bool with_condexpr,
                      std::initializer_list<std::string_view> extra_end_names) {
    const int line = s_.cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    auto at_end = [&] {
      const Token& t = s_.cur();
      if (t.type == Type::kVariableEnd || t.type == Type::kBlockEnd || t.type == Type::kEnd)
        return true;
      if (t.type == Type::kOperator && t.value == ")") return true;
      return t.type == Type::kName && std::find(extra_end_names.begin(), extra_end_names.end(),
                                                t.value) != extra_end_names.end();
    };
    while (true) {
      if (!items.empty()) s_.expect_op(",");
      if (at_end()) break;
      items.push_back(parse_expression(with_condexpr));
      if (s_.is_op(","))
        is_tuple = true;
      else
        break;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parentheses) s_.fail_expected("an expression");
    }
    auto tuple = std::make_unique<ListExpr>(true, line);
    tuple->items = std::move(items);
    return tuple;
  }

  ExprPtr parse_condexpr() {
    const int line = s_.cur().line;
    ExprPtr expr = parse_or();
    ChainGuard chain(s_);
    while (s_.is_name("if")) {
      chain.deeper();
      s_.next();
      ExprPtr test = parse_or();
      ExprPtr otherwise;
      if (s_.is_name("else")) {
        s_.next();
        otherwise = parse_condexpr();
      }
      expr =
          std::make_unique<CondExpr>(std::move(test), std::move(expr), std::move(otherwise), line);
    }
    return expr;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    ChainGuard chain(s_);
    while (s_.is_name("or")) {
      chain.deeper();
      const int line = s_.next().line;
      left = std::make_unique<BinaryExpr>(BinaryExpr::Op::kOr, std::move(left), parse_and(), line);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    ChainGuard chain(s_);
    while (s_.is_name("and")) {
      chain.deeper();
      const int line = s_.next().line;
      left = std::make_unique<BinaryExpr>(BinaryExpr::Op::kAnd, std::move(left), parse_not(), line);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (s_.is_name("not")) {
      DepthGuard guard(s_);
      const int line = s_.next().line;
      return std::make_unique<UnaryExpr>(UnaryExpr::Op::kNot, parse_not(), line);
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = s_.cur().line;
    ExprPtr first = parse_math1();
    std::unique_ptr<CompareExpr> compare;
    while (true) {
      CompareExpr::Op op;
      const Token& t = s_.cur();
      if (t.type == Type::kOperator && t.value == "==") {
        op = CompareExpr::Op::kEq;
      } else if (t.type == Type::kOperator && t.value == "!=") {
        op = CompareExpr::Op::kNe;
      } else if (t.type == Type::kOperator && t.value == "<") {
        op = CompareExpr::Op::kLt;
      } else if (t.type == Type::kOperator && t.value == "<=") {
        op = CompareExpr::Op::kLe;
      } else if (t.type == Type::kOperator && t.value == ">") {
        op = CompareExpr::Op::kGt;
      } else if (t.type == Type::kOperator && t.value == ">=") {
        op = CompareExpr::Op::kGe;
      } else if (s_.is_name("in")) {
        op = CompareExpr::Op::kIn;
      } else if (s_.is_name("not") && s_.peek().type == Type::kName && s_.peek().value == "in") {
        s_.next();
        op = CompareExpr::Op::kNotIn;
      } else {
        break;
      }
      s_.next();
      if (!compare) compare = std::make_unique<CompareExpr>(std::move(first), line);
      compare->rest.emplace_back(op, parse_math1());
    }
    if (compare) return compare;
    return first;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    ChainGuard chain(s_);
    while (s_.is_op("+") || s_.is_op("-")) {
      chain.deeper();
      const auto op = s_.cur().value == "+" ? BinaryExpr::Op::kAdd : BinaryExpr::Op::kSub;
      const int line = s_.next().line;
      left = std::make_unique<BinaryExpr>(op, std::move(left), parse_concat(), line);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    ChainGuard chain(s_);
    while (s_.is_op("~")) {
      chain.deeper();
      const int line = s_.next().line;
      left = std::make_unique<BinaryExpr>(BinaryExpr::Op::kConcat, std::move(left), parse_math2(),
                                          line);
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    ChainGuard chain(s_);
    while (s_.is_op("*") || s_.is_op("/") || s_.is_op("//") || s_.is_op("%")) {
      chain.deeper();
      const std::string& v = s_.cur().value;
      const auto op = v == "*"    ? BinaryExpr::Op::kMul
                      : v == "/"  ? BinaryExpr::Op::kDiv
                      : v == "//" ? BinaryExpr::Op::kFloorDiv
                                  : BinaryExpr::Op::kMod;
      const int line = s_.next().line;
      left = std::make_unique<BinaryExpr>(op, std::move(left), parse_pow(), line);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    ChainGuard chain(s_);
    while (s_.is_op("**")) {
      chain.deeper();
      const int line = s_.next().line;
      left = std::make_unique<BinaryExpr>(BinaryExpr::Op::kPow, std::move(left), parse_unary(true),
                                          line);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(s_);
    ExprPtr node;
    if (s_.is_op("-") || s_.is_op("+")) {
      const auto op = s_.cur().value == "-" ? UnaryExpr::Op::kNeg : UnaryExpr::Op::kPos;
      const int line = s_.next().line;
      node = std::make_unique<UnaryExpr>(op, parse_unary(false), line);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = s_.cur();
    const int line = t.line;
    switch (t.type) {
      case Type::kName: {
        s_.next();
        if (t.value == "true" || t.value == "True")
          return std::make_unique<ConstExpr>(Value::boolean(true), line);
        if (t.value == "false" || t.value == "False")
          return std::make_unique<ConstExpr>(Value::boolean(false), line);
        if (t.value == "none" || t.value == "None")
          return std::make_unique<ConstExpr>(Value::none(), line);
        return std::make_unique<NameExpr>(t.value, line);
      }
      case Type::kString: {
        std::string value = s_.next().value;
        while (s_.cur().type == Type::kString) value += s_.next().value;  // 'a' 'b' == 'ab'
        return std::make_unique<ConstExpr>(Value::string(std::move(value)), line);
      }
      case Type::kInteger: {
        const std::string text = s_.next().value;
        std::int64_t v = 0;
        for (char c : text) {
          if (v > (INT64_MAX - 9) / 10)
            throw TemplateError("integer literal " + text + " is out of range (64-bit)", line);
          v = v * 10 + (c - '0');
        }
        return std::make_unique<ConstExpr>(Value::integer(v), line);
      }
      case Type::kFloat:
        return std::make_unique<ConstExpr>(Value::number(std::stod(s_.next().value)), line);
      case Type::kOperator:
        if (t.value == "(") {
          s_.next();
          ExprPtr e = parse_tuple(true, true, {});
          s_.expect_op(")");
          return e;
        }
        if (t.value == "[") {
          s_.next();
          auto list = std::make_unique<ListExpr>(false, line);
          while (!s_.is_op("]")) {
            if (!list->items.empty()) s_.expect_op(",");
            if (s_.is_op("]")) break;
            list->items.push_back(parse_expression());
          }
          s_.next();
          return list;
        }
        if (t.value == "{") {
          s_.next();
          auto dict = std::make_unique<DictExpr>(line);
          while (!s_.is_op("}")) {
            if (!dict->items.empty()) s_.expect_op(",");
            if (s_.is_op("}")) break;
            ExprPtr key = parse_expression();
            s_.expect_op(":");
            dict->items.emplace_back(std::move(key), parse_expression());
          }
          s_.next();
          return dict;
        }
        break;
      default:
        break;
    }
    s_.fail_expected("an expression");
  }

  ExprPtr parse_postfix(ExprPtr node) {
    ChainGuard chain(s_);
    for (;; chain.deeper()) {
      if (s_.is_op(".") || s_.is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (s_.is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    ChainGuard chain(s_);
    for (;; chain.deeper()) {
      if (s_.is_op("|")) {
        node = parse_filter(std::move(node));
      } else if (s_.is_name("is")) {
        node = parse_test(std::move(node));
      } else if (s_.is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Token& t = s_.next();
    if (t.value == ".") {
      const Token& attr = s_.next();
      if (attr.type == Type::kName)
        return std::make_unique<GetattrExpr>(std::move(node), attr.value, t.line);
      if (attr.type == Type::kInteger)
        return std::make_unique<GetitemExpr>(
            std::move(node),
            std::make_unique<ConstExpr>(Value::integer(std::stoll(attr.value)), t.line), t.line);
      s_.back();
      s_.fail_expected("an attribute name after '.'");
    }
    // [index] or [start:stop:step]; x[] indexes with an empty tuple, as in Jinja2 (undefined)
    if (s_.is_op("]")) {
      s_.next();
      return std::make_unique<GetitemExpr>(
          std::move(node), std::make_unique<ConstExpr>(Value::list({}, true), t.line), t.line);
    }
    ExprPtr first;
    if (!s_.is_op(":")) {
      first = parse_expression();
      if (s_.is_op("]")) {
        s_.next();
        return std::make_unique<GetitemExpr>(std::move(node), std::move(first), t.line);
      }
      if (s_.is_op(",")) s_.fail("unsupported construct: a tuple index such as x[a, b]");
      if (!s_.is_op(":")) s_.fail_expected("']' or ':'");
    }
    auto slice = std::make_unique<SliceExpr>(std::move(node), t.line);
    slice->start = std::move(first);
    s_.next();  // :
    if (!s_.is_op("]") && !s_.is_op(":")) slice->stop = parse_expression();
    if (s_.is_op(":")) {
      s_.next();
      if (!s_.is_op("]")) slice->step = parse_expression();
    }
    s_.expect_op("]");
    return slice;
  }

  void parse_call_args(Args& args) {
    s_.expect_op("(");
    while (!s_.is_op(")")) {
      if (!args.positional.empty() || !args.keyword.empty()) s_.expect_op(",");
      if (s_.is_op(")")) break;
      if (s_.is_op("*") || s_.is_op("**"))
        s_.fail("unsupported construct: *args or **kwargs in a call");
      if (s_.cur().type == Type::kName && s_.peek().type == Type::kOperator &&
          s_.peek().value == "=") {
        std::string key = s_.next().value;
        s_.next();  // =
        args.keyword.emplace_back(std::move(key), parse_expression());
      } else {
        if (!args.keyword.empty()) s_.fail("a positional argument follows a keyword argument");
        args.positional.push_back(parse_expression());
      }
    }
    s_.next();  // )
  }

  ExprPtr parse_call(ExprPtr node) {
    auto call = std::make_unique<CallExpr>(std::move(node), s_.cur().line);
    parse_call_args(call->args);
    return call;
  }

  std::unique_ptr<FilterExpr> parse_filter(ExprPtr node, bool after_pipe = true) {
    if (after_pipe) s_.expect_op("|");
    const int line = s_.cur().line;
    std::string name = s_.expect_name("a filter name");
    try {
      check_filter(name);
    } catch (TemplateError& e) {
      // As Jinja2 (since 3.0) compiles `if` blocks, an unknown filter there fails only if it is
      // evaluated: the template may guard it, or never take that branch.
      if (s_.if_depth == 0) {
        e.set_line_if_unknown(line);
        throw;
      }
    }
    auto filter = std::make_unique<FilterExpr>(std::move(node), std::move(name), line);
    if (s_.is_op("(")) parse_call_args(filter->args);
    return filter;
  }

  ExprPtr parse_test(ExprPtr node) {
    const int line = s_.next().line;  // is
    bool negated = false;
    if (s_.is_name("not")) {
      s_.next();
      negated = true;
    }
    std::string name = s_.expect_name("a test name after 'is'");
    try {
      check_test(name);
    } catch (TemplateError& e) {
      // As Jinja2 (since 3.0) compiles `if` blocks, an unknown test there fails only if it is
      // evaluated: the template may guard it, or never take that branch.
      if (s_.if_depth == 0) {
        e.set_line_if_unknown(line);
        throw;
      }
    }
    auto test = std::make_unique<TestExpr>(std::move(node), std::move(name), line);
    const Token& t = s_.cur();
    if (s_.is_op("(")) {
      parse_call_args(test->args);
    } else if ((t.type == Type::kName || t.type == Type::kString || t.type == Type::kInteger ||
                t.type == Type::kFloat || s_.is_op("[") || s_.is_op("{")) &&
               !s_.is_name("else") && !s_.is_name("or") && !s_.is_name("and")) {
      if (s_.is_name("is")) s_.fail("tests cannot be chained with 'is'");
      test->args.positional.push_back(parse_postfix(parse_primary()));  // `is divisibleby 3`
    }
    if (negated) return std::make_unique<UnaryExpr>(UnaryExpr::Op::kNot, std::move(test), line);
    return test;
  }

 private:
  TokenStream& s_;
};

}  // namespace

ExprPtr ExprParser::parse_expression(bool with_condexpr) {
  return Grammar(s_).parse_expression(with_condexpr);
}

ExprPtr ExprParser::parse_tuple(bool explicit_parentheses, bool with_condexpr,
                                std::initializer_list<std::string_view> extra_end_names) {
  return Grammar(s_).parse_tuple(explicit_parentheses, with_condexpr, extra_end_names);
}

std::unique_ptr<FilterExpr> ExprParser::parse_filter(ExprPtr node, bool after_pipe) {
  return Grammar(s_).parse_filter(std::move(node), after_pipe);
}

}  // namespace specrun::jinja::parse
