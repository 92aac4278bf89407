// Recursive-descent parser for the IR text form, with line:col diagnostics.
#include "ir/parser.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "ir/lexer.h"
#include "ir/status.h"
#include "ir/token_stream.h"

namespace stepjit::ir {
namespace {

// What a `%name` in the text stands for: one value, or the results of a
// fusion or of a multi-result op (which must be indexed with `#i`).
struct Symbol {
  std::vector<Value*> values;
  std::string indexed_kind;  // "fusion", an op's name, or "" for one value
  int line = 0, col = 0;
};

// One graph's names. Fusion bodies get a fresh scope; `parent` only serves
// to explain why an outer name is not visible inside a body.
struct Scope {
  const Scope* parent = nullptr;
  absl::flat_hash_map<std::string, Symbol> symbols;
};

// The graph grammar; tokens, types and attributes come from TokenStream.
class Parser : public TokenStream {
 public:
  using TokenStream::TokenStream;
  static constexpr int kMaxFusionNesting = 64;

  absl::StatusOr<std::unique_ptr<Graph>> ParseTop() {
    ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, ParseGraphDef(nullptr));
    if (Peek().kind != TokenKind::kEof) {
      return Unexpected(Peek(), "end of input after the graph");
    }
    return graph;
  }

 private:
  // The next token, a name of `kind` (else "expected `expected`, found ...")
  // that IsValidParamName accepts (else "<what><name><why>").
  absl::StatusOr<const Token*> ParseName(TokenKind kind,
                                         absl::string_view expected,
                                         absl::string_view what,
                                         absl::string_view why) {
    if (Peek().kind != kind) return Unexpected(Peek(), expected);
    const Token& name = Next();
    if (!IsValidParamName(name.text)) {
      return ErrorAt(name, absl::StrCat(what, name.text, why));
    }
    return &name;
  }

