// A compiled step on CUDA: the shape-only re-trace and the accuracy checker
// work there too (meta dispatch touches no device memory; the checker runs
// the program with its regions checked and the step eagerly on the device).
// Runs on the host emulator unless STEPJIT_TEST_CUDA_BACKEND=driver.
#include <cmath>
#include <iterator>
#include <string>

#include "frontend/stepjit.h"
#include "gtest/gtest.h"
#include "testing/miscompile_region.h"
#include "tests/cuda/cuda_test_backend.h"
#include "tests/util/adamw_mlp.h"

namespace stepjit {
namespace {

using test::CudaTest;

const Device kCuda = Device::cuda(0);

struct Net : test::AdamWMlp {
  Net() : AdamWMlp({12, 16, 4}, 13, kCuda) {}
  Tensor Step(const Tensor& x, const Tensor& y, double scale) {
    opt->zero_grad();
    Tensor loss = cross_entropy(model(x) * scale, y);
    loss.backward();
    opt->step();
    return loss;
  }
};

TEST_F(CudaTest, ChangedHostDoubleOnCudaIsCaughtByTheReTrace) {
  Net a, b;
  double scale = 1.0;
  auto fast = compile(
      [&](const Tensor& x, const Tensor& y) { return a.Step(x, y, scale); },
      {.verify = Verify::kAlways});
  Generator g(3);
  for (int i = 0; i < 8; ++i) {
    if (i == 4) scale = 0.5;
    if (i == 6) scale = 0.25;  // lifted by then: a new value, no retrace
    const Tensor x = randn({8, 12}, {}, &g).to(kCuda);
    const Tensor y = randint(0, 4, {8}, {.dtype = DType::kI64}, &g).to(kCuda);
    const double want = b.Step(x, y, scale).item();
    EXPECT_NEAR(fast(x, y).item(), want, 1e-5 * std::abs(want) + 1e-6)
        << "step " << i;
  }
  EXPECT_EQ(fast.stats().verify_mismatches, 1) << fast.explain();
  EXPECT_EQ(fast.stats().traces, 2) << fast.explain();
  EXPECT_NE(fast.explain().find(
                "takes host numbers that changed as arguments (rebuilt once)"),
            std::string::npos)
      << fast.explain();
  EXPECT_NE(fast.explain().find(") 1 -> 0.5"), std::string::npos)
      << fast.explain();
}

// Batch sizes that change every call, odd ones among them: one trace, each
// new size compiled from its recording as a concrete shape (its own memory
// plan and CUDA graph; shape-generic kernels shared with the other sizes)
// and replayed, matching eager on the device call by call.
TEST_F(CudaTest, RandomBatchSizesOnCudaAreShapesOfOneTrace) {
  Net a, b;
  auto fast = compile(
      [&](const Tensor& x, const Tensor& y) { return a.Step(x, y, 1.0); });
  Generator g(5);
  const int64_t sizes[] = {8, 8, 7, 127, 2, 7, 33, 127, 2, 8};
  for (size_t i = 0; i < std::size(sizes); ++i) {
    const int64_t n = sizes[i];
    const Tensor x = randn({n, 12}, {}, &g).to(kCuda);
    const Tensor y = randint(0, 4, {n}, {.dtype = DType::kI64}, &g).to(kCuda);
    const double want = b.Step(x, y, 1.0).item();
    EXPECT_NEAR(fast(x, y).item(), want, 1e-5 * std::abs(want) + 1e-6)
        << "call " << i << " (batch " << n << ")";
  }
  const auto pa = a.model.parameters(), pb = b.model.parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    const Tensor d = amax(abs(pa[i] - pb[i])).to(Device::cpu());
    EXPECT_LE(d.item(), 1e-5) << "parameter " << i;
  }
  const CompileStats s = fast.stats();
  EXPECT_EQ(s.traces, 1) << fast.explain();
  EXPECT_EQ(s.shape_builds, 4) << fast.explain();
  EXPECT_EQ(s.replays, 8) << fast.explain();
  // The shapes built from recordings run shape-generic CUDA regions: one
  // source (one module) per region serves them, not one per size.
  EXPECT_GT(s.shape_kernels, 0) << fast.explain();
  EXPECT_LE(s.shape_kernels * 2, s.shape_regions) << fast.explain();
  EXPECT_NE(fast.explain().find("symbolic dims: x0 dim 0 (2..127)"),
            std::string::npos)
      << fast.explain();
}

TEST_F(CudaTest, AccuracyCheckerOnCudaPassesCleanAndNamesAMiscompiledRegion) {
  Generator g(4);
  const Tensor x = randn({8, 12}, {}, &g).to(kCuda);
  const Tensor y = randint(0, 4, {8}, {.dtype = DType::kI64}, &g).to(kCuda);
  {
    Net a;
    auto fast = compile(
        [&](const Tensor& xx, const Tensor& yy) { return a.Step(xx, yy, 1.0); },
        {.check = true, .check_replays = 2});
    for (int i = 0; i < 4; ++i) fast(x, y);
    EXPECT_EQ(fast.stats().checks, 2);
    EXPECT_EQ(fast.stats().check_failures, 0) << fast.check_report();
  }
  Net a;
  runtime::ScopedMiscompileRegion hook("", ir::OpId::kSqrt, ir::OpId::kExp);
  auto fast = compile(
      [&](const Tensor& xx, const Tensor& yy) { return a.Step(xx, yy, 1.0); },
      {.check = true, .check_replays = 1});
  for (int i = 0; i < 3; ++i) fast(x, y);
  ASSERT_EQ(hook.miscompiled().size(), 1u);
  const std::string report = fast.check_report();
  EXPECT_NE(report.find("DIVERGED"), std::string::npos) << report;
  EXPECT_NE(report.find("guilty region (the first whose generated kernel "
                        "disagrees with its body "
                        "run op by op): " +
                        hook.miscompiled()[0]),
            std::string::npos)
      << report;
}

}  // namespace
}  // namespace stepjit
