// Generated CUDA C compiles with NVRTC to cubin for sm_80 and sm_90, without
// a GPU: every elementwise op of the op table as a single-op kernel in every
// float dtype, the fused golden regions, compile errors with NVRTC's log,
// and the kernel cache. Skipped (with the reason) in a build without NVRTC.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "codegen/cuda/cuda_emitter.h"
#include "codegen/cuda/multi_region.h"
#include "codegen/cuda/nvrtc.h"
#include "codegen/cuda/single_op.h"
#include "codegen/kernel_cache.h"
#include "gtest/gtest.h"
#include "ir/parser.h"
#include "tests/codegen/cuda_test_util.h"

namespace stepjit::codegen::cuda {
namespace {

namespace fs = std::filesystem;
using ir::AttrKey;
using ir::DType;
using ir::OpId;
using ir::TensorType;

constexpr const char* kArchs[] = {"sm_80", "sm_90"};

#define SKIP_WITHOUT_NVRTC()                                              \
  if (!NvrtcAvailable()) {                                                \
    EXPECT_TRUE(absl::IsUnimplemented(CompileCuda("", "x").status()));    \
    GTEST_SKIP() << "this build has no NVRTC (CUDA Toolkit not found at " \
                    "configure time)";                                    \
  }

// A build configured with NVRTC must load it: otherwise every test below
// would skip and the CUDA code generator would go untested without a word.
// Set STEPJIT_ALLOW_MISSING_NVRTC=1 to run such a build's binaries where
// libnvrtc is deliberately absent.
TEST(NvrtcBuild, ConfiguredNvrtcLoads) {
  if (!NvrtcConfigured()) {
    EXPECT_FALSE(NvrtcAvailable());
    GTEST_SKIP() << "configured without NVRTC: " << NvrtcUnavailableReason();
  }
  if (const char* allow = std::getenv("STEPJIT_ALLOW_MISSING_NVRTC");
      allow != nullptr && std::string(allow) == "1" && !NvrtcAvailable()) {
    GTEST_SKIP() << "STEPJIT_ALLOW_MISSING_NVRTC=1: "
                 << NvrtcUnavailableReason();
  }
  ASSERT_TRUE(NvrtcAvailable())
      << "this build was configured with NVRTC but cannot load it: "
      << NvrtcUnavailableReason();
  EXPECT_FALSE(NvrtcLibraryPath().empty());
  EXPECT_TRUE(absl::StartsWith(NvrtcCompilerId(), "NVRTC 1"))
      << NvrtcCompilerId();
  const std::vector<std::string> archs = NvrtcSupportedArchs();
  EXPECT_NE(std::find(archs.begin(), archs.end(), "sm_90"), archs.end())
      << "sm_90 missing from " << archs.size() << " supported architectures";
}

// Compiles `source` for each arch, uncached, and checks the cubin is an ELF
// image (and the PTX targets that arch); returns the compile times.
std::vector<double> CompileForAllArchs(const std::string& source,
                                       const std::string& name) {
  std::vector<double> ms;
  for (const char* arch : kArchs) {
    absl::StatusOr<CompiledCuda> c = CompileCuda(
        source, name, {.arch = arch, .want_ptx = true, .use_cache = false});
    EXPECT_TRUE(c.ok()) << name << " for " << arch << ": " << c.status();
    if (!c.ok()) continue;
    EXPECT_TRUE(absl::StartsWith(c->cubin,
                                 "\x7f"
                                 "ELF"))
        << name << " " << arch;
    EXPECT_TRUE(absl::StrContains(c->ptx, absl::StrCat(".target ", arch)))
        << name << " " << arch;
    EXPECT_FALSE(c->cache_hit);
    EXPECT_EQ(c->log, "") << name << " " << arch
                          << ": generated code compiles without warnings";
    ms.push_back(c->compile_ms);
  }
  return ms;
}

// Single-op kernels for every elementwise and in-place update op of the op
// table in `dt`: full-size operands, a 0-d operand, a broadcast operand, a
// one-element tensor; plus casts to and from every other dtype, where, and
// the reductions by rows, by columns and to 0-d.
std::vector<RegionSource> SingleOpKernels(DType dt,
                                          std::vector<std::string>& failures) {
  std::vector<RegionSource> out;
  auto add = [&](OpId op, std::vector<TensorType> in, ir::Attrs attrs = {}) {
    absl::StatusOr<RegionSource> k = EmitSingleOp(op, in, attrs);
    if (k.ok()) {
      out.push_back(*std::move(k));
    } else {
      failures.push_back(absl::StrCat(ir::OpName(op), " ", ir::DTypeName(dt),
                                      ": ", k.status().ToString()));
    }
  };
  const TensorType full{dt, {1000}}, scalar{dt, {}}, one{dt, {1}},
      row{dt, {125}}, mat{dt, {8, 125}};
  for (const OpId op : test::ElementwiseOps()) {
    const ir::OpInfo& info = ir::GetOpInfo(op);
    if (op == OpId::kCast) {
      for (DType to : test::kCastDTypes) {
        if (to != dt) add(op, {full}, {{AttrKey::kDTypeAttr, to}});
      }
      add(op, {{DType::kBool, {1000}}}, {{AttrKey::kDTypeAttr, dt}});
      continue;
    }
    if (op == OpId::kWhere) {
      add(op, {{DType::kBool, {1000}}, full, scalar});
      add(op, {{DType::kBool, {8, 125}}, mat, row});
      continue;
    }
    if (info.kind == ir::OpKind::kInplaceUpdate) {
      const ir::Attrs attrs = {{AttrKey::kAlpha, 0.5},
                               {AttrKey::kValue, -0.25},
                               {AttrKey::kInPlace, true}};
      add(op, std::vector<TensorType>(info.max_arity, full), attrs);
      if (info.max_arity > 1) {
        std::vector<TensorType> with_scalar(info.max_arity, full);
        with_scalar.back() = scalar;
        add(op, with_scalar, attrs);
      }
      continue;
    }
    if (info.min_arity == 1) {
      add(op, {full});
      add(op, {one});
    } else if (info.min_arity == 2) {
      add(op, {full, full});
      add(op, {full, scalar});
      add(op, {mat, row});
      add(op, {one, one});
    } else {
      failures.push_back(absl::StrCat(ir::OpName(op), ": arity ",
                                      info.min_arity, " has no test shapes"));
    }
  }
  for (OpId op : {OpId::kSum, OpId::kMean, OpId::kAmax}) {
    for (const std::vector<int64_t>& dims :
         {std::vector<int64_t>{1}, {0}, {}}) {
      add(op, {{dt, {64, 300}}},
          {{AttrKey::kDims, dims}, {AttrKey::kKeepdim, false}});
    }
  }
  return out;
}

class EveryOpCompiles : public testing::TestWithParam<DType> {};

TEST_P(EveryOpCompiles, ForSm80AndSm90) {
  SKIP_WITHOUT_NVRTC();
  const DType dt = GetParam();
  std::vector<std::string> failures;
  std::vector<RegionSource> kernels = SingleOpKernels(dt, failures);
  for (const std::string& f : failures) ADD_FAILURE() << "not emitted: " << f;
  ASSERT_GE(kernels.size(), 100u);
  std::vector<const RegionSource*> all;
  size_t functions = 0;
  for (const RegionSource& k : kernels) {
    all.push_back(&k);
    functions += k.kernels.size();
  }
  const std::string source = CombineSources(all);
  const std::string name = absl::StrCat("single_ops_", ir::DTypeName(dt));
  const std::vector<double> ms = CompileForAllArchs(source, name);
  ASSERT_EQ(ms.size(), 2u);
  std::printf(
      "NVRTC %s: %zu single-op regions (%zu kernels, %zu KiB of CUDA C): sm_80 "
      "%.0f ms, sm_90 %.0f ms\n",
      name.c_str(), kernels.size(), functions, source.size() / 1024, ms[0],
      ms[1]);
}

INSTANTIATE_TEST_SUITE_P(FloatDTypes, EveryOpCompiles,
                         testing::Values(DType::kF32, DType::kF64, DType::kF16,
                                         DType::kBF16),
                         test::DTypeParamName);

// The integer kernels: casts between i32/i64 and every other dtype, the
// comparisons (with a 0-d operand too) and where, all in one translation
// unit; integer arithmetic is refused (it runs on the host).
TEST(CudaNvrtcTest, IntegerKernelsCompileForSm80AndSm90) {
  SKIP_WITHOUT_NVRTC();
  std::vector<RegionSource> kernels;
  auto add = [&](OpId op, std::vector<TensorType> in, ir::Attrs attrs = {}) {
    absl::StatusOr<RegionSource> k = EmitSingleOp(op, in, attrs);
    ASSERT_TRUE(k.ok()) << ir::OpName(op) << ": " << k.status();
    kernels.push_back(*std::move(k));
  };
  const DType all[] = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16,
                       DType::kI64, DType::kI32, DType::kBool};
  for (DType i : {DType::kI64, DType::kI32}) {
    for (DType other : all) {
      if (other == i) continue;
      add(OpId::kCast, {{i, {1000}}}, {{AttrKey::kDTypeAttr, other}});
      add(OpId::kCast, {{other, {1000}}}, {{AttrKey::kDTypeAttr, i}});
    }
    for (OpId op : {OpId::kEq, OpId::kNe, OpId::kLt, OpId::kLe, OpId::kGt, OpId::kGe}) {
      add(op, {{i, {1000}}, {i, {1000}}});
      add(op, {{i, {8, 125}}, {DType::kF32, {125}}});
      add(op, {{i, {1000}}, {i, {}}});
    }
    add(OpId::kWhere, {{DType::kBool, {1000}}, {i, {1000}}, {i, {}}});
    const absl::StatusOr<RegionSource> sum =
        EmitSingleOp(OpId::kAdd, {{i, {1000}}, {i, {1000}}}, {});
    EXPECT_TRUE(absl::IsUnimplemented(sum.status())) << sum.status();
    EXPECT_TRUE(absl::StrContains(sum.status().message(), "integer arithmetic (add)"))
        << sum.status();
  }
  std::vector<const RegionSource*> ptrs;
  for (const RegionSource& k : kernels) ptrs.push_back(&k);
  const std::vector<double> ms = CompileForAllArchs(CombineSources(ptrs), "integer_ops");
  EXPECT_EQ(ms.size(), 2u);
}

// The golden fused regions and a few more shapes, in one translation unit.
TEST(CudaNvrtcTest, FusedRegionsCompileForSm80AndSm90) {
  SKIP_WITHOUT_NVRTC();
  std::vector<std::string> texts = test::GoldenTexts(/*skip_huge=*/false);
  // Reduced dims around a kept one (a block per output, 2-d unravel of q),
  // and a kept dim around a reduced one (a thread per output).
  texts.push_back(test::MixedRegion("%7, %5"));
  texts.push_back(test::kMiddleRegion);
  texts.push_back(test::NormRegion(2048, 4096));
  texts.push_back(
      R"(graph @found_inf(%p0: f32[] input, %p1: f16[300,7] input, %p2: bool[] input) {
  %0 = full {shape = [], value = 1.0, dtype = f32} : f32[]
  %1 = div %0, %p0 : f32[]
  %2 = cast %p1 {dtype = f32} : f32[300,7]
  %3 = mul %2, %1 : f32[300,7]
  %4 = ne %3, %3 : bool[300,7]
  %5 = where %p2, %3, %2 : f32[300,7]
  %6 = cast %5 {dtype = f16} : f16[300,7]
  return %6, %4
})");
  std::vector<RegionSource> regions;
  for (const std::string& text : texts) {
    absl::StatusOr<std::unique_ptr<ir::Graph>> g = ir::ParseGraph(text);
    ASSERT_TRUE(g.ok()) << g.status() << "\n" << text;
    absl::StatusOr<RegionSource> r = EmitRegion(**g);
    ASSERT_TRUE(r.ok()) << r.status() << "\n" << text;
    regions.push_back(*std::move(r));
  }
  EXPECT_EQ(regions[regions.size() - 4].strategy,
            ReductionStrategy::kBlockPerRow);
  EXPECT_EQ(regions[regions.size() - 3].strategy,
            ReductionStrategy::kThreadPerOutput);
  std::vector<const RegionSource*> all;
  for (const RegionSource& r : regions) all.push_back(&r);
  const std::vector<double> ms =
      CompileForAllArchs(CombineSources(all), "fused_regions");
  ASSERT_EQ(ms.size(), 2u);
  std::printf(
      "NVRTC fused_regions: %zu regions: sm_80 %.0f ms, sm_90 %.0f ms\n",
      regions.size(), ms[0], ms[1]);
  // Each region alone compiles too (its own includes and helpers suffice).
  for (const RegionSource& r : regions) {
    absl::StatusOr<CompiledCuda> c =
        CompileCuda(r.source, r.name, {.arch = "sm_90", .use_cache = false});
    EXPECT_TRUE(c.ok()) << r.name << ": " << c.status();
  }
}

