// The row-major -> column-major cuBLASLt plan
// (devices/cuda/cublaslt/cublaslt_plan.h), proven without a GPU: every plan is
// interpreted with column-major BLAS semantics on the host and compared with
// runtime::cpu::Gemm.
#include <cstdint>
#include <utility>
#include <vector>

#include "devices/cpu/gemm.h"
#include "devices/cuda/cublaslt/cublaslt_plan.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cuda/lt_gemm_cases.h"
#include "tests/util/dtype_elements.h"

namespace stepjit::runtime::cuda {
namespace {

using cpu::GemmActivation;
using ir::DType;
using lt_test::AllCases;
using lt_test::ExpectBiasGradClose;
using lt_test::ExpectClose;
using lt_test::GemmCase;
using lt_test::HostGemm;
using lt_test::RunPlanOnHost;
using ::testing::HasSubstr;

TEST(LtPlanTest, MatchesCpuGemmOnTheHost) {
  int cases = 0;
  for (DType t : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16}) {
    for (const GemmCase& gc : AllCases(t, 5, 7, 4)) {
      for (bool fuse : {true, false}) {
        HostGemm h(gc, 1234 + cases);
        std::vector<char> before = h.out;
        std::vector<char> want = h.out, want_grad = h.grad;
        cpu::GemmArgs cpu_args = h.args;
        cpu_args.c = want.data();
        if (gc.bias_grad) cpu_args.bias_grad = want_grad.data();
        ASSERT_TRUE(cpu::Gemm(cpu_args).ok()) << gc.Name();
        absl::StatusOr<LtPlan> plan = PlanLtGemm(h.Device(), fuse);
        ASSERT_TRUE(plan.ok()) << plan.status();
        RunPlanOnHost(*plan);
        if (HasFatalFailure()) return;
        std::vector<double> scale = h.Scale(before);
        ExpectClose(gc, h.args, h.out, want, scale, test::GemmTolerance(t));
        if (gc.bias_grad) {
          ExpectBiasGradClose(gc, h.args, h.grad, want_grad,
                              test::GemmTolerance(t));
        }
        ++cases;
      }
    }
  }
  // dtypes, transposes, batch kinds (single products twice: with and
  // without a bias gradient), bias, activations, accumulation, fusion.
  EXPECT_EQ(cases, 4 * 2 * 2 * (3 + 1) * 2 * 4 * 2 * 2);
}

TEST(LtPlanTest, EmptyProductsNeedNoCublasLt) {
  for (bool acc : {false, true}) {
    GemmCase gc;
    gc.k = 0;
    gc.bias = true;
    gc.activation = GemmActivation(ir::OpId::kGelu);
    gc.accumulate = acc;
    gc.batch = 2;
    HostGemm h(gc, 7);
    std::vector<char> before = h.out, want = h.out;
    cpu::GemmArgs cpu_args = h.args;
    cpu_args.c = want.data();
    ASSERT_TRUE(cpu::Gemm(cpu_args).ok());
    absl::StatusOr<LtPlan> plan = PlanLtGemm(h.Device());
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_TRUE(plan->skip_product);
    EXPECT_EQ(plan->post_activation, GemmActivation(ir::OpId::kGelu));
    EXPECT_EQ(plan->post_bias, h.args.bias);
    RunPlanOnHost(*plan);
    ExpectClose(gc, h.args, h.out, want, h.Scale(before), 1e-6);
  }
  GemmCase empty;
  empty.m = 0;
  HostGemm h(empty, 8);
  absl::StatusOr<LtPlan> plan = PlanLtGemm(h.Device());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->no_work);
}

