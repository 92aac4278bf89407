// Shapes a hostile or careless user can write: sizes whose element count
// overflows int64, negative sizes produced by attributes, attribute values out
// of range. Every one is refused with a message naming the shape; none
// reaches arithmetic that wraps (checked against the overflowing cases that
// used to trap or be accepted).
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ir/attrs.h"
#include "ir/infer.h"
#include "ir/parser.h"
#include "ir/shape.h"
#include "ir/verifier.h"

namespace stepjit::ir {
namespace {

constexpr int64_t k2p62 = int64_t{1} << 62;

TEST(CheckedShapeTest, CountsAndRefusesWithTheShapeNamed) {
  EXPECT_EQ(*CheckedNumElements({}), 1);
  EXPECT_EQ(*CheckedNumElements({3, 0, 5}), 0);
  // Empty, but its other dims would overflow strides and views.
  const auto empty_huge = CheckedNumElements({3, 0, k2p62});
  ASSERT_FALSE(empty_huge.ok());
  EXPECT_EQ(empty_huge.status().message(),
            absl::StrCat("shape [3, 0, ", k2p62,
                         "] has a 0 dim, but its other dims multiply to more "
                         "than 2^56 (the most elements a tensor may have; "
                         "strides of an empty tensor are sized by them too)"));
  EXPECT_EQ(*CheckedNumElements({0, int64_t{1} << 28, int64_t{1} << 28}), 0);
  EXPECT_EQ(*CheckedNumElements({int64_t{1} << 28, int64_t{1} << 28}),
            kMaxNumElements);
  const auto over = CheckedNumElements({k2p62, 4});
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().message(),
            absl::StrCat("shape [", k2p62,
                         ", 4] has more than 2^56 elements (the most a tensor "
                         "may have)"));
  // Wraps to exactly 0 in int64 arithmetic: must still be refused.
  EXPECT_FALSE(CheckedNumElements({k2p62, 4, 4}).ok());
  EXPECT_FALSE(CheckedNumElements({kMaxNumElements + 1}).ok());
  const auto negative = CheckedNumElements({2, -1, 4});
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.status().message(),
            "shape [2, -1, 4] has a negative size -1");
  int64_t r = 7;
  EXPECT_FALSE(CheckedMul(std::numeric_limits<int64_t>::min(), -1, &r));
  EXPECT_FALSE(CheckedAdd(std::numeric_limits<int64_t>::max(), 1, &r));
  EXPECT_EQ(r, 7);
  EXPECT_TRUE(CheckedMul(-3, 4, &r));
  EXPECT_EQ(r, -12);
}

TEST(CheckedShapeTest, TheParserRefusesAnEmptyTypeWithHugeDims) {
  const auto g = ParseGraph(
      absl::StrCat("graph @g(%x: f32[4, ", k2p62, ", 0] input) {\n",
                   "  %y = neg %x : f32[4, ", k2p62, ", 0]\n  return %y\n}\n"),
      "empty.ir");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find(absl::StrCat(
                "empty.ir:1:14: error: shape [4, ", k2p62, ", 0] has a 0 dim")),
            std::string::npos)
      << g.status().message();
}

TEST(CheckedShapeTest, TheParserRefusesATypeTooLargeForMemory) {
  const auto g = ParseGraph(absl::StrCat("graph @g(%x: f32[", k2p62,
                                         ", 2] input) {\n", "  return %x\n}\n"),
                            "big.ir");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(
      g.status().message(),
      absl::StrCat(
          "big.ir:1:14: error: shape [", k2p62,
          ", 2] has more than 2^56 elements (the most a tensor may have)"));
}

// The verifier infers every node: the cases below were a SIGFPE (INT64_MIN %
// -1), an accepted reshape of 2^64 elements to [0], a negative slice size,
// and negative sizes from expand, one_hot and embedding_backward.
struct Hostile {
  const char* name;
  OpId op;
  TensorType input;
  Attrs attrs;
  const char* expect;  // in the message
};

