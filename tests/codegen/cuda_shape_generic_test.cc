// Shape-generic CUDA regions (EmitOptions::shape_generic), run on the host
// emulator: each body is emitted generic and specialized at sizes 1, 2, 7,
// 127 and 1000 (rows and row lengths); the generic kernels take their sizes
// as a by-value argument and must compute the specialized kernels' results
// bit for bit (the same layout, so the same order of every sum), which
// match the eager kernels within tests/util/row_cases.h's tolerances.
// Bodies that differ only in sizes of 2 or more (not equal to each other)
// and lay out alike (the same reduction or row strategy, chunked or not:
// choices made from the sizes) must emit one source: one NVRTC module
// serves them all.
#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/cuda/cuda_emitter.h"
#include "codegen/cuda/cuda_layout.h"
#include "gtest/gtest.h"
#include "testing/cuda_emulator/host_emulation.h"
#include "tests/util/row_cases.h"

namespace stepjit::codegen::cuda {
namespace {

using ir::DType;
using test::rows::Case;

constexpr int kBlock = 64;
constexpr int64_t kGridCap = 3;  // grid-stride loops go round

// Runs `src`'s kernels from `module` on `args`; returns the outputs.
std::vector<Tensor> Emulate(const HostModule& module, const RegionSource& src,
                            const ir::Graph& body,
                            const std::vector<Tensor>& args) {
  std::vector<Tensor> outs;
  std::vector<void*> ptrs;
  for (const Tensor& a : args) ptrs.push_back(a.data_ptr());
  for (const ir::Value* r : body.returns()) {
    outs.push_back(
        full(r->type().shape, std::nan(""), {.dtype = r->type().dtype}));
    ptrs.push_back(outs.back().data_ptr());
  }
  std::vector<double> scratch(static_cast<size_t>(src.num_slots) + 1);
  ptrs.push_back(scratch.data());
  std::vector<std::vector<double>> accs(
      static_cast<size_t>(src.num_accumulators),
      std::vector<double>(
          static_cast<size_t>(std::max<int64_t>(src.partials, 1))));
  for (auto& a : accs) ptrs.push_back(a.data());
  std::vector<void*> args_at;
  for (void*& p : ptrs) args_at.push_back(&p);
  std::array<int64_t, kMaxDims> dims{};
  if (src.shape_generic) {
    std::copy(src.dims.begin(), src.dims.end(), dims.begin());
    args_at.push_back(dims.data());
  }
  for (const KernelLaunch& k : src.kernels) {
    absl::StatusOr<HostKernel> kernel = module.Kernel(k.name);
    EXPECT_TRUE(kernel.ok()) << kernel.status();
    if (!kernel.ok()) return outs;
    const absl::Status run =
        kernel->Launch(args_at.data(), std::min(k.grid, kGridCap), k.block);
    EXPECT_TRUE(run.ok()) << k.name << ": " << run;
  }
  return outs;
}

std::vector<Tensor> Matrix(int64_t n, int64_t c, DType t, uint64_t s) {
  return {test::rows::Logits(n, c, t, s, false)};
}
std::vector<Tensor> MatrixAndColumn(int64_t n, int64_t c, DType t, uint64_t s) {
  Generator gen(s + 3);
  return {test::rows::Logits(n, c, t, s, false), randn({n, 1}, {}, &gen).to(t)};
}

std::vector<Case> Cases() {
  std::vector<Case> cases = {
      test::rows::Softmax(),
      test::rows::LayerNormBackward(),
      {"column sums",
       R"(graph @r(%p0: {T}[{N},{C}] input, %p1: {T}[{N},1] input) {
  %0 = mul %p0, %p1 : {T}[{N},{C}]
  %1 = sum %0 {dims = [0], keepdim = false} : {T}[{C}]
  %2 = sqrt %1 : {T}[{C}]
  return %2, %0
})",
       MatrixAndColumn, 1000},
      {"row means", R"(graph @r(%p0: {T}[{N},{C}] input) {
  %0 = exp %p0 : {T}[{N},{C}]
  %1 = mean %0 {dims = [1], keepdim = false} : {T}[{N}]
  return %1
})",
       Matrix, 10},
      {"mean of squares", R"(graph @r(%p0: {T}[{N},{C}] input) {
  %0 = mul %p0, %p0 : {T}[{N},{C}]
  %1 = mean %0 {dims = [], keepdim = false} : {T}[]
  return %1
})",
       Matrix, 10},
  };
  for (const Case& c : test::rows::CrossEntropy()) cases.push_back(c);
  for (const Case& c : test::rows::LayerNorm()) cases.push_back(c);
  return cases;
}