TEST(LtPlanTest, ABiasGradientWithoutAProductIsTheKernels) {
  // k == 0: zeros; n == 0: C is empty but A is not.
  for (auto [n, k] : {std::pair<int64_t, int64_t>{7, 0}, {0, 4}}) {
    GemmCase gc;
    gc.trans_a = true;
    gc.n = n;
    gc.k = k;
    gc.bias_grad = true;
    HostGemm h(gc, 9);
    std::vector<char> want = h.out, want_grad = h.grad;
    cpu::GemmArgs cpu_args = h.args;
    cpu_args.c = want.data();
    cpu_args.bias_grad = want_grad.data();
    ASSERT_TRUE(cpu::Gemm(cpu_args).ok()) << gc.Name();
    absl::StatusOr<LtPlan> plan = PlanLtGemm(h.Device());
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->epilogue, LtEpilogue::kDefault) << gc.Name();
    EXPECT_EQ(plan->post_bias_grad, h.args.bias_grad) << gc.Name();
    EXPECT_EQ(plan->no_work, n == 0) << gc.Name();
    RunPlanOnHost(*plan);
    ExpectBiasGradClose(gc, h.args, h.grad, want_grad, 1e-6);
  }
}

TEST(LtPlanTest, TypesAndEpilogues) {
  struct {
    DType dtype;
    bool tf32;
    LtDataType data;
    LtDataType scale;
    LtComputeType compute;
  } const types[] = {
      {DType::kF32, false, LtDataType::kF32, LtDataType::kF32,
       LtComputeType::k32F},
      {DType::kF32, true, LtDataType::kF32, LtDataType::kF32,
       LtComputeType::k32FFastTF32},
      {DType::kF16, true, LtDataType::kF16, LtDataType::kF32,
       LtComputeType::k32F},
      {DType::kBF16, false, LtDataType::kBF16, LtDataType::kF32,
       LtComputeType::k32F},
      {DType::kF64, true, LtDataType::kF64, LtDataType::kF64,
       LtComputeType::k64F},
  };
  for (const auto& t : types) {
    GemmCase gc;
    gc.dtype = t.dtype;
    gc.allow_tf32 = t.tf32;
    HostGemm h(gc, 1);
    absl::StatusOr<LtPlan> p = PlanLtGemm(h.Device());
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->data_type, t.data) << gc.Name();
    EXPECT_EQ(p->scale_type, t.scale) << gc.Name();
    EXPECT_EQ(p->compute_type, t.compute) << gc.Name();
    // Operands swap: cuBLASLt's A is the caller's B; m and n trade places.
    EXPECT_EQ(p->a.ptr, h.args.b);
    EXPECT_EQ(p->b.ptr, h.args.a);
    EXPECT_EQ(p->m, h.args.n);
    EXPECT_EQ(p->n, h.args.m);
  }
  struct {
    bool bias;
    GemmActivation act;
    LtEpilogue epilogue;
    GemmActivation post;
  } const epilogues[] = {
      {false, GemmActivation(), LtEpilogue::kDefault, GemmActivation()},
      {true, GemmActivation(), LtEpilogue::kBias, GemmActivation()},
      {false, GemmActivation(ir::OpId::kRelu), LtEpilogue::kRelu,
       GemmActivation()},
      {true, GemmActivation(ir::OpId::kRelu), LtEpilogue::kReluBias,
       GemmActivation()},
      {false, GemmActivation(ir::OpId::kGeluTanh), LtEpilogue::kGelu,
       GemmActivation()},
      {true, GemmActivation(ir::OpId::kGeluTanh), LtEpilogue::kGeluBias,
       GemmActivation()},
      // cuBLASLt has no exact GELU: bias in the epilogue, erf in the kernel.
      {false, GemmActivation(ir::OpId::kGelu), LtEpilogue::kDefault,
       GemmActivation(ir::OpId::kGelu)},
      {true, GemmActivation(ir::OpId::kGelu), LtEpilogue::kBias,
       GemmActivation(ir::OpId::kGelu)},
  };
  for (const auto& e : epilogues) {
    GemmCase gc;
    gc.bias = e.bias;
    gc.activation = e.act;
    HostGemm h(gc, 2);
    absl::StatusOr<LtPlan> p = PlanLtGemm(h.Device());
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->epilogue, e.epilogue) << gc.Name();
    EXPECT_EQ(p->post_activation, e.post) << gc.Name();
    EXPECT_EQ(p->bias, e.epilogue == LtEpilogue::kDefault ||
                               e.epilogue == LtEpilogue::kRelu ||
                               e.epilogue == LtEpilogue::kGelu
                           ? nullptr
                           : h.args.bias);
    EXPECT_EQ(p->post_bias, nullptr) << gc.Name();
    // Unfused: the plain product, everything else in the kernel.
    absl::StatusOr<LtPlan> u = PlanLtGemm(h.Device(), /*fuse_epilogue=*/false);
    ASSERT_TRUE(u.ok()) << u.status();
    EXPECT_EQ(u->epilogue, LtEpilogue::kDefault);
    EXPECT_EQ(u->post_activation, e.act);
    EXPECT_EQ(u->post_bias, h.args.bias);
  }
  // The bias gradient: BGRADB (cuBLASLt's B is the caller's A) when the bias
  // pointer is free, else the kernel.
  struct {
    bool bias;
    GemmActivation act;
    LtEpilogue epilogue;
    bool fused;
  } const grads[] = {
      {false, GemmActivation(), LtEpilogue::kBgradB, true},
      {false, GemmActivation(ir::OpId::kGelu), LtEpilogue::kBgradB, true},
      {true, GemmActivation(), LtEpilogue::kBias, false},
      {false, GemmActivation(ir::OpId::kRelu), LtEpilogue::kRelu, false},
  };
  for (const auto& e : grads) {
    GemmCase gc;
    gc.bias = e.bias;
    gc.activation = e.act;
    gc.bias_grad = true;
    HostGemm h(gc, 3);
    absl::StatusOr<LtPlan> p = PlanLtGemm(h.Device());
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->epilogue, e.epilogue) << gc.Name();
    EXPECT_EQ(p->bias, e.fused ? h.args.bias_grad : h.args.bias) << gc.Name();
    EXPECT_EQ(p->post_bias_grad, e.fused ? nullptr : h.args.bias_grad)
        << gc.Name();
    absl::StatusOr<LtPlan> u = PlanLtGemm(h.Device(), /*fuse_epilogue=*/false);
    ASSERT_TRUE(u.ok()) << u.status();
    EXPECT_EQ(u->epilogue, LtEpilogue::kDefault);
    EXPECT_EQ(u->bias, nullptr);
    EXPECT_EQ(u->post_bias_grad, h.args.bias_grad);
  }
}

