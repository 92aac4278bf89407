// Row-plan regions on CUDA (codegen/cuda/cuda_emitter_rows.cc): softmax,
// log_softmax, layer_norm, var, cross_entropy, mse_loss and the backward
// patterns their gradient rules write, generated as CUDA C, compiled as host
// C++ against the emulation of the CUDA built-ins and run with a grid of at
// most 3 blocks of 64 threads (so row loops wrap and block reductions cross
// warps), against the same bodies run op by op through the eager CPU
// kernels. Also: launch shapes, grouping in a multi-region kernel, and the
// same bits on every run.
//
// The cases and tolerances are tests/util/row_cases.h's: f32 4 ulps (a row's
// sum is a tree of per-lane sums here, a sequential sum in the eager
// kernels), f16/bf16 1 ulp.
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "codegen/cuda/cuda_emitter.h"
#include "codegen/cuda/multi_region.h"
#include "gtest/gtest.h"
#include "testing/cuda_emulator/host_emulation.h"
#include "tests/codegen/cuda_test_util.h"
#include "tests/util/row_cases.h"

namespace stepjit::codegen::cuda {
namespace {

using ir::DType;
namespace rows = ::stepjit::test::rows;
using rows::Case;
using rows::ExpectClose;
using rows::Interpret;
using rows::Logits;
using rows::Parse;
using rows::ScaleFor;
using test::Bind;
using test::Bound;
using test::Launch;
using test::SameBytes;

constexpr int kBlock = 64;
constexpr int64_t kGridCap = 3;

std::vector<Tensor> Emulate(const HostModule& module, const RegionSource& src,
                            const ir::Graph& body,
                            const std::vector<Tensor>& args,
                            int64_t grid_cap = kGridCap) {
  Bound b;
  std::vector<void*> ptrs;
  Bind(src, body, args, b, ptrs);
  Launch(module, src, ptrs, grid_cap);
  return b.outs;
}

// Row lengths 1, 7, 33, 1000 (a warp per row) and 4097 (a block per row);
// odd row counts.
const std::vector<std::pair<int64_t, int64_t>>& Shapes() {
  static const auto* s = new std::vector<std::pair<int64_t, int64_t>>{
      {5, 1}, {5, 7}, {3, 33}, {5, 1000}, {3, 4097}, {1, 33}, {17, 10}};
  return *s;
}

// Emits `c` for every shape in f32, f16 and bf16, compiles them as one host
// module, runs each and compares with the eager kernels.
void CheckCase(const Case& c) {
  if (HostCompiler().empty())
    GTEST_SKIP() << "no host C++ compiler to build the emulation";
  struct Instance {
    std::string what;
    std::unique_ptr<ir::Graph> body;
    RegionSource src;
    DType t;
    int64_t n, cols;
  };
  std::vector<Instance> all;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (auto [n, cols] : Shapes()) {
      Instance in{
          absl::StrCat(c.name, " ", ir::DTypeName(t), " [", n, ",", cols, "]"),
          Parse(c.text, t, n, cols),
          {},
          t,
          n,
          cols};
      ASSERT_NE(in.body, nullptr);
      absl::StatusOr<RegionSource> src =
          EmitRegion(*in.body, {.block = kBlock});
      ASSERT_TRUE(src.ok()) << in.what << ": " << src.status();
      in.src = *std::move(src);
      all.push_back(std::move(in));
    }
  }
  std::vector<const RegionSource*> sources;
  std::vector<std::string> kernels;
  for (const Instance& in : all) {
    sources.push_back(&in.src);
    for (const KernelLaunch& k : in.src.kernels) kernels.push_back(k.name);
  }
  absl::StatusOr<HostModule> module =
      CompileForHost(CombineSources(sources), "rows", kernels);
  ASSERT_TRUE(module.ok()) << module.status();
  for (const Instance& in : all) {
    const std::vector<Tensor> args =
        c.args(in.n, in.cols, in.t, in.n * 131 + in.cols);
    const std::vector<Tensor> got = Emulate(*module, in.src, *in.body, args);
    const std::vector<Tensor> want = Interpret(*in.body, args);
    const double scale = ScaleFor(c, args);
    ASSERT_EQ(got.size(), want.size());
    for (size_t r = 0; r < got.size(); ++r)
      ExpectClose(got[r], want[r], in.t == DType::kF32 ? 4 : 1, scale,
                  absl::StrCat(in.what, " result ", r));
    // The same bits again, with every block of the grid its own.
    const std::vector<Tensor> again =
        Emulate(*module, in.src, *in.body, args, int64_t{1} << 30);
    for (size_t r = 0; r < got.size(); ++r)
      EXPECT_TRUE(SameBytes(got[r], again[r])) << in.what << " result " << r;
  }
}

void CheckCases(const std::vector<Case>& cases) {
  for (const Case& c : cases) CheckCase(c);
}

TEST(CudaRowTest, SoftmaxMatchesEager) { CheckCase(rows::Softmax()); }
TEST(CudaRowTest, LogSoftmaxMatchesEager) { CheckCase(rows::LogSoftmax()); }
TEST(CudaRowTest, LayerNormMatchesEager) { CheckCases(rows::LayerNorm()); }
TEST(CudaRowTest, VarMatchesEager) { CheckCase(rows::Var()); }
TEST(CudaRowTest, CrossEntropyMatchesEager) {
  CheckCases(rows::CrossEntropy());
}
TEST(CudaRowTest, MseLossMatchesEager) { CheckCases(rows::MseLoss()); }
TEST(CudaRowTest, SoftmaxBackwardMatchesEager) {
  CheckCase(rows::SoftmaxBackward());
}
TEST(CudaRowTest, LogSoftmaxBackwardMatchesEager) {
  CheckCase(rows::LogSoftmaxBackward());
}
TEST(CudaRowTest, LayerNormBackwardMatchesEager) {
  CheckCase(rows::LayerNormBackward());
}
TEST(CudaRowTest, CrossEntropyBackwardMatchesEager) {
  CheckCase(rows::CrossEntropyBackward());
}

const char kSoftmax[] = R"(graph @r(%p0: f32[{N},{C}] input) {
  %0 = softmax %p0 {dim = 1} : f32[{N},{C}]
  return %0
})";

