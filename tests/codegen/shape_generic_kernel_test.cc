// Shape-generic region kernels (RegionCompileOptions::shape_generic): the
// kernel reads its loop sizes from a run-time table. Each body is compiled
// generic and specialized at sizes 1, 2, 7, 127 and 1000 (rows and row
// lengths), and both are checked against the body run op by op through the
// eager kernels (tests/util/row_cases.h tolerances: f32 4 ulps, bf16 1 ulp).
// Bodies that differ only in sizes of 2 or more (and not equal to each
// other) must share one compiled kernel (the same cache key), each with its
// own table.
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/cpu/region_kernel.h"
#include "gtest/gtest.h"
#include "program/cpu/cpu_backend.h"
#include "tests/util/row_cases.h"

namespace stepjit::codegen::cpu {
namespace {

using ir::DType;
using test::rows::Case;
using test::rows::RunCpuKernel;

// (rows, row length): every size of 1, 2, 7, 127, 1000 on both sides.
const std::vector<std::pair<int64_t, int64_t>>& Sizes() {
  static const auto* s = new std::vector<std::pair<int64_t, int64_t>>{
      {1, 7},    {2, 1},    {2, 2},     {7, 127}, {127, 7},
      {1000, 2}, {2, 1000}, {127, 127}, {7, 1},   {1, 1000}};
  return *s;
}

// Operands for the elementwise and reduction bodies below: an [N, C]
// tensor, then a [C] row vector, a 0-d number and an [N, 1] column, or
// some of them.
std::vector<Tensor> MatrixRowScalarColumn(int64_t n, int64_t c, DType t,
                                          uint64_t s) {
  Generator gen(s + 11);
  return {test::rows::Logits(n, c, t, s, false), randn({c}, {}, &gen).to(t),
          scalar_tensor(0.75).to(t), randn({n, 1}, {}, &gen).to(t)};
}
std::vector<Tensor> MatrixRowScalar(int64_t n, int64_t c, DType t, uint64_t s) {
  std::vector<Tensor> a = MatrixRowScalarColumn(n, c, t, s);
  a.pop_back();
  return a;
}
std::vector<Tensor> MatrixColumn(int64_t n, int64_t c, DType t, uint64_t s) {
  std::vector<Tensor> a = MatrixRowScalarColumn(n, c, t, s);
  return {a[0], a[3]};
}
std::vector<Tensor> Matrix(int64_t n, int64_t c, DType t, uint64_t s) {
  return {MatrixRowScalarColumn(n, c, t, s)[0]};
}

// Bodies of the classic plan (elementwise chains with broadcasts, and
// reductions over leading, trailing or all dims with epilogues).
std::vector<Case> ClassicCases() {
  const std::string params =
      "graph @r(%p0: {T}[{N},{C}] input, %p1: {T}[{C}] input, %p2: {T}[] "
      "input, %p3: {T}[{N},1] input) {\n";
  const std::string row_scalar =
      "graph @r(%p0: {T}[{N},{C}] input, %p1: {T}[{C}] input, %p2: {T}[] "
      "input) {\n";
  const std::string column =
      "graph @r(%p0: {T}[{N},{C}] input, %p3: {T}[{N},1] input) {\n";
  const std::string matrix = "graph @r(%p0: {T}[{N},{C}] input) {\n";
  return {
      {"bias relu scale column", params + R"(  %0 = add %p0, %p1 : {T}[{N},{C}]
  %1 = relu %0 : {T}[{N},{C}]
  %2 = mul %1, %p2 : {T}[{N},{C}]
  %3 = sub %2, %p3 : {T}[{N},{C}]
  return %3
})",
       MatrixRowScalarColumn, 1},
      {"column sums with a momentum epilogue",
       row_scalar + R"(  %0 = sum %p0 {dims = [0], keepdim = false} : {T}[{C}]
  %1 = mul %p1, %p2 : {T}[{C}]
  %2 = add %1, %0 : {T}[{C}]
  return %2
})",
       MatrixRowScalar, 1000},
      {"row sums and the full values",
       column + R"(  %0 = mul %p0, %p3 : {T}[{N},{C}]
  %1 = sum %0 {dims = [1], keepdim = false} : {T}[{N}]
  return %0, %1
})",
       MatrixColumn, 1000},
      {"mean of squares", matrix + R"(  %0 = mul %p0, %p0 : {T}[{N},{C}]
  %1 = mean %0 {dims = [], keepdim = false} : {T}[]
  return %1
})",
       Matrix, 10},
      {"column amax", column + R"(  %0 = add %p0, %p3 : {T}[{N},{C}]
  %1 = amax %0 {dims = [0], keepdim = false} : {T}[{C}]
  return %1
})",
       MatrixColumn, 1},
  };
}