// Row-plan regions (softmax, log_softmax, layer_norm with and without
// affine, var, cross_entropy, mse_loss, backward patterns) with a warp, a
// block and a thread per row, alone, in one translation unit, and as members
// of a multi-region kernel.
TEST(CudaNvrtcTest, RowRegionsCompileForSm80AndSm90) {
  SKIP_WITHOUT_NVRTC();
  const std::vector<std::string> texts = {
      R"(graph @softmax(%p0: f32[64,1000] input) {
  %0 = softmax %p0 {dim = 1} : f32[64,1000]
  return %0
})",
      R"(graph @log_softmax(%p0: bf16[8,4097] input) {
  %0 = log_softmax %p0 {dim = 1} : bf16[8,4097]
  return %0
})",
      R"(graph @layer_norm(%p0: f16[4,3,33] input, %w: f16[33] input, %b: f16[33] input) {
  %0 = layer_norm %p0, %w, %b {normalized_ndim = 1, eps = 1e-05} : f16[4,3,33]
  %1 = gelu %0 : f16[4,3,33]
  return %1
})",
      R"(graph @layer_norm_2d(%p0: f32[6,2,10] input) {
  %0 = layer_norm %p0 {normalized_ndim = 2, eps = 1e-05} : f32[6,2,10]
  return %0
})",
      R"(graph @var(%p0: f64[7,33] input) {
  %0 = var %p0 {dims = [1], keepdim = false, correction = 1} : f64[7]
  return %0
})",
      R"(graph @xent(%p0: bf16[256,10] input, %p1: i64[256] input, %s: f32[] input) {
  %0 = cross_entropy %p0, %p1 {reduction = "mean", label_smoothing = 0.1} : bf16[]
  %1 = cast %0 {dtype = f32} : f32[]
  %2 = mul %1, %s : f32[]
  return %0, %2
})",
      R"(graph @xent_none(%p0: f32[33,7] input, %p1: i64[33] input) {
  %0 = cross_entropy %p0, %p1 {reduction = "none"} : f32[33]
  return %0
})",
      R"(graph @mse_rows(%p0: f32[9,70] input, %p1: f32[9,70] input) {
  %0 = mse_loss %p0, %p1 {reduction = "none"} : f32[9,70]
  %1 = sum %0 {dims = [1], keepdim = true} : f32[9,1]
  %2 = div %0, %1 : f32[9,70]
  return %2
})",
      R"(graph @ln_backward(%x: f32[12,32] input, %g: f32[12,32] input) {
  %0 = mean %x {dims = [1], keepdim = true} : f32[12,1]
  %1 = var %x {dims = [1], keepdim = true, correction = 0} : f32[12,1]
  %2 = full {shape = [], value = 1e-05, dtype = f32} : f32[]
  %3 = add %1, %2 : f32[12,1]
  %4 = rsqrt %3 : f32[12,1]
  %5 = sub %x, %0 : f32[12,32]
  %6 = mul %5, %4 : f32[12,32]
  %7 = mean %g {dims = [1], keepdim = true} : f32[12,1]
  %8 = mul %g, %6 : f32[12,32]
  %9 = mean %8 {dims = [1], keepdim = true} : f32[12,1]
  %10 = sub %g, %7 : f32[12,32]
  %11 = mul %6, %9 : f32[12,32]
  %12 = sub %10, %11 : f32[12,32]
  %13 = mul %4, %12 : f32[12,32]
  return %13
})"};
  std::vector<std::unique_ptr<ir::Graph>> bodies;
  std::vector<RegionSource> regions;
  for (const std::string& text : texts) {
    absl::StatusOr<std::unique_ptr<ir::Graph>> g = ir::ParseGraph(text);
    ASSERT_TRUE(g.ok()) << g.status() << "\n" << text;
    for (const int64_t thread_row : {int64_t{0}, int64_t{256}}) {
      absl::StatusOr<RegionSource> r =
          EmitRegion(**g, {.max_thread_row = thread_row});
      ASSERT_TRUE(r.ok()) << r.status() << "\n" << text;
      regions.push_back(*std::move(r));
    }
    bodies.push_back(*std::move(g));
  }
  EXPECT_EQ(regions[0].strategy, ReductionStrategy::kRowPerWarp);
  EXPECT_EQ(regions[2].strategy, ReductionStrategy::kRowPerBlock);
  EXPECT_EQ(regions[5].strategy, ReductionStrategy::kRowPerThread);
  std::vector<const RegionSource*> all;
  for (const RegionSource& r : regions) all.push_back(&r);
  ASSERT_EQ(CompileForAllArchs(CombineSources(all), "row_regions").size(), 2u);
  for (const RegionSource& r : regions) {
    absl::StatusOr<CompiledCuda> c =
        CompileCuda(r.source, r.name, {.arch = "sm_90", .use_cache = false});
    EXPECT_TRUE(c.ok()) << r.name << ": " << c.status() << "\n" << r.source;
  }
  std::vector<const ir::Graph*> views;
  for (const auto& b : bodies) views.push_back(b.get());
  absl::StatusOr<MultiRegionSource> multi = EmitMultiRegion(views);
  ASSERT_TRUE(multi.ok()) << multi.status();
  ASSERT_EQ(
      CompileForAllArchs(multi->combined.source, "row_multi_region").size(),
      2u);
}

