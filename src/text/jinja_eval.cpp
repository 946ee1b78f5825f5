#include "text/jinja_eval.h"

#include "text/jinja_budget.h"
#include "text/jinja_error.h"
#include "text/jinja_filters.h"
#include "text/jinja_ops.h"

namespace specrun::jinja {

namespace {

constexpr int kMaxCallDepth = 64;  // macro recursion

struct Frame;
using FramePtr = std::shared_ptr<Frame>;

struct Frame {
  explicit Frame(FramePtr p) : parent(std::move(p)) {}
  FramePtr parent;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* find(const std::string& name) const {
    for (const Frame* f = this; f; f = f->parent.get())
      for (const auto& [k, v] : f->vars)
        if (k == name) return &v;
    return nullptr;
  }
  void set(const std::string& name, Value value) {
    for (auto& [k, v] : vars) {
      if (k == name) {
        v = std::move(value);
        return;
      }
    }
    vars.emplace_back(name, std::move(value));
  }
};

enum class Flow { kNormal, kBreak, kContinue };

class Evaluator {
 public:
  Flow exec(const Body& body, const FramePtr& frame, std::string& out) {
    for (const StmtPtr& stmt : body) {
      Flow flow = Flow::kNormal;
      try {
        flow = exec_stmt(*stmt, frame, out);
      } catch (TemplateError& e) {
        e.set_line_if_unknown(stmt->line);
        throw;
      }
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

 private:
  static void append(std::string& out, const std::string& text) {
    check_string_bytes(out.size() + text.size());
    count_bytes(text.size());
    out += text;
  }

  Flow exec_stmt(const Stmt& stmt, const FramePtr& frame, std::string& out) {
    count_steps(1);
    switch (stmt.kind) {
      case Stmt::Kind::kText:
        append(out, static_cast<const TextStmt&>(stmt).text);
        return Flow::kNormal;
      case Stmt::Kind::kOutput:
        append(out, to_str(eval(*static_cast<const OutputStmt&>(stmt).expr, frame)));
        return Flow::kNormal;
      case Stmt::Kind::kIf: {
        const auto& s = static_cast<const IfStmt&>(stmt);
        for (const auto& [test, body] : s.branches)
          if (eval(*test, frame).truthy()) return exec(body, frame, out);
        return exec(s.else_body, frame, out);
      }
      case Stmt::Kind::kFor:
        return exec_for(static_cast<const ForStmt&>(stmt), frame, out);
      case Stmt::Kind::kSet: {
        const auto& s = static_cast<const SetStmt&>(stmt);
        assign(s.target, eval(*s.value, frame), *frame);
        return Flow::kNormal;
      }
      case Stmt::Kind::kSetBlock: {
        const auto& s = static_cast<const SetBlockStmt&>(stmt);
        assign(s.target, render_filtered(s.body, s.filters, frame), *frame);
        return Flow::kNormal;
      }
      case Stmt::Kind::kMacro:
        define_macro(static_cast<const MacroStmt&>(stmt), frame);
        return Flow::kNormal;
      case Stmt::Kind::kFilterBlock: {
        const auto& s = static_cast<const FilterBlockStmt&>(stmt);
        append(out, to_str(render_filtered(s.body, s.filters, frame)));
        return Flow::kNormal;
      }
      case Stmt::Kind::kBlock:
        return exec(static_cast<const BlockStmt&>(stmt).body, frame, out);
      case Stmt::Kind::kBreak:
        return Flow::kBreak;
      case Stmt::Kind::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  Value render_filtered(const Body& body, const std::vector<std::unique_ptr<FilterExpr>>& filters,
                        const FramePtr& frame) {
    std::string text;
    exec(body, frame, text);
    Value value = Value::string(std::move(text));
    for (const auto& filter : filters) value = apply(*filter, value, frame);
    return value;
  }

  static void bind(const Target& target, const Value& value, Frame& frame) {
    if (!target.unpack) {
      frame.set(target.names[0], value);
      return;
    }
    const std::vector<Value> items = iterate(value);
    const std::size_t n = target.names.size();
    if (items.size() > n)
      throw TemplateError("too many values to unpack (expected " + std::to_string(n) + ")");
    if (items.size() < n)
      throw TemplateError("not enough values to unpack (expected " + std::to_string(n) + ", got " +
                          std::to_string(items.size()) + ")");
    for (std::size_t i = 0; i < n; ++i) frame.set(target.names[i], items[i]);
  }

  static void assign(const Target& target, const Value& value, Frame& frame) {
    if (target.attribute.empty()) {
      bind(target, value, frame);
      return;
    }
    const Value* ns = frame.find(target.names[0]);
    if (!ns || !ns->is_namespace())
      throw TemplateError("cannot assign attribute on non-namespace object ('" + target.names[0] +
                          "' is " + (ns ? "a " + ns->type_name() : std::string("undefined")) +
                          "; create it with namespace(...))");
    ns->namespace_attrs().set(target.attribute, value);
  }

  static Value loop_object(const std::vector<Value>& items, std::size_t i) {
    const auto n = static_cast<std::int64_t>(items.size());
    const auto k = static_cast<std::int64_t>(i);
    DictData loop;
    loop.entries = {
        {"index", Value::integer(k + 1)},
        {"index0", Value::integer(k)},
        {"revindex", Value::integer(n - k)},
        {"revindex0", Value::integer(n - k - 1)},
        {"first", Value::boolean(k == 0)},
        {"last", Value::boolean(k == n - 1)},
        {"length", Value::integer(n)},
        {"previtem", k > 0 ? items[i - 1] : Value::undefined("there is no previous item")},
        {"nextitem", k + 1 < n ? items[i + 1] : Value::undefined("there is no next item")},
        {"depth", Value::integer(1)},
        {"depth0", Value::integer(0)},
        {"cycle",
         Value::callable(
             "loop.cycle",
             [k](CallArgs& args) {
               if (args.positional.empty()) throw TemplateError("no items for cycling given");
               return args.positional[static_cast<std::size_t>(k) % args.positional.size()];
             })},
    };
    return Value::loop_dict(std::move(loop));
  }

  Flow exec_for(const ForStmt& s, const FramePtr& frame, std::string& out) {
    std::vector<Value> items = iterate(eval(*s.iterable, frame));
    if (s.filter) {
      std::vector<Value> kept;
      for (const Value& item : items) {
        auto scope = std::make_shared<Frame>(frame);
        bind(s.target, item, *scope);
        if (eval(*s.filter, scope).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec(s.else_body, std::make_shared<Frame>(frame), out);
    for (std::size_t i = 0; i < items.size(); ++i) {
      auto scope = std::make_shared<Frame>(frame);
      Flow flow = Flow::kNormal;
      try {
        count_steps(1);
        scope->set("loop", loop_object(items, i));
        bind(s.target, items[i], *scope);
        flow = exec(s.body, scope, out);
      } catch (TemplateError& e) {
        e.add_context("in `" + s.header + "` at loop.index0 = " + std::to_string(i));
        throw;
      }
      if (flow == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  void define_macro(const MacroStmt& macro, const FramePtr& frame) {
    // The macro sees its defining frame; a weak reference, since that frame holds the macro.
    std::weak_ptr<Frame> defined_in = frame;
    frame->set(macro.name, Value::callable(macro.name, [this, &macro, defined_in](CallArgs& args) {
                 return call_macro(macro, defined_in.lock(), args);
               }));
  }

  Value call_macro(const MacroStmt& macro, const FramePtr& defined_in, CallArgs& args) {
    if (!defined_in) throw TemplateError("macro '" + macro.name + "' called outside its scope");
    if (args.positional.size() > macro.params.size())
      throw TemplateError("macro '" + macro.name + "' takes not more than " +
                          std::to_string(macro.params.size()) + " argument(s)");
    for (const auto& [key, value] : args.keyword) {
      bool known = false;
      for (const auto& param : macro.params) known = known || param.first == key;
      if (!known)
        throw TemplateError("macro '" + macro.name + "' takes no keyword argument '" + key + "'");
    }
    if (call_depth_ >= kMaxCallDepth)
      throw TemplateError("macro calls nested deeper than " + std::to_string(kMaxCallDepth));
    auto scope = std::make_shared<Frame>(defined_in);
    for (std::size_t i = 0; i < macro.params.size(); ++i) {
      const auto& [name, fallback] = macro.params[i];
      Value value = Value::undefined("parameter '" + name + "' was not provided");
      bool given = i < args.positional.size();
      if (given) value = args.positional[i];
      for (const auto& [key, v] : args.keyword) {
        if (key != name) continue;
        if (given)
          throw TemplateError("macro '" + macro.name + "' got multiple values for argument '" +
                              name + "'");
        value = v;
        given = true;
      }
      if (!given && fallback) value = eval(*fallback, scope);
      scope->set(name, std::move(value));
    }
    ++call_depth_;
    std::string text;
    try {
      exec(macro.body, scope, text);
    } catch (TemplateError& e) {
      --call_depth_;
      e.add_context("in macro '" + macro.name + "'");
      throw;
    }
    --call_depth_;
    return Value::string(std::move(text));
  }

  CallArgs eval_args(const Args& args, const FramePtr& frame) {
    CallArgs out;
    for (const ExprPtr& e : args.positional) out.positional.push_back(eval(*e, frame));
    for (const auto& [key, e] : args.keyword) out.keyword.emplace_back(key, eval(*e, frame));
    return out;
  }

  Value apply(const FilterExpr& filter, const Value& operand, const FramePtr& frame) {
    return apply_filter(filter.name, operand, eval_args(filter.args, frame));
  }

  Value eval(const Expr& expr, const FramePtr& frame) {
    try {
      count_steps(1);
      return eval_expr(expr, frame);
    } catch (TemplateError& e) {
      e.set_line_if_unknown(expr.line);
      throw;
    }
  }

  static bool compare_op(CompareExpr::Op op, const Value& a, const Value& b) {
    switch (op) {
      case CompareExpr::Op::kEq:
        return equals(a, b);
      case CompareExpr::Op::kNe:
        return !equals(a, b);
      case CompareExpr::Op::kLt:
        return compare(a, b) < 0;
      case CompareExpr::Op::kLe:
        return compare(a, b) <= 0;
      case CompareExpr::Op::kGt:
        return compare(a, b) > 0;
      case CompareExpr::Op::kGe:
        return compare(a, b) >= 0;
      case CompareExpr::Op::kIn:
        return contains(b, a);
      case CompareExpr::Op::kNotIn:
        return !contains(b, a);
    }
    return false;
  }

  Value eval_expr(const Expr& expr, const FramePtr& frame) {
    switch (expr.kind) {
      case Expr::Kind::kConst:
        return static_cast<const ConstExpr&>(expr).value;
      case Expr::Kind::kName: {
        const std::string& name = static_cast<const NameExpr&>(expr).name;
        const Value* v = frame->find(name);
        return v ? *v : Value::undefined("'" + name + "' is undefined");
      }
      case Expr::Kind::kList: {
        const auto& e = static_cast<const ListExpr&>(expr);
        std::vector<Value> items;
        for (const ExprPtr& item : e.items) items.push_back(eval(*item, frame));
        return Value::list(std::move(items), e.tuple);
      }
      case Expr::Kind::kDict: {
        DictData dict;
        for (const auto& [key, value] : static_cast<const DictExpr&>(expr).items) {
          const Value k = eval(*key, frame);
          if (!k.is_string())
            throw TemplateError("dict keys must be strings in the chat-template engine, not " +
                                k.type_name());
          dict.set(k.as_string(), eval(*value, frame));
        }
        return Value::dict(std::move(dict));
      }
      case Expr::Kind::kGetattr: {
        const auto& e = static_cast<const GetattrExpr&>(expr);
        return get_attribute(eval(*e.object, frame), e.name);
      }
      case Expr::Kind::kGetitem: {
        const auto& e = static_cast<const GetitemExpr&>(expr);
        const Value object = eval(*e.object, frame);
        return get_item(object, eval(*e.index, frame));
      }
      case Expr::Kind::kSlice: {
        const auto& e = static_cast<const SliceExpr&>(expr);
        const Value object = eval(*e.object, frame);
        auto bound = [&](const ExprPtr& b) { return b ? eval(*b, frame) : Value::none(); };
        const Value start = bound(e.start), stop = bound(e.stop), step = bound(e.step);
        return slice(object, start, stop, step);
      }
      case Expr::Kind::kCall: {
        const auto& e = static_cast<const CallExpr&>(expr);
        const Value callee = eval(*e.callee, frame);
        if (callee.is_undefined()) throw_undefined(callee);
        if (!callee.is_callable())
          throw TemplateError("'" + callee.type_name() + "' object is not callable");
        CallArgs args = eval_args(e.args, frame);
        return callee.as_callable().fn(args);
      }
      case Expr::Kind::kFilter: {
        const auto& e = static_cast<const FilterExpr&>(expr);
        return apply(e, eval(*e.operand, frame), frame);
      }
      case Expr::Kind::kTest: {
        const auto& e = static_cast<const TestExpr&>(expr);
        const Value operand = eval(*e.operand, frame);
        return Value::boolean(apply_test(e.name, operand, eval_args(e.args, frame)));
      }
      case Expr::Kind::kUnary: {
        const auto& e = static_cast<const UnaryExpr&>(expr);
        const Value operand = eval(*e.operand, frame);
        if (e.op == UnaryExpr::Op::kNot) return Value::boolean(!operand.truthy());
        return unary_op(e.op, operand);
      }
      case Expr::Kind::kBinary: {
        const auto& e = static_cast<const BinaryExpr&>(expr);
        Value left = eval(*e.left, frame);
        if (e.op == BinaryExpr::Op::kAnd) return left.truthy() ? eval(*e.right, frame) : left;
        if (e.op == BinaryExpr::Op::kOr) return left.truthy() ? left : eval(*e.right, frame);
        return binary_op(e.op, left, eval(*e.right, frame));
      }
      case Expr::Kind::kCompare: {
        const auto& e = static_cast<const CompareExpr&>(expr);
        Value left = eval(*e.first, frame);
        for (const auto& [op, operand] : e.rest) {
          Value right = eval(*operand, frame);
          if (!compare_op(op, left, right)) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case Expr::Kind::kCond: {
        const auto& e = static_cast<const CondExpr&>(expr);
        if (eval(*e.test, frame).truthy()) return eval(*e.then_expr, frame);
        if (e.else_expr) return eval(*e.else_expr, frame);
        return Value::undefined(
            "the inline if-expression evaluated to false and no else section was defined");
      }
    }
    throw TemplateError("unknown expression");
  }

  int call_depth_ = 0;
};

}  // namespace

std::string evaluate(const Body& body,
                     const std::vector<std::pair<std::string, Value>>& variables) {
  auto root = std::make_shared<Frame>(nullptr);
  for (const auto& [name, value] : variables) root->set(name, value);
  auto top = std::make_shared<Frame>(root);  // the template's own `set`s
  std::string out;
  Evaluator evaluator;  // outlives the macros it defines, which refer to it
  evaluator.exec(body, top, out);
  return out;
}

}  // namespace specrun::jinja
