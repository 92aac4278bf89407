// CUDA C generated for fusion regions: launch shapes, what is refused, and
// the STEPJIT_DUMP helper, for the golden regions in tests/ir/emit/cuda/*.ir
// (whose text lit checks there with FileCheck). Needs no GPU; compiling the
// text is cuda_nvrtc_test.cc's job.
#include "codegen/cuda/cuda_emitter.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "codegen/cuda/cuda_math.h"
#include "codegen/cuda/dump.h"
#include "codegen/cuda/single_op.h"
#include "codegen/kernel_cache.h"
#include "gtest/gtest.h"
#include "ir/parser.h"
#include "ir/scalar_def.h"
#include "tests/codegen/cuda_test_util.h"

namespace stepjit::codegen::cuda {
namespace {

namespace fs = std::filesystem;
using test::ReadFile;
using ir::DType;
using ir::OpId;

const fs::path& kGoldenDir = test::GoldenDir();

std::unique_ptr<ir::Graph> Parse(const std::string& text) {
  auto g = ir::ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *std::move(g) : nullptr;
}

absl::StatusOr<RegionSource> EmitGolden(const std::string& file) {
  auto g = Parse(ReadFile(kGoldenDir / file));
  if (g == nullptr) return absl::InvalidArgumentError(file);
  return EmitRegion(*g);
}

// A scratch directory under the system temp dir, removed on destruction.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag)
      : path(fs::temp_directory_path() /
             absl::StrCat("stepjit_", tag, "_", getpid())) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

TEST(CudaEmitterTest, BroadcastChainIsOneGridStrideKernel) {
  absl::StatusOr<RegionSource> src = EmitGolden("bias_relu_mask.ir");
  ASSERT_TRUE(src.ok()) << src.status();
  // The 0-d constant is inlined: no scalar kernel, no scratch.
  ASSERT_EQ(src->kernels.size(), 1u);
  EXPECT_TRUE(absl::EndsWith(src->kernels[0].name, "_main"));
  EXPECT_TRUE(absl::StartsWith(src->name, "bias_relu_"));
  EXPECT_EQ(src->kernels[0].block, 256);
  EXPECT_EQ(src->kernels[0].grid, (64 * 33 + 255) / 256);
  EXPECT_EQ(src->num_slots, 0);
  EXPECT_EQ(src->strategy, ReductionStrategy::kNone);
  EXPECT_FALSE(src->index64);
  EXPECT_EQ(src->helpers, 0u);
  EXPECT_FALSE(absl::StrContains(src->source, "#include"));
}

TEST(CudaEmitterTest, ScalarPrologueFeedsTheMainKernelThroughScratch) {
  absl::StatusOr<RegionSource> src = EmitGolden("adamw.ir");
  ASSERT_TRUE(src.ok()) << src.status();
  ASSERT_EQ(src->kernels.size(), 2u);
  EXPECT_TRUE(absl::EndsWith(src->kernels[0].name, "_scalar"));
  EXPECT_EQ(src->kernels[0].grid, 1);
  EXPECT_EQ(src->kernels[0].block, 1);
  EXPECT_TRUE(absl::EndsWith(src->kernels[1].name, "_main"));
  EXPECT_EQ(src->num_slots,
            1);  // the f64 bias correction; constants are inlined
}

TEST(CudaEmitterTest, ColumnSumUsesPartialsPerThreadAndAReducedKernel) {
  absl::StatusOr<RegionSource> src = EmitGolden("bias_grad_lerp.ir");
  ASSERT_TRUE(src.ok()) << src.status();
  ASSERT_EQ(src->kernels.size(), 2u);
  EXPECT_TRUE(absl::EndsWith(src->kernels[1].name, "_reduced"));
  EXPECT_EQ(src->strategy, ReductionStrategy::kThreadPerOutput);
  EXPECT_EQ(src->reduced_numel, 40);
  EXPECT_EQ(src->num_accumulators, 1);
  // 128 rows in chunks of 32: four partials per column, combined in order.
  EXPECT_EQ(src->chunks, 4);
  EXPECT_EQ(src->partials, 160);
  EXPECT_EQ(src->kernels[1].grid, 1);
}

TEST(CudaEmitterTest, RowReductionsUseABlockPerRow) {
  absl::StatusOr<RegionSource> src = EmitGolden("row_reductions.ir");
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ(src->strategy, ReductionStrategy::kBlockPerRow);
  EXPECT_EQ(src->num_accumulators, 3);
  EXPECT_EQ(src->chunks, 1);
  EXPECT_EQ(src->kernels[0].grid, 300);
  EXPECT_EQ(src->helpers, static_cast<uint32_t>(kHelperReduce));
  // A full reduction of a large tensor splits each row over many blocks.
  auto g = Parse(R"(
graph @norm(%p0: f32[4096,4096] input) {
  %0 = mul %p0, %p0 : f32[4096,4096]
  %1 = sum %0 {dims = [], keepdim = false} : f32[]
  %2 = sqrt %1 : f32[]
  return %2
})");
  ASSERT_NE(g, nullptr);
  absl::StatusOr<RegionSource> norm = EmitRegion(*g);
  ASSERT_TRUE(norm.ok()) << norm.status();
  EXPECT_EQ(norm->strategy, ReductionStrategy::kBlockPerRow);
  EXPECT_EQ(norm->reduced_numel, 1);
  EXPECT_EQ(norm->chunks, 1024);
  // No kept dims: the chunk is all a block needs to know.
  EXPECT_TRUE(absl::StrContains(norm->source, "const sj_index c = b % 1024;"));
  EXPECT_FALSE(absl::StrContains(norm->source, "const sj_index r = b"));
  EXPECT_TRUE(absl::StrContains(
      norm->source,
      "for (sj_index c = 1; c < 1024; ++c) a0 += acc0[r * 1024 + c];"));
}

TEST(CudaEmitterTest, IndicesAre64BitOnlyWhenNumelNeedsIt) {
  absl::StatusOr<RegionSource> huge = EmitGolden("huge_index64.ir");
  ASSERT_TRUE(huge.ok()) << huge.status();
  EXPECT_TRUE(huge->index64);
  EXPECT_EQ(huge->kernels[0].grid, 1 << 16);  // grid-stride over 2^32 elements
  absl::StatusOr<RegionSource> small = EmitGolden("bf16_cast_chain.ir");
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_FALSE(small->index64);
  EXPECT_TRUE(absl::StrContains(small->source, "typedef int sj_index;"));
}

TEST(CudaEmitterTest, RegionsItCannotLowerAreUnimplementedWithAReason) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {R"(graph @column_softmax_like(%p0: f32[4,8] input) {
  %0 = amax %p0 {dims = [0], keepdim = true} : f32[1,8]
  %1 = sub %p0, %0 : f32[4,8]
  %2 = exp %1 : f32[4,8]
  return %2
})",
       "a reduced value broadcast back over the region"},
      {R"(graph @two_dims(%p0: f32[4,8] input) {
  %0 = sum %p0 {dims = [0], keepdim = false} : f32[8]
  %1 = sum %p0 {dims = [1], keepdim = false} : f32[4]
  return %0, %1
})",
       "reductions over different shapes or dims"},
      {R"(graph @ints(%p0: i64[16] input) {
  %0 = add %p0, %p0 : i64[16]
  return %0
})",
       "integer arithmetic (add)"},
      {R"(graph @int_sum(%p0: i32[16] input) {
  %0 = sum %p0 {dims = [], keepdim = false} : i64[]
  return %0
})",
       "a reduction of non-float values"},
      {R"(graph @norm(%p0: f32[4,8] input) {
  %0 = softmax %p0 {dim = 0} : f32[4,8]
  return %0
})",
       "op softmax"},
      {R"(graph @tiny(%p0: f32[1] input) {
  %0 = exp %p0 : f32[1]
  return %0
})",
       "one-element"}};
  for (const auto& [text, reason] : cases) {
    auto g = Parse(text);
    ASSERT_NE(g, nullptr);
    absl::StatusOr<RegionSource> src = EmitRegion(*g);
    EXPECT_TRUE(absl::IsUnimplemented(src.status())) << text << "\n"
                                                     << src.status();
    EXPECT_TRUE(absl::StrContains(src.status().message(), reason))
        << src.status();
  }
}

