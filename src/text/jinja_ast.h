// The syntax tree of a parsed template (jinja_parser.h builds it, jinja_eval.h runs it). Nodes
// carry their template line for error messages.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja_value.h"

namespace specrun::jinja {

struct Expr {
  enum class Kind {
    kConst,
    kName,
    kList,  // also tuples
    kDict,
    kGetattr,
    kGetitem,
    kSlice,
    kCall,
    kFilter,
    kTest,
    kUnary,
    kBinary,
    kCompare,
    kCond
  };
  Expr(Kind k, int l) : kind(k), line(l) {}
  virtual ~Expr() = default;
  Kind kind;
  int line;
};
using ExprPtr = std::unique_ptr<Expr>;

struct Args {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
};

struct ConstExpr : Expr {
  ConstExpr(Value v, int l) : Expr(Kind::kConst, l), value(std::move(v)) {}
  Value value;
};
struct NameExpr : Expr {
  NameExpr(std::string n, int l) : Expr(Kind::kName, l), name(std::move(n)) {}
  std::string name;
};
struct ListExpr : Expr {
  ListExpr(bool t, int l) : Expr(Kind::kList, l), tuple(t) {}
  bool tuple;
  std::vector<ExprPtr> items;
};
struct DictExpr : Expr {
  explicit DictExpr(int l) : Expr(Kind::kDict, l) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};
struct GetattrExpr : Expr {  // object.name
  GetattrExpr(ExprPtr o, std::string n, int l)
      : Expr(Kind::kGetattr, l), object(std::move(o)), name(std::move(n)) {}
  ExprPtr object;
  std::string name;
};
struct GetitemExpr : Expr {  // object[index]
  GetitemExpr(ExprPtr o, ExprPtr i, int l)
      : Expr(Kind::kGetitem, l), object(std::move(o)), index(std::move(i)) {}
  ExprPtr object, index;
};
struct SliceExpr : Expr {  // object[start:stop:step], each bound optional (null)
  SliceExpr(ExprPtr o, int l) : Expr(Kind::kSlice, l), object(std::move(o)) {}
  ExprPtr object, start, stop, step;
};
struct CallExpr : Expr {
  CallExpr(ExprPtr c, int l) : Expr(Kind::kCall, l), callee(std::move(c)) {}
  ExprPtr callee;
  Args args;
};
struct FilterExpr : Expr {  // operand | name(args); operand null in a filter block
  FilterExpr(ExprPtr o, std::string n, int l)
      : Expr(Kind::kFilter, l), operand(std::move(o)), name(std::move(n)) {}
  ExprPtr operand;
  std::string name;
  Args args;
};
struct TestExpr : Expr {  // operand is name(args); `is not` is a kNot around it
  TestExpr(ExprPtr o, std::string n, int l)
      : Expr(Kind::kTest, l), operand(std::move(o)), name(std::move(n)) {}
  ExprPtr operand;
  std::string name;
  Args args;
};
struct UnaryExpr : Expr {
  enum class Op { kNot, kNeg, kPos };
  UnaryExpr(Op o, ExprPtr e, int l) : Expr(Kind::kUnary, l), op(o), operand(std::move(e)) {}
  Op op;
  ExprPtr operand;
};
struct BinaryExpr : Expr {
  enum class Op { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow, kConcat, kAnd, kOr };
  BinaryExpr(Op o, ExprPtr a, ExprPtr b, int l)
      : Expr(Kind::kBinary, l), op(o), left(std::move(a)), right(std::move(b)) {}
  Op op;
  ExprPtr left, right;
};
struct CompareExpr : Expr {  // first op1 e1 op2 e2 ...: Python's chained comparison
  enum class Op { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };
  CompareExpr(ExprPtr f, int l) : Expr(Kind::kCompare, l), first(std::move(f)) {}
  ExprPtr first;
  std::vector<std::pair<Op, ExprPtr>> rest;
};
struct CondExpr : Expr {  // then_expr if test else else_expr (else_expr may be null)
  CondExpr(ExprPtr t, ExprPtr a, ExprPtr b, int l)
      : Expr(Kind::kCond, l),
        test(std::move(t)),
        then_expr(std::move(a)),
        else_expr(std::move(b)) {}
  ExprPtr test, then_expr, else_expr;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    kText,
    kOutput,
    kIf,
    kFor,
    kSet,
    kSetBlock,
    kMacro,
    kFilterBlock,
    kBreak,
    kContinue,
    kBlock
  };
  Stmt(Kind k, int l) : kind(k), line(l) {}
  virtual ~Stmt() = default;
  Kind kind;
  int line;
};

struct TextStmt : Stmt {
  TextStmt(std::string t, int l) : Stmt(Kind::kText, l), text(std::move(t)) {}
  std::string text;
};
struct OutputStmt : Stmt {  // {{ expr }}
  OutputStmt(ExprPtr e, int l) : Stmt(Kind::kOutput, l), expr(std::move(e)) {}
  ExprPtr expr;
};
struct IfStmt : Stmt {  // if / elif ... / else
  explicit IfStmt(int l) : Stmt(Kind::kIf, l) {}
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body else_body;
};
// Assignment targets: one name, names to unpack (`a, b`), or a namespace attribute (`ns.x`).
struct Target {
  std::vector<std::string> names;
  bool unpack = false;
  std::string attribute;  // set: names[0] is the namespace
};
struct ForStmt : Stmt {
  explicit ForStmt(int l) : Stmt(Kind::kFor, l) {}
  Target target;
  ExprPtr iterable;
  ExprPtr filter;  // `for x in xs if cond`, or null
  Body body, else_body;
  std::string header;  // "for message in messages", for error messages
};
struct SetStmt : Stmt {
  explicit SetStmt(int l) : Stmt(Kind::kSet, l) {}
  Target target;
  ExprPtr value;
};
struct SetBlockStmt : Stmt {  // {% set x | filters %}body{% endset %}
  explicit SetBlockStmt(int l) : Stmt(Kind::kSetBlock, l) {}
  Target target;
  std::vector<std::unique_ptr<FilterExpr>> filters;
  Body body;
};
struct MacroStmt : Stmt {
  explicit MacroStmt(int l) : Stmt(Kind::kMacro, l) {}
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // default null when none
  Body body;
};
struct FilterBlockStmt : Stmt {  // {% filter f | g %}body{% endfilter %}
  explicit FilterBlockStmt(int l) : Stmt(Kind::kFilterBlock, l) {}
  std::vector<std::unique_ptr<FilterExpr>> filters;
  Body body;
};
struct BlockStmt : Stmt {  // a body rendered in place: transformers' {% generation %}
  explicit BlockStmt(int l) : Stmt(Kind::kBlock, l) {}
  Body body;
};

}  // namespace specrun::jinja
