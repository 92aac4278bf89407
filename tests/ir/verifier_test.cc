// Tests the message of every verifier error, on parsed text where the text
// can express the mistake and on API-built graphs where it cannot.
#include "ir/verifier.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "ir/graph.h"
#include "ir/parser.h"
#include "tests/util/ir_types.h"

namespace stepjit::ir {
namespace {

using ::stepjit::test::F32;

std::string VerifyText(const std::string& text) {
  auto g = ParseGraph(text);
  if (!g.ok()) return absl::StrCat("parse error: ", g.status().message());
  absl::Status status = Verify(**g);
  if (status.ok()) return "ok";
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  return std::string(status.message());
}

std::string VerifyGraph(const Graph& g) {
  absl::Status status = Verify(g);
  return status.ok() ? "ok" : std::string(status.message());
}

constexpr const char* kHead =
    "graph @g(%a: f32[2] input, %b: f32[4] input, %s: f32[3] state) {\n";

TEST(VerifierTest, AcceptsValidGraph) {
  EXPECT_EQ(VerifyText(absl::StrCat(kHead, R"(
    %0 = neg %a : f32[2]
    %1 = fusion @k(%0, %s) : (f32[3], f32[2]) {
      graph @k(%p: f32[2] input, %q: f32[3] input) {
        %0 = exp %q : f32[3]
        return %0, %p
      }
    }
    assign %s, %1#0
    return %1#1, %b
  })")),
            "ok");
}

struct Case {
  const char* body;  // statements after kHead
  const char* message;
};

TEST(VerifierTest, ErrorMessagesOnText) {
  const Case cases[] = {
      {"%0 = add %a : f32[2] return }",
       "%0 = add %a: `add` expects 2 operands, got 1"},
      {"%0 = layer_norm %a, %a, %a, %a : f32[2] return }",
       "%0 = layer_norm %a, %a, %a, %a: `layer_norm` expects 1 to 3 operands, "
       "got 4"},
      {"%0 = full : f32[] %1 = add %a, %b : f32[4] return }",
       "%1 = add %a, %b: add(f32[2], f32[4]): shapes [2] and [4] are not "
       "broadcastable (dim 0: 2 vs 4)"},
      {"%0 = neg %a : i32[7] return }",
       "%0 = neg %a: declared type i32[7] but inferred f32[2]"},
      // Attributes against the op's schema (ops.def's OP_ATTR rows).
      {"%0 = neg %a {dim = 0} : f32[2] return }",
       "%0 = neg %a: neg takes no attribute 'dim' (it takes none)"},
      {"%0 = rand {shape = [2], low = 0.0} : f32[2] return }",
       "%0 = rand: rand takes no attribute 'low' (it takes shape, dtype, "
       "seed, offset)"},
      {"%0 = softmax %a {dim = \"last\"} : f32[2] return }",
       "%0 = softmax %a: softmax: attribute 'dim' expected int, got string"},
      {"%0 = sum %a {dims = 0.5} : f32[] return }",
       "%0 = sum %a: sum: attribute 'dims' expected [int], got float"},
      {"%0 = cast %a : f32[2] return }",
       "%0 = cast %a: cast: missing required attribute 'dtype' (dtype)"},
      {"%0 = full {shape = [2], dtype = f64} : f64[3] return }",
       "%0 = full: declared type f64[3] but inferred f64[2]"},
      {"%0 = fusion @k(%a) : (f32[2]) { graph @k(%p: f32[2] input) {"
       " %0 = neg %p : f32[3] return %p } } return }",
       "in fusion @k: %0 = neg %p: declared type f32[3] but inferred f32[2]"},
      {"%0 = fusion @k(%a) : (f32[2]) { graph @k(%p: f32[2] input) {"
       " %0 = fusion @j(%p) : (f32[2]) { graph @j(%q: f32[2] input) {"
       " %0 = relu %q : bool[2] return %q } } return %p } } return }",
       "in fusion @k: in fusion @j: %0 = relu %q: declared type bool[2] but "
       "inferred f32[2]"},
      {"%0 = fusion @k(%a, %a) : (f32[2]) { graph @k(%p: f32[2] input) {"
       " return %p } } return }",
       "%0 = fusion @k(%a, %a): 2 inputs for 1 body parameters"},
      {"%0 = fusion @k(%a) : (f32[2]) { graph @k(%p: f32[3] input) {"
       " return %p } } return }",
       "%0 = fusion @k(%a): input 0 (%a) is f32[2] but body parameter %p is "
       "f32[3]"},
      {"%0 = fusion @k(%a) : (f32[3]) { graph @k(%p: f32[2] input) {"
       " return %p } } return }",
       "%0 = fusion @k(%a): result #0 is declared f32[3] but the body returns "
       "%p of type f32[2]"},
      {"%0 = fusion @k(%s) : () { graph @k(%p: f32[3] state) {"
       " assign %p, %p return } } return }",
       "in fusion @k: assign %p, %p: assign is not allowed inside fusion body "
       "@k"},
      {"%0 = neg %a : f32[2] assign %0, %a return }",
       "assign %0, %a: target %0 is not a parameter"},
      {"%0 = neg %a : f32[2] assign %a, %0 return }",
       "assign %a, %0: target %a is an input parameter, not state"},
      {"assign %s, %a return }",
       "assign %s, %a: value %a is f32[2] but state %s is f32[3]"},
      // Several results: only a matmul's bias gradient.
      {"%0 = full {shape = [8, 4], dtype = f32} : f32[8,4]"
       " %1 = matmul %0, %0 {transpose_a = true, epilogue = \"bgrad\"}"
       " : (f32[4,4], f32[8]) return }",
       "%1 = matmul %0, %0: declared result #1 type f32[8] but inferred "
       "f32[4]"},
      {"%0 = full {shape = [8, 4], dtype = f32} : f32[8,4]"
       " %1 = matmul %0, %0 {transpose_a = true} : (f32[4,4], f32[4]) return }",
       "%1 = matmul %0, %0: matmul(f32[8, 4], f32[8, 4]): a second result "
       "(the bias gradient) needs 2 operands and epilogue = \"bgrad\", got 2 "
       "operands and epilogue ''"},
      {"%0 = full {shape = [8, 4], dtype = f32} : f32[8,4]"
       " %1 = matmul %0, %0 {transpose_a = true, epilogue = \"bgrad\"}"
       " : (f32[4,4], f32[4], f32[4]) return }",
       "%1 = matmul %0, %0: matmul(f32[8, 4], f32[8, 4]): expects 1 result, "
       "or 2 with epilogue = \"bgrad\" (the product and the bias gradient), "
       "got 3"},
      {"%0 = add %a, %a : (f32[2], f32[2]) return }",
       "%0 = add %a, %a: add(f32[2], f32[2]): expects 1 result, got 2"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(VerifyText(absl::StrCat(kHead, c.body)), c.message)
        << "input: " << c.body;
  }
}

// The graph's random state: one `random` param, i64[2], at the top level;
// a random op that takes a state operand takes that param.
TEST(VerifierTest, RandomState) {
  const Case cases[] = {
      {"graph @g(%a: f32[2] input, %r: i64[2] random) {"
       " %0 = dropout %a, %r {p = 0.5, seed = 0, offset = 0} : f32[2]"
       " %1 = rand %r {shape = [3], dtype = f32, seed = 0, offset = 2}"
       " : f32[3] return %0, %1 }",
       "ok"},
      {"graph @g(%a: f32[2] input, %r: i64[3] random) { return }",
       "random parameter %r must be i64[2] (seed, shift), got i64[3]"},
      {"graph @g(%r: i64[2] random, %q: i64[2] random) { return }",
       "graph @g has two random parameters, %r and %q"},
      {"graph @g(%a: f32[2] input, %i: i64[2] input) {"
       " %0 = dropout %a, %i {p = 0.5, seed = 0, offset = 0} : f32[2]"
       " return %0 }",
       "%0 = dropout %a, %i: its last operand %i must be the graph's random "
       "parameter (a `random` param, i64[2])"},
      {"graph @g(%a: f32[2] input, %r: i64[2] random) {"
       " %0 = fusion @k(%r) : () { graph @k(%p: i64[2] random) {"
       " return } } return }",
       "in fusion @k: fusion body @k has a random parameter %p; only a "
       "top-level graph has one"},
      {"graph @g(%a: f32[2] input, %b: f32[2] input) {"
       " %0 = dropout %a, %b {p = 0.5, seed = 0, offset = 0} : f32[2]"
       " return %0 }",
       "%0 = dropout %a, %b: its last operand %b must be the graph's random "
       "parameter (a `random` param, i64[2])"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(VerifyText(c.body), c.message) << "input: " << c.body;
  }
}

TEST(VerifierTest, NullOperand) {
  Graph g("g");
  g.AddOp(OpId::kNeg, {nullptr}, {}, F32({2}));
  EXPECT_EQ(VerifyGraph(g), "%0 = neg %?: operand 0 is null");
}

TEST(VerifierTest, OperandFromAnotherGraph) {
  Graph other("other");
  Value* foreign = other.AddParam("x", F32({2}), ParamKind::kInput);
  Graph g("g");
  g.AddOp(OpId::kNeg, {foreign}, {}, F32({2}));
  EXPECT_EQ(VerifyGraph(g),
            "%0 = neg %?: operand 0 is not defined in graph @g");
  g.SetReturns({foreign});
  g.EraseNodesIf([](const Node*) { return true; });
  EXPECT_EQ(VerifyGraph(g), "return %?: operand 0 is not defined in graph @g");
}

TEST(VerifierTest, FusionBodySeesOnlyItsParameters) {
  Graph g("g");
  Value* a = g.AddParam("a", F32({2}), ParamKind::kInput);
  auto body = std::make_unique<Graph>("k");
  Node* neg = body->AddOp(OpId::kNeg, {a}, {}, F32({2}));
  body->SetReturns({neg->output()});
  g.AddFusion(std::move(body), {});
  EXPECT_EQ(VerifyGraph(g),
            "in fusion @k: %0 = neg %?: operand 0 is %a of an enclosing graph; "
            "fusion body @k sees only its own parameters");
}

TEST(VerifierTest, UseBeforeDefinition) {
  Graph g("g");
  Value* a = g.AddParam("a", F32({2}), ParamKind::kInput);
  Node* first = g.AddOp(OpId::kNeg, {a}, {}, F32({2}));
  g.AddOp(OpId::kNeg, {first->output()}, {}, F32({2}));
  g.MoveLastNodeTo(0);
  EXPECT_EQ(VerifyGraph(g),
            "%0 = neg %1: operand %1 is used before its definition");
}

TEST(VerifierTest, OnlyOpNodesCarryAttributes) {
  Graph g("g");
  Value* s = g.AddParam("s", F32({2}), ParamKind::kState);
  Node* assign = g.AddAssign(s, s);
  assign->mutable_attrs().Set(AttrKey::kDim, int64_t{0});
  EXPECT_EQ(VerifyGraph(g), "assign %s, %s: only op nodes carry attributes");
}

TEST(VerifierTest, FusionResultCountFollowsTheBody) {
  Graph g("g");
  Value* a = g.AddParam("a", F32({2}), ParamKind::kInput);
  auto body = std::make_unique<Graph>("k");
  Value* p = body->AddParam("p", F32({2}), ParamKind::kInput);
  body->SetReturns({p});
  Node* fusion = g.AddFusion(std::move(body), {a});
  fusion->body()->SetReturns({p, p});
  EXPECT_EQ(VerifyGraph(g),
            "%0 = fusion @k(%a): 1 results but the body returns 2 values");
}

TEST(VerifierTest, GraphNamesMustPrintBack) {
  Graph g("train step");
  EXPECT_EQ(VerifyGraph(g), "graph name @train step is not a valid name");
}

}  // namespace
}  // namespace stepjit::ir