TEST(CheckedShapeTest, InferenceRefusesOverflowingAndNegativeResults) {
  const int64_t big = int64_t{1} << 40;
  const Hostile cases[] = {
      {"reshape to 2^62 x 2",
       OpId::kReshape,
       {DType::kF32, {big, 4}},
       {{AttrKey::kShape, std::vector<int64_t>{k2p62, 2}}},
       "has more than 2^56 elements"},
      {"reshape with -1 beside an overflow",
       OpId::kReshape,
       {DType::kF32, {big, 4}},
       {{AttrKey::kShape, std::vector<int64_t>{-1, k2p62, 4}}},
       "has more than 2^56 elements"},
      {"reshape of 2^42 elements to [0]",
       OpId::kReshape,
       {DType::kF32, {big, 4}},
       {{AttrKey::kShape, std::vector<int64_t>{0}}},
       "cannot reshape"},
      {"expand to a negative size",
       OpId::kExpand,
       {DType::kF32, {4}},
       {{AttrKey::kShape, std::vector<int64_t>{-1, 4}}},
       "negative size -1"},
      {"expand past 2^56",
       OpId::kExpand,
       {DType::kF32, {1, 1}},
       {{AttrKey::kShape, std::vector<int64_t>{k2p62, k2p62}}},
       "has more than 2^56 elements"},
      {"one_hot with negative classes",
       OpId::kOneHot,
       {DType::kI64, {3}},
       {{AttrKey::kNumClasses, int64_t{-3}},
        {AttrKey::kDTypeAttr, DType::kF32}},
       "negative size -3"},
      {"full of 2^62 + 1",
       OpId::kFull,
       {DType::kF32, {}},
       {{AttrKey::kShape, std::vector<int64_t>{k2p62 + 1}},
        {AttrKey::kValue, 0.0}},
       "has more than 2^56 elements"},
  };
  for (const Hostile& c : cases) {
    std::vector<TensorType> in;
    if (c.op != OpId::kFull) in.push_back(c.input);
    const auto t = InferType(c.op, in, c.attrs);
    ASSERT_FALSE(t.ok()) << c.name << ": accepted as "
                         << ShapeToString(t->shape);
    EXPECT_NE(t.status().message().find(c.expect), std::string::npos)
        << c.name << ": " << t.status().message();
  }
  // embedding_backward's num_weights names the result's rows.
  const auto eb = InferType(OpId::kEmbeddingBackward,
                            {{DType::kF32, {5, 8}}, {DType::kI64, {5}}},
                            {{AttrKey::kNumWeights, int64_t{-1}}});
  ASSERT_FALSE(eb.ok());
  EXPECT_NE(eb.status().message().find("negative size -1"), std::string::npos)
      << eb.status().message();
}

TEST(CheckedShapeTest, ASliceWithAHugeStepHasOneElementNotANegativeCount) {
  for (int64_t step :
       {int64_t{3}, int64_t{1} << 62, std::numeric_limits<int64_t>::max()}) {
    const auto t =
        InferType(OpId::kSlice, {{DType::kF32, {10, 4}}},
                  {{AttrKey::kDim, int64_t{0}},
                   {AttrKey::kStart, int64_t{1}},
                   {AttrKey::kEnd, std::numeric_limits<int64_t>::max()},
                   {AttrKey::kStep, step}});
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->shape, (Shape{step == 3 ? 3 : 1, 4})) << "step " << step;
  }
}

TEST(CheckedShapeTest, DoubleAttributesOutOfInt64RangeSaturate) {
  Attrs a{{AttrKey::kDim, 1e300},
          {AttrKey::kStart, -1e300},
          {AttrKey::kEnd, std::nan("")},
          {AttrKey::kStep, 12.9}};
  EXPECT_EQ(a.GetInt(AttrKey::kDim), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(a.GetInt(AttrKey::kStart), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(a.GetInt(AttrKey::kEnd, 42), 42);
  EXPECT_EQ(a.GetInt(AttrKey::kStep), 12);
}

}  // namespace
}  // namespace stepjit::ir