TEST(CudaRowTest, RowsTakeAWarpOrABlockByLength) {
  for (auto [cols, strategy] :
       std::vector<std::pair<int64_t, ReductionStrategy>>{
           {33, ReductionStrategy::kRowPerWarp},
           {kMaxWarpRow, ReductionStrategy::kRowPerWarp},
           {kMaxWarpRow + 1, ReductionStrategy::kRowPerBlock}}) {
    auto g = Parse(kSoftmax, DType::kF32, 100, cols);
    absl::StatusOr<RegionSource> src = EmitRegion(*g, {.block = 256});
    ASSERT_TRUE(src.ok()) << src.status();
    EXPECT_EQ(src->strategy, strategy) << cols;
    EXPECT_EQ(src->rows, 100);
    EXPECT_EQ(src->row_len, cols);
    ASSERT_EQ(src->kernels.size(), 1u);
    // 8 warps of a block take 8 rows; a block takes one.
    EXPECT_EQ(src->kernels[0].grid,
              strategy == ReductionStrategy::kRowPerWarp ? 13 : 100);
    EXPECT_EQ(src->num_accumulators, 0);
  }
  auto g = Parse(kSoftmax, DType::kF32, 100, 33);
  absl::StatusOr<RegionSource> thread =
      EmitRegion(*g, {.block = 64, .max_thread_row = 33});
  ASSERT_TRUE(thread.ok()) << thread.status();
  EXPECT_EQ(thread->strategy, ReductionStrategy::kRowPerThread);
  EXPECT_EQ(thread->kernels[0].grid, 2);
}

// A mean over rows: each row's loss goes to acc0[row]; one thread of the
// reduced kernel folds them in row order (no atomics).
TEST(CudaRowTest, TotalsFoldPerRowValuesInRowOrder) {
  auto g = Parse(R"(graph @r(%p0: f32[{N},{C}] input, %p1: i64[{N}] input) {
  %0 = cross_entropy %p0, %p1 {reduction = "mean"} : f32[]
  return %0
})",
                 DType::kF32, 37, 10);
  absl::StatusOr<RegionSource> src = EmitRegion(*g);
  ASSERT_TRUE(src.ok()) << src.status();
  ASSERT_EQ(src->kernels.size(), 2u);
  EXPECT_TRUE(absl::EndsWith(src->kernels[1].name, "_reduced"));
  EXPECT_EQ(src->kernels[1].grid, 1);
  EXPECT_EQ(src->num_accumulators, 1);
  EXPECT_EQ(src->partials, 37);
  EXPECT_TRUE(absl::StrContains(
      src->source, "for (sj_index r = 0; r < 37; ++r) a0 += acc0[r];"))
      << src->source;
  EXPECT_FALSE(absl::StrContains(src->source, "atomic")) << src->source;
}