TEST(CudaEmitterTest, SameBodySameSourceAndNames) {
  const std::string text = ReadFile(kGoldenDir / "bias_grad_lerp.ir");
  auto a = Parse(text), b = Parse(text);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  absl::StatusOr<RegionSource> x = EmitRegion(*a), y = EmitRegion(*b);
  ASSERT_TRUE(x.ok() && y.ok());
  EXPECT_EQ(x->source, y->source);
  EXPECT_EQ(x->name, y->name);
  absl::StatusOr<RegionSource> z = EmitRegion(*a, {.block = 128});
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_NE(z->name,
            x->name);  // the block size shapes the code, hence the name
  EXPECT_TRUE(absl::IsInvalidArgument(EmitRegion(*a, {.block = 100}).status()));
}

TEST(CudaEmitterTest, SingleOpKernels) {
  // An elementwise op with a 0-d operand: the scalar goes through a slot.
  absl::StatusOr<RegionSource> mul =
      EmitSingleOp(OpId::kMul, {{DType::kF16, {1000}}, {DType::kF16, {}}});
  ASSERT_TRUE(mul.ok()) << mul.status();
  EXPECT_TRUE(absl::StartsWith(mul->name, "mul_f16_f16_"));
  EXPECT_EQ(mul->kernels.size(), 2u);
  EXPECT_EQ(mul->num_slots, 1);
  // One element: all scalar work, one thread.
  absl::StatusOr<RegionSource> one =
      EmitSingleOp(OpId::kExp, {{DType::kF32, {1}}});
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->kernels.size(), 1u);
  EXPECT_TRUE(absl::EndsWith(one->kernels[0].name, "_scalar"));
  EXPECT_TRUE(absl::StrContains(one->source, "r0[0] = v0;")) << one->source;
  // A reduction with keepdim.
  absl::StatusOr<RegionSource> amax =
      EmitSingleOp(OpId::kAmax, {{DType::kBF16, {32, 300}}},
                   {{ir::AttrKey::kDims, std::vector<int64_t>{1}},
                    {ir::AttrKey::kKeepdim, true}});
  ASSERT_TRUE(amax.ok()) << amax.status();
  EXPECT_EQ(amax->strategy, ReductionStrategy::kBlockPerRow);
  EXPECT_TRUE(absl::StrContains(amax->source, "sj_block_amax"));
  // Types that do not fit the op are the caller's error.
  EXPECT_TRUE(absl::IsInvalidArgument(
      EmitSingleOp(OpId::kAdd, {{DType::kF32, {3}}, {DType::kF32, {4}}})
          .status()));
}