namespace stepjit::ir {
namespace {

// `depth` fusions, each the only statement of the one around it.
std::string NestedFusions(int depth) {
  std::string text = "graph @g(%x: f32[2] input) {\n";
  for (int i = 0; i < depth; ++i) {
    absl::StrAppend(&text, "%", i, " = fusion @f", i, "(%", i == 0 ? "x" : "p",
                    ") : (f32[2]) {\n", "graph @f", i,
                    "(%p: f32[2] input) {\n");
  }
  absl::StrAppend(&text, "%r = neg %p : f32[2]\nreturn %r\n");
  for (int i = 0; i < depth; ++i)
    absl::StrAppend(&text, "}\n}\nreturn %", depth - 1 - i, "\n}\n");
  return text;
}

TEST(ParserLimitsTest, FusionBodiesNestAtMost64Deep) {
  for (int depth : {65, 10000}) {
    const auto g = ParseGraph(NestedFusions(depth), "deep.ir");
    ASSERT_FALSE(g.ok()) << depth;
    EXPECT_NE(
        g.status().message().find("fusion @f64 nests deeper than 64 fusion "
                                  "bodies (the most the parser accepts)"),
        std::string::npos)
        << g.status().message().substr(0, 300);
  }
}

TEST(ParserLimitsTest, APieceOfAFileKeepsTheFilesLineNumbers) {
  const auto g =
      ParseGraph("\ngraph @g(%x: f32[2] input) {\n  %0 = frob %x : f32[2]\n}\n",
                 "piece.ir", 41);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().message(), "piece.ir:43:8: error: unknown op `frob`");
}

}  // namespace
}  // namespace stepjit::ir

#include "passes/fuse.h"

namespace stepjit::ir {
namespace {

// A 20,000-op elementwise chain (26 s and 810 MB in fuse when each merge
// re-checked the whole group) fuses into one region of every op. (The
// cycle rule's cases are FileCheck tests in fuse.ir.)
TEST(FuseScaleTest, ALongChainBecomesOneRegion) {
  constexpr int kOps = 20000;
  std::string text = "graph @chain(%x: f32[64] input) {\n";
  std::string prev = "%x";
  for (int i = 0; i < kOps; ++i) {
    absl::StrAppend(&text, "  %", i, " = ",
                    i % 3 == 0   ? "neg"
                    : i % 3 == 1 ? "relu"
                                 : "exp",
                    " ", prev, " : f32[64]\n");
    prev = absl::StrCat("%", i);
  }
  absl::StrAppend(&text, "  return ", prev, "\n}\n");
  auto g = ParseGraph(text, "chain.ir");
  ASSERT_TRUE(g.ok()) << g.status();
  passes::FuseStats stats;
  ASSERT_TRUE(*passes::FuseGraph(**g, &stats));
  EXPECT_EQ(stats.regions, 1);
  EXPECT_EQ(stats.nodes_fused, kOps);
  ASSERT_EQ((*g)->nodes().size(), 1u);
  EXPECT_EQ((*g)->nodes()[0]->body()->nodes().size(),
            static_cast<size_t>(kOps));
  EXPECT_TRUE(Verify(**g).ok());
}

}  // namespace
}  // namespace stepjit::ir

namespace stepjit::ir {
namespace {

// Found by fuzz/ir_fuzzer.cc: a slice_backward whose grad was not the
// slice's result (rank 1 for a [4, 6] input) verified, and canonicalize then
// indexed past the grad's dims. Inference now checks the grad against the
// slice the attributes describe.
TEST(FuzzRegressionTest, ASliceBackwardGradMustBeTheSlicesResult) {
  const auto g = ParseGraph(
      "graph @qkv_grads(%q: f32[472] input, %k: f32[4,2] input) {\n"
      "  %sq = slice_backward %q {input_shape = [4, 6], dim = 1, start = 0, "
      "end = 2, step = 1} : "
      "f32[4,6]\n"
      "  %sk = slice_backward %k {input_shape = [4, 6], dim = 1, start = 2, "
      "end = 4, step = 1} : "
      "f32[4,6]\n"
      "  %b = add %sq, %sk : f32[4,6]\n"
      "  return %b\n"
      "}\n",
      "regression.ir");
  ASSERT_TRUE(g.ok()) << g.status();
  const absl::Status st = Verify(**g);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find(
                "grad of shape [472] is not the slice's result [4, 2] of "
                "input_shape [4, 6]"),
            std::string::npos)
      << st.message();
  // The well-formed one verifies.
  const auto ok = InferType(OpId::kSliceBackward, {{DType::kF32, {4, 2}}},
                            {{AttrKey::kInputShape, std::vector<int64_t>{4, 6}},
                             {AttrKey::kDim, int64_t{1}},
                             {AttrKey::kStart, int64_t{2}},
                             {AttrKey::kEnd, int64_t{4}},
                             {AttrKey::kStep, int64_t{1}}});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->shape, (Shape{4, 6}));
}

}  // namespace
}  // namespace stepjit::ir
