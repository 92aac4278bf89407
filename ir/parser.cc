// Recursive-descent parser for the IR text form, with line:col diagnostics.
#include "ir/parser.h"

#include <charconv>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "ir/lexer.h"
#include "ir/status.h"

namespace stepjit::ir {
namespace {

// What a `%name` in the text stands for: one value, or a fusion's results
// (which must be indexed with `#i`).
struct Symbol {
  std::vector<Value*> values;
  bool is_fusion = false;
  int line = 0, col = 0;
};

// One graph's names. Fusion bodies get a fresh scope; `parent` only serves
// to explain why an outer name is not visible inside a body.
struct Scope {
  const Scope* parent = nullptr;
  absl::flat_hash_map<std::string, Symbol> symbols;
};

class Parser {
 public:
  Parser(absl::string_view filename, std::vector<Token> tokens)
      : filename_(filename), tokens_(std::move(tokens)) {}

  absl::StatusOr<std::unique_ptr<Graph>> ParseTop() {
    ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, ParseGraphDef(nullptr));
    if (Peek().kind != TokenKind::kEof) {
      return Unexpected(Peek(), "end of input after the graph");
    }
    return graph;
  }

 private:
  const Token& Peek() const { return tokens_[pos_]; }
  const Token& Next() {
    const Token& t = tokens_[pos_];
    if (t.kind != TokenKind::kEof && t.kind != TokenKind::kError) ++pos_;
    return t;
  }