TEST(CudaEmitterTest, CombinedSourcesShareHelpersOnce) {
  absl::StatusOr<RegionSource> a = EmitGolden("row_reductions.ir");
  absl::StatusOr<RegionSource> b = EmitGolden("bias_grad_lerp.ir");
  absl::StatusOr<RegionSource> c = EmitGolden("bf16_cast_chain.ir");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  const std::string all = CombineSources({&*a, &*b, &*c});
  auto count = [&](const std::string& needle) {
    int n = 0;
    for (size_t p = all.find(needle); p != std::string::npos;
         p = all.find(needle, p + 1))
      ++n;
    return n;
  };
  EXPECT_EQ(count("double sj_block_sum(double v)"), 1);
  EXPECT_EQ(count("#include <cuda_bf16.h>"), 1);
  EXPECT_EQ(count("#include <cuda_fp16.h>"), 0);
  EXPECT_EQ(count("extern \"C\" __global__"), 5);
}

// CudaMath spells scalar_def.h's primitives; operands used twice are bound
// to temporaries so nested definitions never duplicate an expression.
TEST(CudaEmitterTest, CudaMathSpellsPrimitivesAsCExpressions) {
  EXPECT_EQ(CudaLiteral(1.0, false), "1.0f");
  EXPECT_EQ(CudaLiteral(0.1, false), "0.100000001f");
  EXPECT_EQ(CudaLiteral(0.1, true), "0.10000000000000001");
  EXPECT_EQ(CudaLiteral(-2.5, true), "(-2.5)");
  EXPECT_EQ(CudaLiteral(1e-5, false), "9.99999975e-06f");
  EXPECT_EQ(CudaLiteral(-std::numeric_limits<double>::infinity(), false),
            "(-__int_as_float(0x7f800000))");
  EXPECT_EQ(CudaLiteral(std::nan(""), true),
            "__longlong_as_double(0x7ff8000000000000LL)");
  CudaStatements s;
  CudaMath f{s, false}, d{s, true};
  EXPECT_EQ(f.Add("x", "y"), "(x + y)");
  EXPECT_EQ(f.Exp("x"), "expf(x)");
  EXPECT_EQ(d.Exp("x"), "exp(x)");
  EXPECT_EQ(d.Pow("x", "y"), "pow(x, y)");
  EXPECT_EQ(ir::ScalarDef<OpId::kRelu>::Apply(f, "x"),
            "((x != x || x > 0.0f) ? x : 0.0f)");
  EXPECT_TRUE(s.text.empty());
  EXPECT_EQ(ir::ScalarDef<OpId::kMaximum>::Apply(f, f.Exp("x"), "y"),
            "((t0 != t0 || t0 > y) ? t0 : y)");
  EXPECT_EQ(s.text, "  const float t0 = expf(x);\n");
  EXPECT_EQ(ir::ScalarDef<OpId::kSigmoid>::Apply(d, "x"),
            "(1.0 / (1.0 + exp((-x))))");
}