TEST(LtPlanTest, RefusesWhatCpuGemmRefuses) {
  GemmCase gc;
  HostGemm h(gc, 3);
  auto refused = [](DeviceGemmArgs d, absl::string_view want) {
    absl::StatusOr<LtPlan> p = PlanLtGemm(d);
    EXPECT_TRUE(absl::IsInvalidArgument(p.status())) << p.status();
    EXPECT_THAT(p.status().message(), HasSubstr(want));
  };
  DeviceGemmArgs d = h.Device();
  d.gemm.dtype = DType::kI32;
  refused(d, "expected dtype f32, f64, f16 or bf16, got i32");
  d = h.Device();
  d.gemm.lda = 3;
  refused(d, "expected lda >= 4 (A is stored 5x4), got 3");
  d = h.Device();
  d.gemm.batch = 2;
  d.gemm.stride_c = 0;
  refused(d, "expected stride_c > 0 for batch=2");
  d = h.Device();
  d.gemm.b = nullptr;
  refused(d, "expected a non-null pointer for B");
  d = h.Device();
  d.gemm.k = -1;
  refused(d, "expected non-negative sizes");
  GemmCase grad = gc;
  grad.bias_grad = true;
  HostGemm g(grad, 4);
  d = g.Device();
  d.gemm.batch = 2;
  d.gemm.stride_c = 64;
  refused(d,
          "expected batch = 1 with bias_grad (the bias gradient of one "
          "product), got batch=2");
  d = g.Device();
  d.gemm.n = 0;
  d.gemm.a = nullptr;
  refused(d, "expected a non-null pointer for A (5x4) to sum into bias_grad");
}

}  // namespace
}  // namespace stepjit::runtime::cuda