TEST(CudaNvrtcTest, BrokenSourceReportsTheNvrtcLog) {
  SKIP_WITHOUT_NVRTC();
  const std::string broken =
      "extern \"C\" __global__ void k(float* x) {\n  x[0] = undefined_thing + "
      "1.0f;\n}\n";
  absl::StatusOr<CompiledCuda> c =
      CompileCuda(broken, "broken", {.arch = "sm_90", .use_cache = false});
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(c.status())) << c.status();
  const std::string msg(c.status().message());
  EXPECT_TRUE(absl::StrContains(msg, "broken.cu(2)")) << msg;
  EXPECT_TRUE(absl::StrContains(msg, "undefined_thing")) << msg;
  EXPECT_TRUE(absl::StrContains(msg, "error")) << msg;
  EXPECT_TRUE(absl::StrContains(msg, "sm_90")) << msg;
  // Not a real architecture: refused before NVRTC sees it.
  for (const char* arch : {"sm90", "compute_90", "sm_90 -G", "", "sm_"}) {
    absl::StatusOr<CompiledCuda> bad =
        CompileCuda("", "x", {.arch = arch, .use_cache = false});
    EXPECT_TRUE(absl::IsInvalidArgument(bad.status()))
        << arch << ": " << bad.status();
  }
  // A well-formed arch NVRTC does not know: its own complaint, still no crash.
  absl::StatusOr<CompiledCuda> old = CompileCuda(
      "__global__ void k() {}", "old", {.arch = "sm_10", .use_cache = false});
  EXPECT_TRUE(absl::IsInvalidArgument(old.status())) << old.status();
}