TEST(CudaEmitterTest, DumpWritesTheSourceAndOptionallyPtx) {
  TempDir tmp("cuda_dump");
  absl::StatusOr<RegionSource> src = EmitGolden("bias_relu_mask.ir");
  ASSERT_TRUE(src.ok()) << src.status();
  const fs::path dir = tmp.path / "dump";
  ASSERT_TRUE(DumpRegion(dir.string(), *src).ok());
  EXPECT_EQ(ReadFile(dir / (src->name + ".cu")), src->source);
  EXPECT_FALSE(fs::exists(dir / (src->name + ".ptx")));
  ASSERT_TRUE(DumpCudaKernel(dir.string(), "k", "// source", "// ptx").ok());
  EXPECT_EQ(ReadFile(dir / "k.cu"), "// source");
  EXPECT_EQ(ReadFile(dir / "k.ptx"), "// ptx");
  KernelCache cache(
      CacheOptions{});  // memory only: tests leave no cache entries behind
  NvrtcOptions ptx{.arch = "sm_90", .cache = &cache};
  ASSERT_TRUE(DumpRegion(dir.string(), *src, &ptx).ok());
  if (NvrtcAvailable()) {
    const std::string text = ReadFile(dir / (src->name + ".ptx"));
    EXPECT_TRUE(absl::StrContains(text, ".target sm_90"))
        << text.substr(0, 400);
    EXPECT_TRUE(
        absl::StrContains(text, absl::StrCat(".entry ", src->kernels[0].name)));
  }
  // An unwritable directory is an error naming the path.
  const fs::path file = tmp.path / "a_file";
  std::ofstream(file) << "x";
  absl::Status st = DumpCudaKernel((file / "sub").string(), "k", "x");
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(absl::StrContains(st.message(), "STEPJIT_DUMP")) << st;
}

}  // namespace
}  // namespace stepjit::codegen::cuda