  absl::StatusOr<std::unique_ptr<Graph>> ParseGraphDef(const Scope* parent) {
    if (!Peek().IsIdent("graph")) return Unexpected(Peek(), "`graph`");
    Next();
    ASSIGN_OR_RETURN(const Token* name,
                     ParseName(TokenKind::kGraphName,
                               "a graph name like @step after `graph`",
                               "graph name @", " must not be all digits"));
    auto graph = std::make_unique<Graph>(name->text);
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
      ASSIGN_OR_RETURN(
          const Token* name_token,
          ParseName(TokenKind::kValueName,
                    "a parameter like `%x: f32[2] input`", "parameter name %",
                    " is reserved for node results"));
      const Token& name = *name_token;
      if (auto it = scope.symbols.find(name.text); it != scope.symbols.end()) {
        return ErrorAt(
            name, absl::StrCat("duplicate parameter name %", name.text,
                               " (first declared at ", it->second.line, ":",
                               it->second.col, ")"));
      }
      RETURN_IF_ERROR(
          Expect(':', absl::StrCat("after parameter %", name.text)));
      ASSIGN_OR_RETURN(TensorType type, ParseType());
      const Token& kind = Peek();
      const std::optional<ParamKind> param_kind =
          kind.kind == TokenKind::kIdent ? ParseParamKind(kind.text)
                                         : std::nullopt;
      if (!param_kind) {
        return Unexpected(kind,
                          absl::StrCat("`input`, `state` or `random` after "
                                       "the type of %",
                                       name.text));
      }
      Next();
      Value* v = graph.AddParam(name.text, std::move(type), *param_kind);
      scope.symbols[name.text] = Symbol{{v}, "", name.line, name.col};
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
                                           "closing graph @",
                                           graph.name()));
      }
      return Unexpected(first,
                        "a statement (`%name = ...`, `assign` or `return`)");
    }
    const Token& name = Next();
    if (auto it = scope.symbols.find(name.text); it != scope.symbols.end()) {
      return ErrorAt(
          name,
          absl::StrCat("value %", name.text, " redefined (first defined at ",
                       it->second.line, ":", it->second.col, ")"));
    }
    RETURN_IF_ERROR(Expect('=', absl::StrCat("after %", name.text)));
    Symbol symbol{{}, "", name.line, name.col};
    if (Peek().IsIdent("fusion")) {
      Next();
      ASSIGN_OR_RETURN(Node * node, ParseFusion(graph, scope));
      symbol.values = node->outputs();
      symbol.indexed_kind = "fusion";
    } else {
      ASSIGN_OR_RETURN(Node * node, ParseOp(graph, scope, name.text));
      symbol.values = node->outputs();
      if (node->outputs().size() > 1) {
        symbol.indexed_kind = std::string(OpName(node->op()));
      }
    }
    scope.symbols[name.text] = std::move(symbol);
    return absl::OkStatus();
  }

  absl::StatusOr<Node*> ParseOp(Graph& graph, Scope& scope,
                                const std::string& result) {
    const Token& op_tok = Peek();
    if (op_tok.kind != TokenKind::kIdent) {
      return Unexpected(op_tok,
                        absl::StrCat("an op name after `%", result, " =`"));
    }
    std::optional<OpId> op = ParseOpName(op_tok.text);
    if (!op)
      return ErrorAt(op_tok, absl::StrCat("unknown op `", op_tok.text, "`"));
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
    std::vector<TensorType> types;
    if (Peek().Is('(')) {
      // Several results: `: (f32[4,16], f32[4])`.
      const Token& open = Next();
      ASSIGN_OR_RETURN(types, ParseTypeList());
      if (types.size() < 2) {
        return ErrorAt(open,
                       absl::StrCat("%", result, " declares ", types.size(),
                                    " result types in parentheses; one "
                                    "result type is written without them"));
      }
    } else {
      ASSIGN_OR_RETURN(TensorType type, ParseType());
      types.push_back(std::move(type));
    }
    return graph.AddOp(*op, std::move(inputs), std::move(attrs),
                       std::move(types));
  }

  // The types after `(` up to and including `)`.
  absl::StatusOr<std::vector<TensorType>> ParseTypeList() {
    std::vector<TensorType> types;
    while (!Peek().Is(')')) {
      if (!types.empty()) {
        RETURN_IF_ERROR(Expect(',', "or `)` after a result type"));
      }
      ASSIGN_OR_RETURN(TensorType t, ParseType());
      types.push_back(std::move(t));
    }
    Next();
    return types;
  }

  int depth_ = 0;  // fusion bodies open around the current statement

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
    ASSIGN_OR_RETURN(std::vector<TensorType> types, ParseTypeList());
    RETURN_IF_ERROR(Expect('{', "before the fusion body"));
    const Token& body_tok = Peek();
    // Bodies nest by recursion here and in every pass: a bound keeps a
    // hostile file from overflowing the stack.
    if (depth_ == kMaxFusionNesting) {
      return ErrorAt(
          name, absl::StrCat("fusion @", name.text, " nests deeper than ",
                             kMaxFusionNesting,
                             " fusion bodies (the most the parser accepts)"));
    }
    ++depth_;
    absl::StatusOr<std::unique_ptr<Graph>> parsed = ParseGraphDef(&scope);
    --depth_;
    ASSIGN_OR_RETURN(std::unique_ptr<Graph> body, std::move(parsed));
    if (body->name() != name.text) {
      return ErrorAt(body_tok,
                     absl::StrCat("fusion @", name.text, " has a body named @",
                                  body->name()));
    }
    RETURN_IF_ERROR(
        Expect('}', absl::StrCat("after the body of fusion @", name.text)));
    if (types.size() != body->returns().size()) {
      return ErrorAt(
          types_tok,
          absl::StrCat("fusion @", name.text, " declares ", types.size(),
                       " result types but its body "
                       "returns ",
                       body->returns().size(), " values"));
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
      if (!sym.indexed_kind.empty()) {
        return ErrorAt(tok,
                       absl::StrCat(sym.indexed_kind, " result %", tok.text,
                                    " needs an index, like %", tok.text, "#0"));
      }
      return sym.values[0];
    }
    const Token& hash = Next();
    if (sym.indexed_kind.empty()) {
      return ErrorAt(hash,
                     absl::StrCat("%", tok.text,
                                  " has one result; `#` indexes the results "
                                  "of fusions and multi-result ops"));
    }
    if (Peek().kind != TokenKind::kInt) {
      return Unexpected(Peek(),
                        absl::StrCat("a result index after %", tok.text, "#"));
    }
    const Token& index_tok = Next();
    ASSIGN_OR_RETURN(int64_t index, ParseInt(index_tok));
    if (index < 0 || index >= static_cast<int64_t>(sym.values.size())) {
      return ErrorAt(
          index_tok,
          absl::StrCat("index #", index_tok.text, " out of range: %", tok.text,
                       " has ", sym.values.size(), " results"));
    }
    return sym.values[index];
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Graph>> ParseGraph(absl::string_view text,
                                                  absl::string_view filename,
                                                  int first_line) {
  std::vector<Token> tokens = Tokenize(text);
  if (first_line != 1) {
    for (Token& t : tokens) t.line += first_line - 1;
  }
  return Parser(filename, std::move(tokens)).ParseTop();
}

}  // namespace stepjit::ir