TEST(CudaNvrtcTest, SecondCompileHitsTheKernelCache) {
  SKIP_WITHOUT_NVRTC();
  const fs::path dir = fs::temp_directory_path() /
                       absl::StrCat("stepjit_nvrtc_cache_", getpid());
  fs::remove_all(dir);
  absl::StatusOr<RegionSource> src =
      EmitSingleOp(OpId::kGelu, {{DType::kBF16, {4096}}});
  ASSERT_TRUE(src.ok()) << src.status();
  std::string cubin;
  {
    KernelCache cache({.disk_dir = dir.string()});
    const NvrtcOptions options{
        .arch = "sm_90", .want_ptx = true, .cache = &cache};
    absl::StatusOr<CompiledCuda> cold =
        CompileCuda(src->source, src->name, options);
    ASSERT_TRUE(cold.ok()) << cold.status();
    EXPECT_FALSE(cold->cache_hit);
    absl::StatusOr<CompiledCuda> warm =
        CompileCuda(src->source, src->name, options);
    ASSERT_TRUE(warm.ok()) << warm.status();
    EXPECT_TRUE(warm->cache_hit);
    EXPECT_EQ(warm->cubin, cold->cubin);
    EXPECT_EQ(warm->ptx, cold->ptx);
    EXPECT_EQ(cache.stats().memory_hits, 2);  // cubin and PTX
    EXPECT_EQ(cache.stats().stores, 2);
    std::printf("NVRTC gelu bf16 sm_90: cold %.1f ms, cached %.3f ms\n",
                cold->compile_ms, warm->compile_ms);
    // Another arch is another kernel.
    absl::StatusOr<CompiledCuda> sm80 =
        CompileCuda(src->source, src->name, {.arch = "sm_80", .cache = &cache});
    ASSERT_TRUE(sm80.ok()) << sm80.status();
    EXPECT_FALSE(sm80->cache_hit);
    cubin = cold->cubin;
  }
  // A later process (a fresh cache on the same directory) loads from disk.
  KernelCache again({.disk_dir = dir.string()});
  absl::StatusOr<CompiledCuda> disk =
      CompileCuda(src->source, src->name, {.arch = "sm_90", .cache = &again});
  ASSERT_TRUE(disk.ok()) << disk.status();
  EXPECT_TRUE(disk->cache_hit);
  EXPECT_EQ(disk->cubin, cubin);
  EXPECT_EQ(again.stats().disk_hits, 1);
  fs::remove_all(dir);
}

