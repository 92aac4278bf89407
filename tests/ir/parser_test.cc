// Tests that IR text round-trips through ParseGraph and Print, that any valid
// text prints canonically, and the message of every parse error.
#include "ir/parser.h"

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/printer.h"
#include "ir/verifier.h"

namespace stepjit::ir {
namespace {

// Canonical text covering every node kind, every attribute value kind, a
// nested fusion, multi-result references and 0-d types; it also verifies.
// It is tests/ir/roundtrip.ir, which stepjit-opt's ctest reprints too.
std::string CanonicalText() {
  // STEPJIT_TESTS_DIR, not __FILE__: a compiler cache or a prefix map may
  // make __FILE__ relative to a directory the test does not run in.
  const std::string path = std::string(STEPJIT_TESTS_DIR) + "/ir/roundtrip.ir";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::stringstream text;
  text << in.rdbuf();
  return text.str().substr(text.str().find('\n') + 1);  // drop the comment
}

TEST(ParserTest, CanonicalTextRoundTripsAndVerifies) {
  const std::string canonical = CanonicalText();
  auto g = ParseGraph(canonical);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(Print(**g), canonical);
  EXPECT_TRUE(Verify(**g).ok()) << Verify(**g);
  // And once more from the printed text.
  auto again = ParseGraph(Print(**g));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(Print(**again), canonical);
}

// Node indices refer to roundtrip.ir.
TEST(ParserTest, AttributeValuesKeepTheirKinds) {
  auto g = ParseGraph(CanonicalText());
  ASSERT_TRUE(g.ok()) << g.status();
  const auto& nodes = (*g)->nodes();
  const Attrs& rand = nodes[14]->attrs();
  EXPECT_EQ(rand.GetInt(AttrKey::kSeed), INT64_MAX);
  EXPECT_EQ(rand.GetInt(AttrKey::kOffset), INT64_MIN);
  EXPECT_TRUE(std::signbit(nodes[24]->attrs().GetDouble(AttrKey::kValue)));
  EXPECT_EQ(nodes[25]->attrs().GetDouble(AttrKey::kValue), 1e-8);
  EXPECT_TRUE(std::holds_alternative<int64_t>(
      *nodes[7]->attrs().Find(AttrKey::kValue)));
  EXPECT_TRUE(std::isnan(nodes[18]->attrs().GetDouble(AttrKey::kValue)));
  EXPECT_EQ(nodes[18]->attrs().GetString(AttrKey::kRole), "q\"\\\n\t\x01");
  EXPECT_EQ(nodes[12]->attrs().GetDType(AttrKey::kDTypeAttr), DType::kBF16);
  EXPECT_EQ((*g)->param_kind((*g)->params()[5]), ParamKind::kState);
  // The fusion results carry the declared types.
  EXPECT_EQ(nodes[1]->outputs()[1]->type().shape, Shape({4, 16}));
  // So do the two results of a matmul with its bias gradient.
  ASSERT_EQ(nodes[22]->outputs().size(), 2u);
  EXPECT_EQ(nodes[22]->outputs()[1]->type(), (TensorType{DType::kF32, {8}}));
  EXPECT_EQ(nodes[22]->outputs()[1]->index(), 1);
}

TEST(ParserTest, AnyValidTextPrintsCanonically) {
  constexpr const char* text = R"(// a comment line
    graph   @g ( %a : f32 [ 2 , 3 ] input,%s:f32[2,3] state )  {
      %sum = add %a,%s:f32[2,3]   // named results are renumbered
      %f = fusion @k(%sum) : (f32[2,3]) { graph @k(%p: f32[2,3] input) {
        return %p } }
      %z = mul %f#0, %a {} : f32[2,3]
      assign %s, %z
      return %z, %f#0
    })";
  auto g = ParseGraph(text);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(Print(**g),
            "graph @g(%a: f32[2,3] input, %s: f32[2,3] state) {\n"
            "  %0 = add %a, %s : f32[2,3]\n"
            "  %1 = fusion @k(%0) : (f32[2,3]) {\n"
            "    graph @k(%p: f32[2,3] input) {\n"
            "      return %p\n"
            "    }\n"
            "  }\n"
            "  %2 = mul %1#0, %a : f32[2,3]\n"
            "  assign %s, %2\n"
            "  return %2, %1#0\n"
            "}\n");
}

TEST(ParserTest, EmptyGraph) {
  auto g = ParseGraph("graph @e() { return }");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(Print(**g), "graph @e() {\n  return\n}\n");
}

TEST(ParserTest, DeclaredTypesAreKeptForTheVerifier) {
  auto g = ParseGraph(
      "graph @g(%a: f32[2] input) { %0 = neg %a : i32[7] return %0 }");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)->returns()[0]->type(), (TensorType{DType::kI32, {7}}));
}

