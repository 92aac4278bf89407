// Tests Graph construction and the exact text the printer gives for graphs
// built through the API (numbering, attributes, doubles, strings, fusions).
#include "ir/printer.h"

#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "ir/graph.h"
#include "ir/parser.h"
#include "tests/util/ir_types.h"

namespace stepjit::ir {
namespace {

using ::stepjit::test::F32;

TEST(GraphTest, ValuesHaveDenseIdsAndParamKinds) {
  Graph g("g");
  Value* x = g.AddParam("x", F32({2}), ParamKind::kInput);
  Value* w = g.AddParam("w", F32({2}), ParamKind::kState);
  Node* add = g.AddOp(OpId::kAdd, {x, w}, {}, F32({2}));
  g.AddAssign(w, add->output());
  EXPECT_EQ(x->id(), 0);
  EXPECT_EQ(w->id(), 1);
  EXPECT_EQ(add->output()->id(), 2);
  EXPECT_EQ(g.num_values(), 3);
  EXPECT_EQ(g.param_kind(x), ParamKind::kInput);
  EXPECT_EQ(g.param_kind(w), ParamKind::kState);
  EXPECT_TRUE(g.IsParam(w));
  EXPECT_FALSE(g.IsParam(add->output()));
  EXPECT_EQ(add->output()->producer(), add);
  EXPECT_EQ(x->producer(), nullptr);
  EXPECT_EQ(add->output()->name(), "0");
}

TEST(GraphTest, FusionResultsTakeTheBodyReturnTypes) {
  Graph g("g");
  Value* x = g.AddParam("x", F32({3}), ParamKind::kInput);
  auto body = std::make_unique<Graph>("f");
  Value* p = body->AddParam("p", F32({3}), ParamKind::kInput);
  Node* sum = body->AddOp(OpId::kSum, {p}, {}, F32({}));
  body->SetReturns({p, sum->output()});
  Node* fusion = g.AddFusion(std::move(body), {x});
  ASSERT_EQ(fusion->outputs().size(), 2u);
  EXPECT_EQ(fusion->outputs()[0]->type(), F32({3}));
  EXPECT_EQ(fusion->outputs()[1]->type(), F32({}));
  EXPECT_EQ(fusion->outputs()[1]->index(), 1);
  EXPECT_EQ(fusion->outputs()[1]->name(), "0#1");
  EXPECT_EQ(fusion->body()->name(), "f");
}

TEST(GraphTest, OpResultsBeyondOneAreIndexed) {
  Graph g("g");
  Value* a = g.AddParam("a", F32({8, 4}), ParamKind::kInput);
  Value* b = g.AddParam("b", F32({8, 3}), ParamKind::kInput);
  Attrs attrs{{AttrKey::kTransposeA, true},
              {AttrKey::kEpilogue, std::string("bgrad")}};
  Node* mm = g.AddOp(OpId::kMatmul, {a, b}, attrs,
                     std::vector<TensorType>{F32({4, 3}), F32({4})});
  Node* neg = g.AddOp(OpId::kNeg, {mm->outputs()[1]}, {}, F32({4}));
  g.SetReturns({mm->output(), neg->output()});
  ASSERT_EQ(mm->outputs().size(), 2u);
  EXPECT_EQ(mm->output(), mm->outputs()[0]);
  EXPECT_EQ(mm->outputs()[1]->producer(), mm);
  EXPECT_EQ(mm->outputs()[1]->index(), 1);
  EXPECT_EQ(mm->outputs()[1]->name(), "0#1");
  EXPECT_EQ(Print(g),
            "graph @g(%a: f32[8,4] input, %b: f32[8,3] input) {\n"
            "  %0 = matmul %a, %b {transpose_a = true, epilogue = \"bgrad\"} "
            ": (f32[4,3], f32[4])\n"
            "  %1 = neg %0#1 : f32[4]\n"
            "  return %0#0, %1\n"
            "}\n");
}

TEST(GraphTest, ParamNamesMustBeValidAndUnique) {
  EXPECT_TRUE(IsValidParamName("w0"));
  EXPECT_TRUE(IsValidParamName("0.weight"));
  EXPECT_FALSE(IsValidParamName("12"));
  EXPECT_FALSE(IsValidParamName(""));
  EXPECT_FALSE(IsValidParamName("a b"));
  EXPECT_DEATH(
      {
        Graph g("g");
        g.AddParam("x", F32({}), ParamKind::kInput);
        g.AddParam("x", F32({}), ParamKind::kState);
      },
      "duplicate parameter name 'x'");
  EXPECT_DEATH(
      {
        Graph g("g");
        g.AddParam("7", F32({}), ParamKind::kInput);
      },
      "invalid parameter name '7'");
}

// The design doc's example, built through the API.
TEST(PrinterTest, PrintsGraphBuiltThroughTheApi) {
  Graph g("train_step");
  Value* x = g.AddParam("x", F32({128, 784}), ParamKind::kInput);
  g.AddParam("y", {DType::kI64, {128}}, ParamKind::kInput);
  Value* w0 = g.AddParam("w0", F32({512, 784}), ParamKind::kState);
  Value* lr = g.AddParam("lr", F32({}), ParamKind::kState);
  Node* mm =
      g.AddOp(OpId::kMatmul, {x, w0},
              {{AttrKey::kTransposeA, false}, {AttrKey::kTransposeB, true}},
              F32({128, 512}));
  Node* full = g.AddOp(OpId::kFull, {},
                       {{AttrKey::kShape, std::vector<int64_t>{2}},
                        {AttrKey::kValue, 0.0},
                        {AttrKey::kDTypeAttr, DType::kF32}},
                       F32({2}));
  auto body = std::make_unique<Graph>("fused_0");
  Value* p0 = body->AddParam("p0", F32({128, 512}), ParamKind::kInput);
  Value* p1 = body->AddParam("p1", F32({512, 784}), ParamKind::kInput);
  Node* relu = body->AddOp(OpId::kRelu, {p0}, {}, F32({128, 512}));
  body->SetReturns({relu->output(), p1});
  Node* fusion = g.AddFusion(std::move(body), {mm->output(), w0});
  Node* upd =
      g.AddOp(OpId::kMul, {fusion->outputs()[1], lr}, {}, F32({512, 784}));
  g.AddAssign(w0, upd->output());
  g.SetReturns({full->output(), fusion->outputs()[0]});
  EXPECT_EQ(Print(g),
            "graph @train_step(%x: f32[128,784] input, %y: i64[128] input, "
            "%w0: f32[512,784] state, %lr: f32[] state) {\n"
            "  %0 = matmul %x, %w0 {transpose_a = false, transpose_b = true} "
            ": f32[128,512]\n"
            "  %1 = full {shape = [2], value = 0.0, dtype = f32} : f32[2]\n"
            "  %2 = fusion @fused_0(%0, %w0) : (f32[128,512], f32[512,784]) {\n"
            "    graph @fused_0(%p0: f32[128,512] input, "
            "%p1: f32[512,784] input) {\n"
            "      %0 = relu %p0 : f32[128,512]\n"
            "      return %0, %p1\n"
            "    }\n"
            "  }\n"
            "  %3 = mul %2#1, %lr : f32[512,784]\n"
            "  assign %w0, %3\n"
            "  return %1, %2#0\n"
            "}\n");
}

TEST(PrinterTest, EmptyGraphAndEmptyReturn) {
  Graph g("empty");
  EXPECT_EQ(Print(g), "graph @empty() {\n  return\n}\n");
}

TEST(PrinterTest, NumbersFollowProgramOrderNotCreationOrder) {
  Graph g("g");
  Value* x = g.AddParam("x", F32({2}), ParamKind::kInput);
  Node* a = g.AddOp(OpId::kNeg, {x}, {}, F32({2}));
  Node* dead = g.AddOp(OpId::kExp, {x}, {}, F32({2}));
  Value* dead_value = dead->output();  // outlives its erased producer
  Node* b = g.AddOp(OpId::kAbs, {x}, {}, F32({2}));
  g.MoveLastNodeTo(0);  // abs now runs first
  g.EraseNodesIf([&](const Node* n) { return n == dead; });
  g.SetReturns({a->output(), b->output()});
  EXPECT_EQ(Print(g),
            "graph @g(%x: f32[2] input) {\n"
            "  %0 = abs %x : f32[2]\n"
            "  %1 = neg %x : f32[2]\n"
            "  return %1, %0\n"
            "}\n");
  const ValueNames names(g);
  EXPECT_EQ(names.Name(b->output()), "%0");
  EXPECT_EQ(names.DefinedAt(a->output()), 1);
  EXPECT_EQ(names.DefinedAt(x), -1);
  EXPECT_EQ(names.Find(dead_value), std::nullopt);
  EXPECT_EQ(names.Name(dead_value), "%?");
}

TEST(PrinterTest, FusionWithoutResultsStillTakesANumber) {
  Graph g("g");
  g.AddFusion(std::make_unique<Graph>("nothing"), {});
  Value* x = g.AddParam("x", F32({}), ParamKind::kInput);
  Node* neg = g.AddOp(OpId::kNeg, {x}, {}, F32({}));
  g.SetReturns({neg->output()});
  EXPECT_EQ(Print(g),
            "graph @g(%x: f32[] input) {\n"
            "  %0 = fusion @nothing() : () {\n"
            "    graph @nothing() {\n"
            "      return\n"
            "    }\n"
            "  }\n"
            "  %1 = neg %x : f32[]\n"
            "  return %1\n"
            "}\n");
}

TEST(PrinterTest, DoublesAreShortestAndNeverLookLikeIntegers) {
  const double inf = std::numeric_limits<double>::infinity();
  const std::pair<double, const char*> cases[] = {
      {0.0, "0.0"},
      {-0.0, "-0.0"},
      {1.0, "1.0"},
      {-3.0, "-3.0"},
      {0.1, "0.1"},
      {1e-8, "1e-08"},
      {1e300, "1e+300"},
      {1e21, "1e+21"},
      {123456789.0, "123456789.0"},
      {1.0 / 3.0, "0.3333333333333333"},
      {5e-324, "5e-324"},
      {std::numeric_limits<double>::max(), "1.7976931348623157e+308"},
      {inf, "inf"},
      {-inf, "-inf"},
      {std::nan(""), "nan"},
  };
  for (const auto& [value, text] : cases) {
    EXPECT_EQ(PrintAttrValue(value), text);
  }
}

TEST(PrinterTest, AttributeValueKinds) {
  EXPECT_EQ(PrintAttrValue(int64_t{-7}), "-7");
  EXPECT_EQ(PrintAttrValue(true), "true");
  EXPECT_EQ(PrintAttrValue(std::vector<int64_t>{}), "[]");
  EXPECT_EQ(PrintAttrValue(std::vector<int64_t>{1, -2}), "[1, -2]");
  EXPECT_EQ(PrintAttrValue(DType::kBF16), "bf16");
  EXPECT_EQ(PrintAttrValue(std::string("mean")), "\"mean\"");
  EXPECT_EQ(PrintAttrValue(std::string("q\"b\\n\n\t\r\x01\xff")),
            "\"q\\\"b\\\\n\\n\\t\\r\\x01\\xff\"");
}

TEST(PrinterTest, TypesAndNodeHeaders) {
  EXPECT_EQ(PrintType(F32({})), "f32[]");
  EXPECT_EQ(PrintType({DType::kBool, {0, 3}}), "bool[0,3]");
  Graph g("g");
  Value* s = g.AddParam("s", F32({2}), ParamKind::kState);
  Node* full = g.AddOp(OpId::kFull, {},
                       {{AttrKey::kShape, std::vector<int64_t>{2}}}, F32({2}));
  Node* assign = g.AddAssign(s, full->output());
  const ValueNames names(g);
  EXPECT_EQ(PrintNodeHeader(*full, names), "%0 = full");
  EXPECT_EQ(PrintNodeHeader(*assign, names), "assign %s, %0");
}

// Every double the printer emits parses back to the same bits.
TEST(PrinterTest, DoublesRoundTripBitExactly) {
  const double values[] = {0.1,
                           1e-8,
                           -0.0,
                           1e300,
                           5e-324,
                           2.5e-308,
                           1.0 / 3,
                           6.02214076e23,
                           -1.5,
                           std::numeric_limits<double>::max(),
                           std::numeric_limits<double>::denorm_min() * 3};
  for (double v : values) {
    Graph g("g");
    g.AddOp(OpId::kFull, {}, {{AttrKey::kValue, v}}, F32({}));
    auto parsed = ParseGraph(Print(g));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    const double back =
        (*parsed)->nodes()[0]->attrs().GetDouble(AttrKey::kValue);
    EXPECT_EQ(std::signbit(back), std::signbit(v)) << v;
    EXPECT_EQ(back, v) << Print(g);
  }
}

}  // namespace
}  // namespace stepjit::ir