TEST(CudaNvrtcTest, CompilerIdAndFlags) {
  SKIP_WITHOUT_NVRTC();
  EXPECT_TRUE(absl::StartsWith(NvrtcCompilerId(), "NVRTC 1"))
      << NvrtcCompilerId();
  const std::vector<std::string> archs = NvrtcSupportedArchs();
  for (const char* arch : kArchs) {
    EXPECT_NE(std::find(archs.begin(), archs.end(), arch), archs.end()) << arch;
  }
  const std::vector<std::string> flags = NvrtcFlags("sm_90");
  EXPECT_NE(std::find(flags.begin(), flags.end(), "--fmad=false"), flags.end());
  EXPECT_NE(std::find(flags.begin(), flags.end(), "--gpu-architecture=sm_90"),
            flags.end());
  for (const std::string& f : flags)
    EXPECT_FALSE(absl::StrContains(f, "fast_math")) << f;
}

// The CUDA headers are found at run time: the first candidate with both
// cuda_fp16.h and cuda_bf16.h, or an error naming every place looked at and
// what it lacked.
TEST(CudaHeaderSearchTest, TakesTheFirstDirectoryWithBothHeaders) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() /
                        absl::StrCat("stepjit_cuda_headers_", getpid());
  fs::remove_all(root);
  const fs::path none = root / "none", half = root / "half",
                 both = root / "both", missing = root / "missing";
  for (const fs::path& d : {none, half, both}) fs::create_directories(d);
  std::ofstream(half / "cuda_fp16.h") << "// fp16\n";
  std::ofstream(both / "cuda_fp16.h") << "// fp16\n";
  std::ofstream(both / "cuda_bf16.h") << "// bf16\n";
  const CudaHeaders found = FindCudaHeaders(
      {missing.string(), none.string(), half.string(), both.string()});
  EXPECT_EQ(found.dir, both.string());
  EXPECT_EQ(found.tried,
            (std::vector<std::string>{missing.string(), none.string(),
                                      half.string(), both.string()}));
  EXPECT_EQ(found.error, "");

  const CudaHeaders lost =
      FindCudaHeaders({missing.string(), none.string(), half.string()});
  EXPECT_EQ(lost.dir, "");
  EXPECT_EQ(lost.tried.size(), 3u);
  EXPECT_TRUE(absl::StrContains(
      lost.error,
      absl::StrCat(missing.string(), " (no cuda_fp16.h, no cuda_bf16.h)")))
      << lost.error;
  EXPECT_TRUE(absl::StrContains(
      lost.error, absl::StrCat(half.string(), " (no cuda_bf16.h)")))
      << lost.error;
  EXPECT_TRUE(absl::StrContains(lost.error, "STEPJIT_CUDA_INCLUDE"))
      << lost.error;
  EXPECT_TRUE(absl::StrContains(FindCudaHeaders({}).error, "none"));
  fs::remove_all(root);
}