  absl::Status ErrorAt(const Token& at, absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat(
        filename_, ":", at.line, ":", at.col, ": error: ", message));
  }
  // A malformed token reports its own problem instead of "expected ...".
  absl::Status Unexpected(const Token& found, absl::string_view expected) const {
    if (found.kind == TokenKind::kError) return ErrorAt(found, found.text);
    return ErrorAt(found, absl::StrCat("expected ", expected, ", found ",
                                       DescribeToken(found)));
  }
  absl::Status Expect(char punct, absl::string_view context) {
    if (!Peek().Is(punct)) {
      return Unexpected(Peek(), absl::StrCat("`", std::string(1, punct), "` ",
                                             context));
    }
    Next();
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<Graph>> ParseGraphDef(const Scope* parent) {
    if (!Peek().IsIdent("graph")) return Unexpected(Peek(), "`graph`");
    Next();
    if (Peek().kind != TokenKind::kGraphName) {
      return Unexpected(Peek(), "a graph name like @step after `graph`");
    }
    const Token& name = Next();
    if (!IsValidParamName(name.text)) {
      return ErrorAt(name, absl::StrCat("graph name @", name.text,
                                        " must not be all digits"));
    }
    auto graph = std::make_unique<Graph>(name.text);
    Scope scope{parent, {}};
    RETURN_IF_ERROR(Expect('(', "after the graph name"));
    RETURN_IF_ERROR(ParseParams(*graph, scope));
    RETURN_IF_ERROR(Expect('{', "to open the graph body"));
    while (!Peek().IsIdent("return")) {
      RETURN_IF_ERROR(ParseStatement(*graph, scope));
    }
    Next();
    std::vector<Value*> returns;
    if (Peek().kind == TokenKind::kValueName) {
      ASSIGN_OR_RETURN(returns, ParseValueList(scope));
    }
    graph->SetReturns(std::move(returns));
    RETURN_IF_ERROR(
        Expect('}', absl::StrCat("to close graph @", graph->name())));
    return graph;
  }

  absl::Status ParseParams(Graph& graph, Scope& scope) {
    if (Peek().Is(')')) {
      Next();
      return absl::OkStatus();
    }
    while (true) {
      if (Peek().kind != TokenKind::kValueName) {
        return Unexpected(Peek(), "a parameter like `%x: f32[2] input`");
      }
      const Token& name = Next();
      if (!IsValidParamName(name.text)) {
        return ErrorAt(name, absl::StrCat("parameter name %", name.text,
                                          " is reserved for node results"));
      }
      if (auto it = scope.symbols.find(name.text); it != scope.symbols.end()) {
        return ErrorAt(name, absl::StrCat("duplicate parameter name %",
                                          name.text, " (first declared at ",
                                          it->second.line, ":",
                                          it->second.col, ")"));
      }
      RETURN_IF_ERROR(Expect(':', absl::StrCat("after parameter %", name.text)));
      ASSIGN_OR_RETURN(TensorType type, ParseType());
      const Token& kind = Peek();
      if (!kind.IsIdent("input") && !kind.IsIdent("state")) {
        return Unexpected(kind, absl::StrCat("`input` or `state` after the "
                                             "type of %", name.text));
      }
      Next();
      Value* v = graph.AddParam(name.text, std::move(type),
                                kind.text == "state" ? ParamKind::kState
                                                     : ParamKind::kInput);
      scope.symbols[name.text] = Symbol{{v}, false, name.line, name.col};
      if (Peek().Is(')')) {
        Next();
        return absl::OkStatus();
      }
      RETURN_IF_ERROR(Expect(',', "or `)` after a parameter"));
    }
  }

  absl::Status ParseStatement(Graph& graph, Scope& scope) {
    const Token& first = Peek();
    if (first.IsIdent("assign")) {
      Next();
      ASSIGN_OR_RETURN(Value * state, ParseValueRef(scope));
      RETURN_IF_ERROR(Expect(',', "between the assign target and value"));
      ASSIGN_OR_RETURN(Value * value, ParseValueRef(scope));
      graph.AddAssign(state, value);
      return absl::OkStatus();
    }
    if (first.kind != TokenKind::kValueName) {
      if (first.Is('}')) {
        return ErrorAt(first, absl::StrCat("expected `return` before the `}` "
                                           "closing graph @", graph.name()));
      }
      return Unexpected(first,
                        "a statement (`%name = ...`, `assign` or `return`)");
    }
    const Token& name = Next();
    if (auto it = scope.symbols.find(name.text); it != scope.symbols.end()) {
      return ErrorAt(name, absl::StrCat("value %", name.text,
                                        " redefined (first defined at ",
                                        it->second.line, ":", it->second.col,
                                        ")"));
    }
    RETURN_IF_ERROR(Expect('=', absl::StrCat("after %", name.text)));
    Symbol symbol{{}, false, name.line, name.col};
    if (Peek().IsIdent("fusion")) {
      Next();
      ASSIGN_OR_RETURN(Node * node, ParseFusion(graph, scope));
      symbol.values = node->outputs();
      symbol.is_fusion = true;
    } else {
      ASSIGN_OR_RETURN(Node * node, ParseOp(graph, scope, name.text));
      symbol.values = node->outputs();
    }
    scope.symbols[name.text] = std::move(symbol);
    return absl::OkStatus();
  }

  absl::StatusOr<Node*> ParseOp(Graph& graph, Scope& scope,
                                const std::string& result) {
    const Token& op_tok = Peek();
    if (op_tok.kind != TokenKind::kIdent) {
      return Unexpected(op_tok, absl::StrCat("an op name after `%", result,
                                             " =`"));
    }
    std::optional<OpId> op = ParseOpName(op_tok.text);
    if (!op) return ErrorAt(op_tok, absl::StrCat("unknown op `", op_tok.text, "`"));
    Next();
    std::vector<Value*> inputs;
    if (Peek().kind == TokenKind::kValueName) {
      ASSIGN_OR_RETURN(inputs, ParseValueList(scope));
    }
    Attrs attrs;
    if (Peek().Is('{')) {
      ASSIGN_OR_RETURN(attrs, ParseAttrs());
    }
    RETURN_IF_ERROR(
        Expect(':', absl::StrCat("and the result type of %", result)));
    ASSIGN_OR_RETURN(TensorType type, ParseType());
    return graph.AddOp(*op, std::move(inputs), std::move(attrs),
                       std::move(type));
  }

  absl::StatusOr<Node*> ParseFusion(Graph& graph, Scope& scope) {
    if (Peek().kind != TokenKind::kGraphName) {
      return Unexpected(Peek(), "a body name like @fused_0 after `fusion`");
    }
    const Token& name = Next();
    RETURN_IF_ERROR(Expect('(', "before the fusion inputs"));
    std::vector<Value*> inputs;
    if (!Peek().Is(')')) {
      ASSIGN_OR_RETURN(inputs, ParseValueList(scope));
    }
    RETURN_IF_ERROR(Expect(')', "after the fusion inputs"));
    RETURN_IF_ERROR(Expect(':', "and the fusion result types"));
    const Token& types_tok = Peek();
    RETURN_IF_ERROR(Expect('(', "before the fusion result types"));
    std::vector<TensorType> types;
    while (!Peek().Is(')')) {
      if (!types.empty()) {
        RETURN_IF_ERROR(Expect(',', "or `)` after a result type"));
      }
      ASSIGN_OR_RETURN(TensorType t, ParseType());
      types.push_back(std::move(t));
    }
    Next();
    RETURN_IF_ERROR(Expect('{', "before the fusion body"));
    const Token& body_tok = Peek();
    ASSIGN_OR_RETURN(std::unique_ptr<Graph> body, ParseGraphDef(&scope));
    if (body->name() != name.text) {
      return ErrorAt(body_tok, absl::StrCat("fusion @", name.text,
                                            " has a body named @",
                                            body->name()));
    }
    RETURN_IF_ERROR(
        Expect('}', absl::StrCat("after the body of fusion @", name.text)));
    if (types.size() != body->returns().size()) {
      return ErrorAt(types_tok,
                     absl::StrCat("fusion @", name.text, " declares ",
                                  types.size(), " result types but its body "
                                  "returns ", body->returns().size(),
                                  " values"));
    }
    Node* node = graph.AddFusion(std::move(body), std::move(inputs));
    for (size_t i = 0; i < types.size(); ++i) {
      node->outputs()[i]->set_type(std::move(types[i]));
    }
    return node;
  }

  absl::StatusOr<std::vector<Value*>> ParseValueList(const Scope& scope) {
    std::vector<Value*> values;
    while (true) {
      ASSIGN_OR_RETURN(Value * v, ParseValueRef(scope));
      values.push_back(v);
      if (!Peek().Is(',')) return values;
      Next();
    }
  }

  absl::StatusOr<Value*> ParseValueRef(const Scope& scope) {
    const Token& tok = Peek();
    if (tok.kind != TokenKind::kValueName) {
      return Unexpected(tok, "a value like %x");
    }
    Next();
    auto it = scope.symbols.find(tok.text);
    if (it == scope.symbols.end()) {
      std::string hint;
      for (const Scope* s = scope.parent; s != nullptr; s = s->parent) {
        if (s->symbols.contains(tok.text)) {
          hint = " (a fusion body sees only its own parameters)";
        }
      }
      return ErrorAt(tok, absl::StrCat("undefined value %", tok.text, hint));
    }
    const Symbol& sym = it->second;
    if (!Peek().Is('#')) {
      if (sym.is_fusion) {
        return ErrorAt(tok, absl::StrCat("fusion result %", tok.text,
                                         " needs an index, like %", tok.text,
                                         "#0"));
      }
      return sym.values[0];
    }
    const Token& hash = Next();
    if (!sym.is_fusion) {
      return ErrorAt(hash, absl::StrCat("%", tok.text, " is not a fusion; "
                                        "`#` indexes fusion results only"));
    }
    if (Peek().kind != TokenKind::kInt) {
      return Unexpected(Peek(), absl::StrCat("a result index after %",
                                             tok.text, "#"));
    }
    const Token& index_tok = Next();
    int64_t index = -1;
    std::from_chars(index_tok.text.data(),
                    index_tok.text.data() + index_tok.text.size(), index);
    if (index < 0 || index >= static_cast<int64_t>(sym.values.size())) {
      return ErrorAt(index_tok,
                     absl::StrCat("index #", index_tok.text, " out of range: %",
                                  tok.text, " has ", sym.values.size(),
                                  " results"));
    }
    return sym.values[index];
  }

  absl::StatusOr<TensorType> ParseType() {
    const Token& dtype_tok = Peek();
    if (dtype_tok.kind != TokenKind::kIdent) {
      return Unexpected(dtype_tok, "a type like f32[2,3]");
    }
    std::optional<DType> dtype = ParseDType(dtype_tok.text);
    if (!dtype) {
      return ErrorAt(dtype_tok, absl::StrCat("unknown dtype `", dtype_tok.text,
                                             "` (expected f32, f64, f16, "
                                             "bf16, i64, i32 or bool)"));
    }
    Next();
    RETURN_IF_ERROR(
        Expect('[', absl::StrCat("after dtype ", dtype_tok.text)));
    TensorType type{*dtype, {}};
    while (!Peek().Is(']')) {
      if (!type.shape.empty()) {
        RETURN_IF_ERROR(Expect(',', "or `]` in the shape"));
      }
      const Token& dim = Peek();
      if (dim.kind != TokenKind::kInt) {
        return Unexpected(dim, "a dimension size in the shape");
      }
      ASSIGN_OR_RETURN(int64_t size, ParseInt(dim));
      if (size < 0) {
        return ErrorAt(dim, absl::StrCat("dimension sizes must be "
                                         "non-negative, found ", size));
      }
      Next();
      type.shape.push_back(size);
    }
    Next();
    return type;
  }

  absl::StatusOr<Attrs> ParseAttrs() {
    Next();  // '{'
    Attrs attrs;
    while (!Peek().Is('}')) {
      if (!attrs.items().empty()) {
        RETURN_IF_ERROR(Expect(',', "or `}` after an attribute"));
      }
      const Token& key_tok = Peek();
      if (key_tok.kind != TokenKind::kIdent) {
        return Unexpected(key_tok, "an attribute name");
      }
      std::optional<AttrKey> key = ParseAttrKey(key_tok.text);
      if (!key) {
        return ErrorAt(key_tok,
                       absl::StrCat("unknown attribute `", key_tok.text, "`"));
      }
      if (attrs.Has(*key)) {
        return ErrorAt(key_tok, absl::StrCat("attribute `", key_tok.text,
                                             "` given twice"));
      }
      Next();
      RETURN_IF_ERROR(
          Expect('=', absl::StrCat("after attribute `", key_tok.text, "`")));
      ASSIGN_OR_RETURN(AttrValue value, ParseAttrValue(key_tok.text));
      attrs.Set(*key, std::move(value));
    }
    Next();
    return attrs;
  }

  absl::StatusOr<AttrValue> ParseAttrValue(const std::string& key) {
    const Token& tok = Peek();
    const std::string what = absl::StrCat(
        "a value for attribute `", key,
        "` (integer, float, true/false, dtype, string or [integers])");
    switch (tok.kind) {
      case TokenKind::kInt: {
        ASSIGN_OR_RETURN(int64_t i, ParseInt(tok));
        Next();
        return AttrValue(i);
      }
      case TokenKind::kFloat: {
        ASSIGN_OR_RETURN(double d, ParseDouble(tok));
        Next();
        return AttrValue(d);
      }
      case TokenKind::kString:
        Next();
        return AttrValue(tok.text);
      case TokenKind::kIdent: {
        AttrValue value;
        if (tok.text == "true" || tok.text == "false") {
          value = tok.text == "true";
        } else if (tok.text == "inf" || tok.text == "nan") {
          value = tok.text == "inf" ? std::numeric_limits<double>::infinity()
                                    : std::numeric_limits<double>::quiet_NaN();
        } else if (std::optional<DType> t = ParseDType(tok.text)) {
          value = *t;
        } else {
          return Unexpected(tok, what);
        }
        Next();
        return value;
      }
      default:
        break;
    }
    if (!tok.Is('[')) return Unexpected(tok, what);
    Next();
    std::vector<int64_t> list;
    while (!Peek().Is(']')) {
      if (!list.empty()) {
        RETURN_IF_ERROR(Expect(',', absl::StrCat("or `]` in the list for `",
                                                 key, "`")));
      }
      if (Peek().kind != TokenKind::kInt) {
        return Unexpected(Peek(), absl::StrCat("an integer in the list for `",
                                               key, "`"));
      }
      ASSIGN_OR_RETURN(int64_t i, ParseInt(Peek()));
      Next();
      list.push_back(i);
    }
    Next();
    return AttrValue(std::move(list));
  }

  absl::StatusOr<int64_t> ParseInt(const Token& tok) const {
    int64_t v = 0;
    const char* end = tok.text.data() + tok.text.size();
    auto [ptr, ec] = std::from_chars(tok.text.data(), end, v);
    if (ec != std::errc() || ptr != end) {
      return ErrorAt(tok, absl::StrCat("integer ", tok.text,
                                       " does not fit in 64 bits"));
    }
    return v;
  }

  absl::StatusOr<double> ParseDouble(const Token& tok) const {
    if (tok.text == "-inf") return -std::numeric_limits<double>::infinity();
    double v = 0;
    const char* end = tok.text.data() + tok.text.size();
    auto [ptr, ec] = std::from_chars(tok.text.data(), end, v);
    if (ec != std::errc() || ptr != end) {
      return ErrorAt(tok, absl::StrCat("float ", tok.text,
                                       " is out of the range of f64"));
    }
    return v;
  }

  std::string filename_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Graph>> ParseGraph(absl::string_view text,
                                                  absl::string_view filename) {
  return Parser(filename, Tokenize(text)).ParseTop();
}

}  // namespace stepjit::ir
