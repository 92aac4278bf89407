// Row-plan region kernels (codegen/region_plan.h): the row-op cases of
// tests/util/row_cases.h (softmax, log_softmax, layer_norm, var,
// cross_entropy, mse_loss and the backward patterns their gradient rules
// write), generated and run on the CPU, against the same bodies run op by
// op through the eager kernels. Tolerance as row_cases.h says: f32 4 ulps,
// bf16 1 ulp.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/cpu/region_kernel.h"
#include "codegen/region_plan.h"
#include "gtest/gtest.h"
#include "runtime/cpu/program/cpu_backend.h"
#include "tests/util/row_cases.h"

namespace stepjit::codegen::cpu {
namespace {

using ir::DType;
using test::rows::Case;

std::vector<Tensor> Generated(const RegionKernel& k, const ir::Graph& g,
                              const std::vector<Tensor>& args) {
  std::vector<void*> ptrs;
  for (const Tensor& a : args) ptrs.push_back(a.data_ptr());
  std::vector<Tensor> out;
  for (const ir::Value* r : g.returns()) {
    out.push_back(empty(r->type().shape, {.dtype = r->type().dtype}));
    ptrs.push_back(out.back().data_ptr());
  }
  runtime::cpu::RunRegionKernel(k, ptrs);
  return out;
}

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
      const std::vector<Tensor> got = Generated(*k, *g, args);
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

}  // namespace
}  // namespace stepjit::codegen::cpu