std::vector<Case> RowCases() {
  std::vector<Case> all = {test::rows::Softmax(),
                           test::rows::LogSoftmax(),
                           test::rows::Var(),
                           test::rows::SoftmaxBackward(),
                           test::rows::LogSoftmaxBackward(),
                           test::rows::LayerNormBackward(),
                           test::rows::CrossEntropyBackward()};
  for (auto more : {test::rows::LayerNorm(), test::rows::CrossEntropy(),
                    test::rows::MseLoss()}) {
    all.insert(all.end(), more.begin(), more.end());
  }
  return all;
}

// Compiles `c` generic and specialized at every size and dtype, runs both
// and compares with the eager kernels, and checks that the sizes of 2 or
// more used one compiled generic kernel.
void CheckCase(const Case& c) {
  for (DType t : {DType::kF32, DType::kBF16}) {
    std::set<std::string> generic_keys;
    int generic_uses = 0;
    for (auto [n, cols] : Sizes()) {
      const std::string what =
          absl::StrCat(c.name, " ", ir::DTypeName(t), " [", n, ",", cols, "]");
      auto g = test::rows::Parse(c.text, t, n, cols);
      ASSERT_NE(g, nullptr) << what;
      absl::StatusOr<RegionKernel> fixed = CompileRegion(*g, {});
      absl::StatusOr<RegionKernel> generic =
          CompileRegion(*g, {.shape_generic = true});
      if (!fixed.ok()) {
        // A body the backend leaves to the interpreter (a region of one
        // element) is refused the same way generic.
        ASSERT_EQ(generic.status().code(), fixed.status().code()) << what;
        continue;
      }
      ASSERT_TRUE(generic.ok()) << what << ": " << generic.status();
      EXPECT_TRUE(fixed->dims.empty()) << what;
      const std::vector<Tensor> args = c.args(n, cols, t, n * 131 + cols);
      const std::vector<Tensor> want = test::rows::Interpret(*g, args);
      const std::vector<Tensor> got_fixed = RunCpuKernel(*fixed, *g, args);
      const std::vector<Tensor> got_generic = RunCpuKernel(*generic, *g, args);
      ASSERT_EQ(got_generic.size(), want.size());
      const double ulps = t == DType::kBF16 ? 1 : 4;
      const double scale = test::rows::ScaleFor(c, args);
      for (size_t r = 0; r < want.size(); ++r) {
        test::rows::ExpectClose(got_fixed[r], want[r], ulps, scale,
                                absl::StrCat(what, " specialized, result ", r));
        test::rows::ExpectClose(got_generic[r], want[r], ulps, scale,
                                absl::StrCat(what, " generic, result ", r));
      }
      // (Equal sizes can make a different kernel: an [N] and a [C] value
      // are then both one per row and column.)
      if (n >= 2 && cols >= 2 && n != cols) {
        EXPECT_FALSE(generic->dims.empty())
            << what << ": a generic kernel with no run-time sizes";
        generic_keys.insert(generic->cache_key);
        ++generic_uses;
      }
    }
    // Sizes of 2 or more are one kernel: its code does not depend on them.
    EXPECT_EQ(generic_keys.size(), 1u)
        << c.name << " " << ir::DTypeName(t) << ": " << generic_uses
        << " bodies of sizes >= 2 compiled to " << generic_keys.size()
        << " different generic kernels";
  }
}

TEST(ShapeGenericKernelTest, ClassicBodiesMatchEagerAtEverySizeWithOneKernel) {
  for (const Case& c : ClassicCases()) CheckCase(c);
}

TEST(ShapeGenericKernelTest, RowBodiesMatchEagerAtEverySizeWithOneKernel) {
  for (const Case& c : RowCases()) CheckCase(c);
}

// The table is what makes one kernel serve many sizes: the same compiled
// code run with another body's table computes that body's result.
TEST(ShapeGenericKernelTest, OneCompiledKernelServesTwoSizes) {
  const Case c = test::rows::Softmax();
  auto small = test::rows::Parse(c.text, DType::kF32, 3, 17);
  auto large = test::rows::Parse(c.text, DType::kF32, 64, 513);
  ASSERT_NE(small, nullptr);
  ASSERT_NE(large, nullptr);
  absl::StatusOr<RegionKernel> a =
      CompileRegion(*small, {.shape_generic = true});
  absl::StatusOr<RegionKernel> b =
      CompileRegion(*large, {.shape_generic = true});
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->main, b->main) << "the second size compiled its own code";
  EXPECT_TRUE(b->cache_hit);
  EXPECT_NE(a->dims, b->dims);
  // a's code, b's sizes: b's result.
  RegionKernel swapped = *a;
  swapped.dims = b->dims;
  swapped.numel = b->numel;
  swapped.row = b->row;
  swapped.split_align = b->split_align;
  const std::vector<Tensor> args = c.args(64, 513, DType::kF32, 5);
  test::rows::ExpectClose(RunCpuKernel(swapped, *large, args)[0],
                          test::rows::Interpret(*large, args)[0], 4, 0,
                          "softmax [64,513] through the [3,17] kernel");
}

}  // namespace
}  // namespace stepjit::codegen::cpu