TEST(CudaShapeGenericTest, GenericKernelsMatchSpecializedOnesAtEverySize) {
  if (HostCompiler().empty())
    GTEST_SKIP() << "no host C++ compiler to build the emulation";
  const std::vector<std::pair<int64_t, int64_t>> sizes = {
      {1, 7}, {2, 2}, {7, 127}, {127, 7}, {2, 1000}, {1000, 2}, {7, 1}};
  struct Built {
    std::string what;
    const Case* c = nullptr;
    int64_t n = 0, cols = 0;
    std::unique_ptr<ir::Graph> body;
    RegionSource fixed, generic;
  };
  const std::vector<Case> cases = Cases();
  std::vector<Built> built;
  for (const Case& c : cases) {
    std::map<std::tuple<ReductionStrategy, bool, bool>, std::set<std::string>>
        sources;
    for (auto [n, cols] : sizes) {
      Built b;
      b.what = absl::StrCat(c.name, " [", n, ",", cols, "]");
      b.c = &c;
      b.n = n;
      b.cols = cols;
      b.body = test::rows::Parse(c.text, DType::kF32, n, cols);
      ASSERT_NE(b.body, nullptr) << b.what;
      absl::StatusOr<RegionSource> fixed =
          EmitRegion(*b.body, {.block = kBlock});
      absl::StatusOr<RegionSource> generic =
          EmitRegion(*b.body, {.block = kBlock, .shape_generic = true});
      if (!fixed.ok()) {
        ASSERT_EQ(generic.status().code(), fixed.status().code()) << b.what;
        continue;
      }
      ASSERT_TRUE(generic.ok()) << b.what << ": " << generic.status();
      EXPECT_FALSE(fixed->shape_generic) << b.what;
      EXPECT_TRUE(generic->shape_generic) << b.what;
      if (n >= 2 && cols >= 2 && n != cols) {
        sources[{generic->strategy, generic->chunks > 1, generic->index64}]
            .insert(generic->source);
      }
      b.fixed = *std::move(fixed);
      b.generic = *std::move(generic);
      built.push_back(std::move(b));
    }
    EXPECT_FALSE(sources.empty()) << c.name;
    for (const auto& [layout, texts] : sources) {
      EXPECT_EQ(texts.size(), 1u)
          << c.name << ": sizes of 2 or more laid out alike emitted "
          << texts.size() << " different generic sources";
    }
  }
  // One host module for everything (the generic regions at sizes >= 2 are
  // one region there: CombineSources keeps one copy per name).
  std::vector<const RegionSource*> all;
  std::vector<std::string> kernels;
  for (const Built& b : built) {
    for (const RegionSource* r : {&b.fixed, &b.generic}) {
      all.push_back(r);
      for (const KernelLaunch& k : r->kernels) kernels.push_back(k.name);
    }
  }
  std::sort(kernels.begin(), kernels.end());
  kernels.erase(std::unique(kernels.begin(), kernels.end()), kernels.end());
  absl::StatusOr<HostModule> module =
      CompileForHost(CombineSources(all), "shape_generic", kernels);
  ASSERT_TRUE(module.ok()) << module.status();
  for (const Built& b : built) {
    const std::vector<Tensor> args =
        b.c->args(b.n, b.cols, DType::kF32, b.n * 31 + b.cols);
    const std::vector<Tensor> fixed = Emulate(*module, b.fixed, *b.body, args);
    const std::vector<Tensor> generic =
        Emulate(*module, b.generic, *b.body, args);
    const std::vector<Tensor> eager = test::rows::Interpret(*b.body, args);
    for (size_t r = 0; r < eager.size(); ++r) {
      const std::vector<float> f = fixed[r].to(DType::kF32).to_vector<float>();
      const std::vector<float> g =
          generic[r].to(DType::kF32).to_vector<float>();
      ASSERT_EQ(f.size(), g.size());
      for (size_t i = 0; i < f.size(); ++i) {
        if (std::isnan(f[i]) && std::isnan(g[i])) continue;
        ASSERT_EQ(f[i], g[i]) << b.what << " result " << r << " [" << i
                              << "]: generic differs from specialized";
      }
      test::rows::ExpectClose(generic[r], eager[r], 8,
                              test::rows::ScaleFor(*b.c, args),
                              absl::StrCat(b.what, " result ", r));
    }
  }
}

}  // namespace
}  // namespace stepjit::codegen::cuda
