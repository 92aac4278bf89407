// Row-plan region kernels (codegen/region_plan.h): the row-op cases of
// tests/util/row_cases.h (softmax, log_softmax, layer_norm, var,
// cross_entropy, mse_loss and the backward patterns their gradient rules
// write), generated and run on the CPU, against the same bodies run op by
// op through the eager kernels. Tolerance as row_cases.h says: f32 4 ulps,
// bf16 1 ulp.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/cpu/region_kernel.h"
#include "codegen/region_plan.h"
#include "gtest/gtest.h"
#include "program/cpu/cpu_backend.h"
#include "tests/util/row_cases.h"

namespace stepjit::codegen::cpu {
namespace {

using ir::DType;
using test::rows::Case;

using test::rows::RunCpuKernel;

const std::vector<std::pair<int64_t, int64_t>>& Shapes() {
  static const auto* s = new std::vector<std::pair<int64_t, int64_t>>{
      {5, 1}, {5, 7}, {3, 33}, {4, 1000}, {3, 4097}, {1, 33}, {17, 10}};
  return *s;
}

// Compiles and runs `c` for every shape in f32 and bf16 and compares.
void CheckCase(const Case& c) {
  for (DType t : {DType::kF32, DType::kBF16}) {
    for (auto [n, cols] : Shapes()) {
      const std::string what =
          absl::StrCat(c.name, " ", ir::DTypeName(t), " [", n, ",", cols, "]");
      auto g = test::rows::Parse(c.text, t, n, cols);
      ASSERT_NE(g, nullptr);
      absl::StatusOr<RegionKernel> k = CompileRegion(*g, {.use_cache = false});
      ASSERT_TRUE(k.ok()) << what << ": " << k.status();
      const std::vector<Tensor> args = c.args(n, cols, t, n * 131 + cols);
      const std::vector<Tensor> got = RunCpuKernel(*k, *g, args);
      const std::vector<Tensor> want = test::rows::Interpret(*g, args);
      ASSERT_EQ(got.size(), want.size());
      for (size_t r = 0; r < got.size(); ++r)
        test::rows::ExpectClose(got[r], want[r], t == DType::kBF16 ? 1 : 4,
                                test::rows::ScaleFor(c, args),
                                absl::StrCat(what, " result ", r));
    }
  }
}
void CheckCases(const std::vector<Case>& cases) {
  for (const Case& c : cases) CheckCase(c);
}

TEST(RowKernelTest, SoftmaxMatchesEager) { CheckCase(test::rows::Softmax()); }
TEST(RowKernelTest, LogSoftmaxMatchesEager) {
  CheckCase(test::rows::LogSoftmax());
}
TEST(RowKernelTest, LayerNormMatchesEager) {
  CheckCases(test::rows::LayerNorm());
}
TEST(RowKernelTest, VarMatchesEager) { CheckCase(test::rows::Var()); }
TEST(RowKernelTest, CrossEntropyMatchesEager) {
  CheckCases(test::rows::CrossEntropy());
}
TEST(RowKernelTest, MseLossMatchesEager) { CheckCases(test::rows::MseLoss()); }
TEST(RowKernelTest, SoftmaxBackwardMatchesEager) {
  CheckCase(test::rows::SoftmaxBackward());
}
TEST(RowKernelTest, LogSoftmaxBackwardMatchesEager) {
  CheckCase(test::rows::LogSoftmaxBackward());
}
TEST(RowKernelTest, LayerNormBackwardMatchesEager) {
  CheckCase(test::rows::LayerNormBackward());
}
TEST(RowKernelTest, CrossEntropyBackwardMatchesEager) {
  CheckCase(test::rows::CrossEntropyBackward());
}

// A row's maximum accumulates integer keys (vectorizable) rather than
// doubles: NaN anywhere in a row wins, -inf-only rows stay -inf, and the
// key order is the float order across signs, subnormals and infinities.
// Checked against a float64 loop, as the row result alone (the register
// path) and with a full-domain use of it (the row-phase path), in rows long
// enough to vectorize.
TEST(RowKernelTest, AmaxRowsPropagateNaNAndOrderLikeFloats) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float tiny = std::numeric_limits<float>::denorm_min();
  const int64_t cols = 37;
  std::vector<std::vector<float>> rows = {
      std::vector<float>(cols, -inf),  std::vector<float>(cols, -3.5f),
      std::vector<float>(cols, -tiny), std::vector<float>(cols, 0.0f),
      std::vector<float>(cols, 1.0f),
  };
  rows[1][20] = -1.25f;  // the largest of negatives
  rows[2][3] = -0.0f;    // -0 beats every negative subnormal
  rows[3][30] = tiny;    // the smallest positive beats zeros
  rows[4][36] = nan;     // NaN in the last lane
  std::vector<float> r5(cols, -2.0f);
  r5[0] = inf;
  r5[1] = -nan;  // a NaN with its sign bit set still wins
  rows.push_back(r5);
  std::vector<float> r6(cols);
  for (int64_t j = 0; j < cols; ++j) r6[j] = static_cast<float>(j % 11) - 5.0f;
  r6[17] = 1e30f;
  rows.push_back(r6);
  rows.push_back(std::vector<float>(cols, inf));
  std::vector<float> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  const int64_t n = static_cast<int64_t>(rows.size());
  const Tensor x = from_vector(flat, {n, cols});
  std::vector<double> want;
  for (const auto& r : rows) {
    double m = -std::numeric_limits<double>::infinity();
    bool any_nan = false;
    for (float v : r) {
      any_nan |= std::isnan(v);
      m = std::max(m, static_cast<double>(v));
    }
    want.push_back(any_nan ? std::nan("") : m);
  }
  const std::string dims = absl::StrCat("[", n, ",", cols, "]");
  for (const bool with_use : {false, true}) {
    const std::string text = absl::StrCat(
        "graph @r(%p0: f32", dims, " input) {\n",
        "  %0 = amax %p0 {dims = [1], keepdim = true} : f32[", n, ",1]\n",
        with_use ? absl::StrCat("  %1 = sub %p0, %0 : f32", dims,
                                "\n  return %0, %1\n}")
                 : "  return %0\n}");
    auto g = ir::ParseGraph(text);
    ASSERT_TRUE(g.ok()) << g.status() << "\n" << text;
    absl::StatusOr<RegionKernel> k = CompileRegion(**g, {.use_cache = false});
    ASSERT_TRUE(k.ok()) << k.status();
    const std::vector<Tensor> got = RunCpuKernel(*k, **g, {x});
    const std::vector<float> m = got[0].to_vector<float>();
    for (int64_t r = 0; r < n; ++r) {
      SCOPED_TRACE(absl::StrCat("row ", r, with_use ? " (row phases)" : ""));
      if (std::isnan(want[r])) {
        EXPECT_TRUE(std::isnan(m[r])) << m[r];
      } else {
        EXPECT_EQ(m[r], static_cast<float>(want[r]));
      }
    }
    if (with_use) {  // x - max: 0 at the maximum, NaN across NaN rows
      const std::vector<float> d = got[1].to_vector<float>();
      EXPECT_EQ(d[1 * cols + 20], 0.0f);
      EXPECT_TRUE(std::isnan(d[4 * cols]));
      EXPECT_EQ(d[6 * cols + 17], 0.0f);
    }
  }
}

}  // namespace
}  // namespace stepjit::codegen::cpu