// Sets an environment variable while alive, then puts back what was there.
class ScopedSetEnv {
 public:
  ScopedSetEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedSetEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(CudaHeaderSearchTest, CandidatesStartWithTheVariableAndIncludeTheToolkit) {
  std::vector<std::string> c;
  {
    ScopedSetEnv include("STEPJIT_CUDA_INCLUDE", "/opt/my-cuda/include");
    ScopedSetEnv home("CUDA_HOME", "/opt/cuda-home");
    c = CudaHeaderCandidates();
  }
  ASSERT_FALSE(c.empty());
  EXPECT_EQ(c.front(), "/opt/my-cuda/include");
  const auto home = std::find(c.begin(), c.end(), "/opt/cuda-home/include");
  const auto local = std::find(c.begin(), c.end(), "/usr/local/cuda/include");
  ASSERT_NE(home, c.end());
  ASSERT_NE(local, c.end());
  EXPECT_LT(home, local);
  // The bundle's include/, beside the directory of this executable.
  const std::string bundle = (std::filesystem::read_symlink("/proc/self/exe")
                                  .parent_path()
                                  .parent_path() /
                              "include")
                                 .string();
  EXPECT_NE(std::find(c.begin(), c.end(), bundle), c.end());
  for (size_t i = 0; i < c.size(); ++i) {
    for (size_t j = i + 1; j < c.size(); ++j) EXPECT_NE(c[i], c[j]);
  }
}

TEST(CudaHeaderSearchTest, TheFoundHeadersAreWhatNvrtcIsGiven) {
  SKIP_WITHOUT_NVRTC();
  const CudaHeaders& found = FoundCudaHeaders();
  ASSERT_NE(found.dir, "") << found.error;
  const std::vector<std::string> flags = NvrtcFlags("sm_90");
  EXPECT_NE(std::find(flags.begin(), flags.end(), "-I" + found.dir),
            flags.end());
}

}  // namespace
}  // namespace stepjit::codegen::cuda