struct ErrorCase {
  const char* text;
  const char* message;
};

std::string ParseError(const char* text) {
  auto g = ParseGraph(text, "t.ir");
  if (g.ok()) return "parsed without error";
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(g.status().message());
}

// One line per error path; the message is the whole contract.
TEST(ParserTest, ErrorMessages) {
  constexpr const char* kOpenBody = "graph @g(%a: f32[2] input) {\n";
  const ErrorCase cases[] = {
      // Tokens.
      {"graph @g() { $ }", "t.ir:1:14: error: unexpected character `$`"},
      {"graph @() {}", "t.ir:1:7: error: expected a name after `@`"},
      {"graph @g(% ", "t.ir:1:10: error: expected a name after `%`"},
      {"graph @g() { %0 = full {value = -x} : f32[] }",
       "t.ir:1:33: error: expected a digit or `inf` after `-`"},
      {"graph @g() { %0 = full {value = 12ab} : f32[] }",
       "t.ir:1:33: error: malformed number `12ab`"},
      {"graph @g() { %0 = full {value = 1e} : f32[] }",
       "t.ir:1:33: error: malformed number `1e`"},
      {"graph @g() { %0 = full {reduction = \"ab\n\"} }",
       "t.ir:1:37: error: unterminated string"},
      {"graph @g() { %0 = full {reduction = \"a\\q\"} }",
       "t.ir:1:37: error: unknown escape `\\q` in string"},
      {"graph @g() { %0 = full {reduction = \"\\x4\"} }",
       "t.ir:1:37: error: expected two hex digits after `\\x` in string"},
      // Graph header and parameters.
      {"", "t.ir:1:1: error: expected `graph`, found end of input"},
      {"func @g() {}", "t.ir:1:1: error: expected `graph`, found `func`"},
      {"graph g() {}",
       "t.ir:1:7: error: expected a graph name like @step after `graph`, "
       "found `g`"},
      {"graph @12() {}",
       "t.ir:1:7: error: graph name @12 must not be all digits"},
      {"graph @g {}",
       "t.ir:1:10: error: expected `(` after the graph name, found `{`"},
      {"graph @g(x: f32[] input) {}",
       "t.ir:1:10: error: expected a parameter like `%x: f32[2] input`, "
       "found `x`"},
      {"graph @g(%3: f32[] input) {}",
       "t.ir:1:10: error: parameter name %3 is reserved for node results"},
      {"graph @g(%a: f32[] input,\n %a: f32[] state) {}",
       "t.ir:2:2: error: duplicate parameter name %a (first declared at 1:10)"},
      {"graph @g(%a f32[]) {}",
       "t.ir:1:13: error: expected `:` after parameter %a, found `f32`"},
      {"graph @g(%a: [2] input) {}",
       "t.ir:1:14: error: expected a type like f32[2,3], found `[`"},
      {"graph @g(%a: f31[2] input) {}",
       "t.ir:1:14: error: unknown dtype `f31` (expected f32, f64, f16, bf16, "
       "i64, i32 or bool)"},
      {"graph @g(%a: f32 input) {}",
       "t.ir:1:18: error: expected `[` after dtype f32, found `input`"},
      {"graph @g(%a: f32[2,] input) {}",
       "t.ir:1:20: error: expected a dimension size in the shape, found `]`"},
      {"graph @g(%a: f32[2 3] input) {}",
       "t.ir:1:20: error: expected `,` or `]` in the shape, found `3`"},
      {"graph @g(%a: f32[-2] input) {}",
       "t.ir:1:18: error: dimension sizes must be non-negative, found -2"},
      {"graph @g(%a: f32[2] inout) {}",
       "t.ir:1:21: error: expected `input`, `state` or `random` after the type "
       "of %a, "
       "found `inout`"},
      {"graph @g(%a: f32[2] input %b) {}",
       "t.ir:1:27: error: expected `,` or `)` after a parameter, found %b"},
      {"graph @g() return }",
       "t.ir:1:12: error: expected `{` to open the graph body, found `return`"},
      // Statements.
      {"graph @g() { }",
       "t.ir:1:14: error: expected `return` before the `}` closing graph @g"},
      {"graph @g() { add }",
       "t.ir:1:14: error: expected a statement (`%name = ...`, `assign` or "
       "`return`), found `add`"},
      {"graph @g() {",
       "t.ir:1:13: error: expected a statement (`%name = "
       "...`, `assign` or `return`), found end of input"},
      {"graph @g(%a: f32[2] input) { %a = neg %a : f32[2] }",
       "t.ir:1:30: error: value %a redefined (first defined at 1:10)"},
      {"graph @g() { %0 : f32[] }",
       "t.ir:1:17: error: expected `=` after %0, found `:`"},
      {"graph @g() { %0 = %1 }",
       "t.ir:1:19: error: expected an op name after `%0 =`, found %1"},
      {"graph @g() { %0 = frob : f32[] }",
       "t.ir:1:19: error: unknown op `frob`"},
      {"graph @g(%a: f32[2] input) { %0 = neg %a f32[2] }",
       "t.ir:1:42: error: expected `:` and the result type of %0, found `f32`"},
      {"graph @g(%a: f32[2] input) { assign %a %a }",
       "t.ir:1:40: error: expected `,` between the assign target and value, "
       "found %a"},
      {"graph @g(%a: f32[2] input) { return %a",
       "t.ir:1:39: error: expected `}` to close graph @g, found end of input"},
      {"graph @g() { return } graph",
       "t.ir:1:23: error: expected end of input after the graph, found "
       "`graph`"},
      // Attributes.
      {"graph @g() { %0 = full {7 = 1} : f32[] }",
       "t.ir:1:25: error: expected an attribute name, found `7`"},
      {"graph @g() { %0 = full {colour = 1} : f32[] }",
       "t.ir:1:25: error: unknown attribute `colour`"},
      {"graph @g() { %0 = full {dim = 1, dim = 2} : f32[] }",
       "t.ir:1:34: error: attribute `dim` given twice"},
      {"graph @g() { %0 = full {dim 1} : f32[] }",
       "t.ir:1:29: error: expected `=` after attribute `dim`, found `1`"},
      {"graph @g() { %0 = full {dim = maybe} : f32[] }",
       "t.ir:1:31: error: expected a value for attribute `dim` (integer, "
       "float, true/false, dtype, string or [integers]), found `maybe`"},
      {"graph @g() { %0 = full {dim = } : f32[] }",
       "t.ir:1:31: error: expected a value for attribute `dim` (integer, "
       "float, true/false, dtype, string or [integers]), found `}`"},
      {"graph @g() { %0 = full {dims = [1, 2.5]} : f32[] }",
       "t.ir:1:36: error: expected an integer in the list for `dims`, found "
       "`2.5`"},
      {"graph @g() { %0 = full {dims = [1 2]} : f32[] }",
       "t.ir:1:35: error: expected `,` or `]` in the list for `dims`, found "
       "`2`"},
      {"graph @g() { %0 = full {dim = 1 shape = []} : f32[] }",
       "t.ir:1:33: error: expected `,` or `}` after an attribute, found "
       "`shape`"},
      {"graph @g() { %0 = full {dim = 9223372036854775808} : f32[] }",
       "t.ir:1:31: error: integer 9223372036854775808 does not fit in 64 "
       "bits"},
      {"graph @g() { %0 = full {value = 1e400} : f32[] }",
       "t.ir:1:33: error: float 1e400 is out of the range of f64"},
      // Value references.
      {"graph @g() { %0 = neg 3 : f32[] }",
       "t.ir:1:23: error: expected `:` and the result type of %0, found `3`"},
      {"graph @g() { assign 3, 4 }",
       "t.ir:1:21: error: expected a value like %x, found `3`"},
      {"graph @g() { %0 = neg %nope : f32[] }",
       "t.ir:1:23: error: undefined value %nope"},
      {"graph @g(%a: f32[2] input) { %0 = neg %a : f32[2]\n"
       "  %1 = neg %0#0 : f32[2] }",
       "t.ir:2:14: error: %0 has one result; `#` indexes the results of "
       "fusions and multi-result ops"},
      // Ops with several results.
      {"graph @g(%a: f32[2,3] input) {\n"
       "  %0 = matmul %a, %a {transpose_a = true, epilogue = \"bgrad\"} "
       ": (f32[3,3], f32[3])\n"
       "  return %0 }",
       "t.ir:3:10: error: matmul result %0 needs an index, like %0#0"},
      {"graph @g(%a: f32[2] input) { %0 = neg %a : (f32[2]) }",
       "t.ir:1:44: error: %0 declares 1 result types in parentheses; one "
       "result type is written without them"},
      {"graph @g(%a: f32[2] input) { %0 = neg %a : (f32[2] f32[2]) }",
       "t.ir:1:52: error: expected `,` or `)` after a result type, found "
       "`f32`"},
      // Fusions.
      {"graph @g(%a: f32[2] input) { %0 = fusion k(%a) }",
       "t.ir:1:42: error: expected a body name like @fused_0 after `fusion`, "
       "found `k`"},
      {"graph @g(%a: f32[2] input) { %0 = fusion @k %a }",
       "t.ir:1:45: error: expected `(` before the fusion inputs, found %a"},
      {"graph @g(%a: f32[2] input) { %0 = fusion @k(%a : }",
       "t.ir:1:48: error: expected `)` after the fusion inputs, found `:`"},
      {"graph @g(%a: f32[2] input) { %0 = fusion @k(%a) (f32[2]) }",
       "t.ir:1:49: error: expected `:` and the fusion result types, found `(`"},
      {"graph @g(%a: f32[2] input) { %0 = fusion @k(%a) : f32[2] }",
       "t.ir:1:51: error: expected `(` before the fusion result types, found "
       "`f32`"},
      {"graph @g(%a: f32[2] input) { %0 = fusion @k(%a) : (f32[2] f32[2]) }",
       "t.ir:1:59: error: expected `,` or `)` after a result type, found "
       "`f32`"},
      {"graph @g(%a: f32[2] input) { %0 = fusion @k(%a) : (f32[2]) graph }",
       "t.ir:1:60: error: expected `{` before the fusion body, found `graph`"},
      {"graph @g(%a: f32[2] input) { %0 = fusion @k(%a) : (f32[2]) {\n"
       "  graph @j(%p: f32[2] input) { return %p } } return %0#0 }",
       "t.ir:2:3: error: fusion @k has a body named @j"},
      {"graph @g(%a: f32[2] input) { %0 = fusion @k(%a) : (f32[2]) {\n"
       "  graph @k(%p: f32[2] input) { return %p } return %0#0 }",
       "t.ir:2:44: error: expected `}` after the body of fusion @k, found "
       "`return`"},
      {"graph @g(%a: f32[2] input) { %0 = fusion @k(%a) : (f32[2]) {\n"
       "  graph @k(%p: f32[2] input) { return %p, %p } } }",
       "t.ir:1:51: error: fusion @k declares 1 result types but its body "
       "returns 2 values"},
      {"graph @g(%a: f32[2] input) { %0 = fusion @k(%a) : (f32[2]) {\n"
       "  graph @k(%p: f32[2] input) { %1 = neg %a : f32[2] return %1 } } }",
       "t.ir:2:41: error: undefined value %a (a fusion body sees only its own "
       "parameters)"},
      {"graph @g(%a: f32[2] input) { %0 = fusion @k(%a) : (f32[2]) {\n"
       "  graph @k(%p: f32[2] input) { return %p } } return %0 }",
       "t.ir:2:53: error: fusion result %0 needs an index, like %0#0"},
      {"graph @g(%a: f32[2] input) { %0 = fusion @k(%a) : (f32[2]) {\n"
       "  graph @k(%p: f32[2] input) { return %p } } return %0#x }",
       "t.ir:2:56: error: expected a result index after %0#, found `x`"},
      {"graph @g(%a: f32[2] input) { %0 = fusion @k(%a) : (f32[2]) {\n"
       "  graph @k(%p: f32[2] input) { return %p } } return %0#1 }",
       "t.ir:2:56: error: index #1 out of range: %0 has 1 results"},
  };
  for (const ErrorCase& c : cases) {
    EXPECT_EQ(ParseError(c.text), c.message) << "input: " << c.text;
  }
  EXPECT_EQ(ParseError(kOpenBody),
            "t.ir:2:1: error: expected a statement (`%name = "
            "...`, `assign` or `return`), found end of input");
}

TEST(ParserTest, FilenameDefaultsToInput) {
  auto g = ParseGraph("graph");
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(std::string(g.status().message()),
              ::testing::StartsWith("<input>:1:6: error: "));
}

}  // namespace
}  // namespace stepjit::ir