// Row regions group with other regions in one multi-region launch and give
// the bytes each gives alone.
TEST(CudaRowTest, MultiRegionGroupMatchesEachRegionAlone) {
  if (HostCompiler().empty())
    GTEST_SKIP() << "no host C++ compiler to build the emulation";
  std::vector<std::unique_ptr<ir::Graph>> bodies;
  bodies.push_back(Parse(kSoftmax, DType::kF32, 9, 1500));
  bodies.push_back(
      Parse(R"(graph @r(%p0: {T}[{N},{C}] input, %p1: i64[{N}] input) {
  %0 = cross_entropy %p0, %p1 {reduction = "mean"} : {T}[]
  return %0
})",
            DType::kBF16, 11, 10));
  bodies.push_back(Parse(R"(graph @e(%p0: f32[{N},{C}] input) {
  %0 = relu %p0 : f32[{N},{C}]
  return %0
})",
                         DType::kF32, 7, 13));
  std::vector<const ir::Graph*> views;
  std::vector<RegionSource> alone;
  std::vector<std::string> alone_kernels;
  for (const auto& b : bodies) {
    ASSERT_NE(b, nullptr);
    views.push_back(b.get());
    absl::StatusOr<RegionSource> r = EmitRegion(*b, {.block = kBlock});
    ASSERT_TRUE(r.ok()) << r.status();
    for (const KernelLaunch& k : r->kernels) alone_kernels.push_back(k.name);
    alone.push_back(*std::move(r));
  }
  absl::StatusOr<MultiRegionSource> multi =
      EmitMultiRegion(views, {.block = kBlock});
  ASSERT_TRUE(multi.ok()) << multi.status();
  std::vector<const RegionSource*> all;
  for (const RegionSource& r : alone) all.push_back(&r);
  absl::StatusOr<HostModule> alone_module =
      CompileForHost(CombineSources(all), "alone", alone_kernels);
  ASSERT_TRUE(alone_module.ok()) << alone_module.status();
  const RegionSource& c = multi->combined;
  std::vector<std::string> multi_kernels;
  for (const KernelLaunch& k : c.kernels) multi_kernels.push_back(k.name);
  absl::StatusOr<HostModule> multi_module =
      CompileForHost(c.source, c.name, multi_kernels);
  ASSERT_TRUE(multi_module.ok()) << multi_module.status();

  std::vector<std::vector<Tensor>> args = {
      {Logits(9, 1500, DType::kF32, 1)},
      {Logits(11, 10, DType::kBF16, 2, false),
       from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 3},
                   {11})},
      {Logits(7, 13, DType::kF32, 3, false)}};
  std::vector<std::vector<Tensor>> expect;
  for (size_t m = 0; m < bodies.size(); ++m) {
    expect.push_back(Emulate(*alone_module, alone[m], *bodies[m], args[m]));
    const std::vector<Tensor> eager = Interpret(*bodies[m], args[m]);
    ExpectClose(expect.back()[0], eager[0],
                args[m][0].dtype() == DType::kF32 ? 4 : 1, 1,
                bodies[m]->name());
  }
  for (const int64_t cap : {int64_t{1} << 30, kGridCap}) {
    std::vector<Bound> got(bodies.size());
    std::vector<void*> ptrs;
    for (size_t m = 0; m < bodies.size(); ++m)
      Bind(multi->members[m], *bodies[m], args[m], got[m], ptrs);
    ASSERT_EQ(ptrs.size(), c.params.size());
    Launch(*multi_module, c, ptrs, cap);
    for (size_t m = 0; m < bodies.size(); ++m) {
      EXPECT_TRUE(SameBytes(got[m].outs[0], expect[m][0]))
          << bodies[m]->name() << " with grid cap " << cap;
    }
  }
}

}  // namespace
}  // namespace stepjit::codegen::cuda
