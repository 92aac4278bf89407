// Generated region kernels (LLVM ORC) against the eager kernels: op by op in
// every float dtype, broadcasts, reductions with epilogues, scalar prologues,
// and the kernel cache across processes.
#include "codegen/cpu/region_kernel.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "codegen/kernel_cache.h"
#include "gtest/gtest.h"
#include "ir/parser.h"
#include "program/cpu/cpu_backend.h"
#include "program/executor.h"
#include "runtime/dispatch.h"
#include "runtime/ops.h"

namespace stepjit::codegen::cpu {
namespace {

using ir::DType;
using ir::OpId;

// Region body `op(p0[, p1])` over n elements of `dt`; p1 may be 0-d.
std::unique_ptr<ir::Graph> Body(OpId op, int arity, int64_t n, bool scalar_b, DType dt, DType out) {
  auto g = std::make_unique<ir::Graph>("body");
  std::vector<ir::Value*> in = {g->AddParam("p0", {dt, {n}}, ir::ParamKind::kInput)};
  if (arity == 2) {
    in.push_back(g->AddParam("p1", {dt, scalar_b ? ir::Shape{} : ir::Shape{n}}, ir::ParamKind::kInput));
  }
  ir::Node* node = g->AddOp(op, in, {}, {out, {n}});
  g->SetReturns({node->output()});
  return g;
}

// Runs `k` on `args`, returning freshly allocated outputs of `types`.
std::vector<Tensor> RunKernel(const RegionKernel& k, const std::vector<Tensor>& args,
                        const std::vector<ir::TensorType>& types) {
  std::vector<void*> ptrs;
  for (const Tensor& a : args) ptrs.push_back(a.data_ptr());
  std::vector<Tensor> out;
  for (const ir::TensorType& t : types) {
    out.push_back(empty(t.shape, {.dtype = t.dtype}));
    ptrs.push_back(out.back().data_ptr());
  }
  runtime::cpu::RunRegionKernel(k, ptrs);
  return out;
}

std::vector<ir::TensorType> ReturnTypes(const ir::Graph& g) {
  std::vector<ir::TensorType> t;
  for (const ir::Value* r : g.returns()) t.push_back(r->type());
  return t;
}

bool SameBits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(),
                     static_cast<size_t>(a.numel() * a.element_size())) == 0;
}

double MaxAbsDiff(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to(DType::kF64).to_vector<double>();
  std::vector<double> y = b.to(DType::kF64).to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

std::unique_ptr<ir::Graph> Parse(const std::string& text) {
  auto g = ir::ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *std::move(g) : nullptr;
}

// Every elementwise op in every float dtype: the generated kernel gives the
// eager result bit for bit, since both evaluate the same scalar definition
// in the same precision (f32 for f16/bf16, rounded after the op) with the
// same exp, log, tanh and erf (ir/poly_math.h) and the same libm calls.
TEST(RegionKernelTest, EveryUnaryAndBinaryOpMatchesEagerInEveryFloatDType) {
  const std::vector<OpId> unary = {OpId::kNeg, OpId::kAbs, OpId::kSign, OpId::kExp, OpId::kLog,
                                   OpId::kSqrt, OpId::kRsqrt, OpId::kReciprocal, OpId::kTanh,
                                   OpId::kErf, OpId::kSigmoid, OpId::kRelu, OpId::kGelu,
                                   OpId::kGeluTanh, OpId::kSin, OpId::kCos};
  const std::vector<OpId> binary = {OpId::kAdd, OpId::kSub, OpId::kMul, OpId::kDiv,
                                    OpId::kPow, OpId::kMaximum, OpId::kMinimum};
  const std::vector<OpId> compare = {OpId::kEq, OpId::kNe, OpId::kLt,
                                     OpId::kLe, OpId::kGt, OpId::kGe};
  for (DType dt : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) {
    for (int64_t n : {1, 7, 1025}) {
      Generator gen(static_cast<uint64_t>(n));
      Tensor a = (randn({n}, {}, &gen) * 2.0).to(dt), b = (rand({n}, {}, &gen) + 0.5).to(dt);
      Tensor b0 = scalar_tensor(1.25).to(dt);
      auto check = [&](OpId op, int arity, bool scalar_b, DType out) {
        auto body = Body(op, arity, n, scalar_b, dt, out);
        absl::StatusOr<RegionKernel> k = CompileRegion(*body);
        if (n == 1) {  // a one-element region is not worth a kernel
          EXPECT_TRUE(absl::IsUnimplemented(k.status())) << k.status();
          return;
        }
        ASSERT_TRUE(k.ok()) << ir::OpName(op) << ": " << k.status();
        std::vector<Tensor> args = {a};
        if (arity == 2) args.push_back(scalar_b ? b0 : b);
        Tensor expect = runtime::Dispatch(op, args);
        Tensor got = RunKernel(*k, args, ReturnTypes(*body))[0];
        EXPECT_TRUE(SameBits(got, expect))
            << ir::OpName(op) << " " << ir::DTypeName(dt) << " n=" << n
            << (scalar_b ? " (0-d operand)" : "") << " max diff " << MaxAbsDiff(got, expect);
      };
      for (OpId op : unary) check(op, 1, false, dt);
      for (OpId op : binary) {
        check(op, 2, false, dt);
        check(op, 2, true, dt);
      }
      for (OpId op : compare) check(op, 2, false, DType::kBool);
    }
  }
}

// A bias add and ReLU over rows, with a [C] and a [R,1] operand broadcast,
// a cast to bf16 and a bool mask: row loops with broadcast offsets.
TEST(RegionKernelTest, BroadcastOperandsAndCastsMatchEager) {
  for (int64_t rows : {3, 64}) {
    for (int64_t cols : {1, 7, 33}) {
      auto g = Parse(absl::StrReplaceAll(R"(
graph @bcast(%p0: f32[R,C] input, %p1: f32[C] input, %p2: f32[R,1] input) {
  %0 = add %p0, %p1 : f32[R,C]
  %1 = mul %0, %p2 : f32[R,C]
  %2 = relu %1 : f32[R,C]
  %3 = full {shape = [], value = 0.0, dtype = f32} : f32[]
  %4 = gt %2, %3 : bool[R,C]
  %5 = cast %2 {dtype = bf16} : bf16[R,C]
  return %2, %4, %5
})",
                                           {{"R", absl::StrCat(rows)}, {"C", absl::StrCat(cols)}}));
      ASSERT_NE(g, nullptr);
      absl::StatusOr<RegionKernel> k = CompileRegion(*g);
      if (rows * cols == 1) continue;
      ASSERT_TRUE(k.ok()) << k.status();
      Generator gen(7);
      Tensor x = randn({rows, cols}, {}, &gen), bias = randn({cols}, {}, &gen),
             scale = randn({rows, 1}, {}, &gen);
      std::vector<Tensor> got = RunKernel(*k, {x, bias, scale}, ReturnTypes(*g));
      Tensor y = relu((x + bias) * scale);
      EXPECT_TRUE(SameBits(got[0], y)) << rows << "x" << cols;
      EXPECT_TRUE(SameBits(got[1], gt(y, scalar_tensor(0.0)))) << rows << "x" << cols;
      EXPECT_TRUE(SameBits(got[2], y.to(DType::kBF16))) << rows << "x" << cols;
    }
  }
}

// Integer arithmetic in two's complement, as the eager kernels: i64 and i32
// (promoted to i64 where they meet), a constant, comparisons, where and
// casts to float, over values near the ends of the i64 range (wrapping).
TEST(RegionKernelTest, IntegerArithmeticMatchesEager) {
  auto g = Parse(R"(
graph @ints(%p0: i64[5,7] input, %p1: i32[7] input, %p2: i64[5,7] input) {
  %0 = add %p0, %p1 : i64[5,7]
  %1 = full {shape = [], value = 3.0, dtype = i64} : i64[]
  %2 = mul %0, %1 : i64[5,7]
  %3 = sub %2, %p2 : i64[5,7]
  %4 = neg %3 : i64[5,7]
  %5 = maximum %4, %p0 : i64[5,7]
  %6 = minimum %5, %p2 : i64[5,7]
  %7 = gt %6, %p0 : bool[5,7]
  %8 = where %7, %6, %p2 : i64[5,7]
  %9 = cast %8 {dtype = f32} : f32[5,7]
  %10 = le %0, %p2 : bool[5,7]
  %11 = lt %p0, %p2 : bool[5,7]
  %12 = ge %p0, %p2 : bool[5,7]
  %13 = eq %p0, %p2 : bool[5,7]
  %14 = ne %p0, %p2 : bool[5,7]
  return %8, %9, %10, %7, %11, %12, %13, %14
})");
  ASSERT_NE(g, nullptr);
  absl::StatusOr<RegionKernel> k = CompileRegion(*g);
  ASSERT_TRUE(k.ok()) << k.status();
  std::vector<int64_t> a, b, c;
  std::mt19937_64 rng(5);
  for (int i = 0; i < 35; ++i) {
    const int64_t big = std::numeric_limits<int64_t>::max() - (i % 3);
    a.push_back(i % 4 == 0 ? big : static_cast<int64_t>(rng() % 2001) - 1000);
    c.push_back(i % 5 == 0   ? -big
                : i % 7 == 3 ? a.back()
                             : static_cast<int64_t>(rng() % 2001) - 1000);
  }
  for (int i = 0; i < 7; ++i)
    b.push_back(static_cast<int64_t>(rng() % 21) - 10);
  const Tensor x = from_vector(a, {5, 7}), z = from_vector(c, {5, 7});
  const Tensor y = from_vector(b, {7}).to(DType::kI32);
  std::vector<Tensor> got = RunKernel(*k, {x, y, z}, ReturnTypes(*g));
  const Tensor three = full({}, 3.0, {.dtype = DType::kI64});
  const Tensor v6 = minimum(maximum(-((x + y) * three - z), x), z);
  const Tensor v8 = where(gt(v6, x), v6, z);
  EXPECT_TRUE(SameBits(got[0], v8));
  EXPECT_TRUE(SameBits(got[1], v8.to(DType::kF32)));
  EXPECT_TRUE(SameBits(got[2], le(x + y, z)));
  EXPECT_TRUE(SameBits(got[3], gt(v6, x)));
  EXPECT_TRUE(SameBits(got[4], lt(x, z)));
  EXPECT_TRUE(SameBits(got[5], ge(x, z)));
  EXPECT_TRUE(SameBits(got[6], eq(x, z)));
  EXPECT_TRUE(SameBits(got[7], ne(x, z)));
}

// The bias-gradient pattern of the MLP backward: a masked gradient, its
// column sum, and an SGD-momentum update of the buffer from that sum.
TEST(RegionKernelTest, ColumnReductionWithEpilogueMatchesEagerExactly) {
  auto g = Parse(R"(
graph @bgrad(%p0: bool[128,40] input, %p1: f32[128,40] input, %p2: f32[40] input) {
  %0 = full {shape = [], value = 0.0, dtype = f32} : f32[]
  %1 = where %p0, %p1, %0 : f32[128,40]
  %2 = sum %1 {dims = [0], keepdim = true} : f32[1,40]
  %3 = reshape %2 {shape = [40]} : f32[40]
  %4 = full {shape = [], value = 0.1, dtype = f32} : f32[]
  %5 = lerp_ %p2, %3, %4 {in_place = true} : f32[40]
  return %1, %3, %5
})");
  ASSERT_NE(g, nullptr);
  absl::StatusOr<RegionKernel> k = CompileRegion(*g);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_FALSE(k->parallel);  // accumulates across rows
  Generator gen(3);
  Tensor mask = gt(randn({128, 40}, {}, &gen), scalar_tensor(0.0));
  Tensor grad = randn({128, 40}, {}, &gen), buf = randn({40}, {}, &gen);
  std::vector<Tensor> got = RunKernel(*k, {mask, grad, buf}, ReturnTypes(*g));
  Tensor masked = where(mask, grad, scalar_tensor(0.0));
  Tensor bsum = sum(masked, {0});
  Tensor expect_buf = buf.clone();
  expect_buf.lerp_(bsum, 0.1);
  EXPECT_TRUE(SameBits(got[0], masked));
  // Both accumulate rows in order in double.
  EXPECT_TRUE(SameBits(got[1], bsum)) << MaxAbsDiff(got[1], bsum);
  EXPECT_TRUE(SameBits(got[2], expect_buf));
}

// Row reductions (last dim) run in parallel over rows and vectorize, so the
// summation order differs from eager's: equal within f32 rounding of a
// double-accumulated sum. amax and mean, and a full reduction to 0-d.
TEST(RegionKernelTest, RowAndFullReductionsMatchEagerWithinRounding) {
  for (int64_t rows : {5, 300}) {
    for (int64_t cols : {3, 1000}) {
      const auto subst = absl::flat_hash_map<std::string, std::string>{
          {"R", absl::StrCat(rows)}, {"C", absl::StrCat(cols)}};
      auto g = Parse(absl::StrReplaceAll(R"(
graph @rows(%p0: f32[R,C] input) {
  %0 = exp %p0 : f32[R,C]
  %1 = sum %0 {dims = [1], keepdim = false} : f32[R]
  %2 = mean %0 {dims = [1], keepdim = true} : f32[R,1]
  %3 = amax %p0 {dims = [-1], keepdim = false} : f32[R]
  %4 = log %1 : f32[R]
  return %0, %4, %2, %3
})", subst));
      ASSERT_NE(g, nullptr);
      absl::StatusOr<RegionKernel> k = CompileRegion(*g);
      ASSERT_TRUE(k.ok()) << k.status();
      EXPECT_TRUE(k->parallel);
      EXPECT_EQ(k->split_align, cols);
      Generator gen(11);
      Tensor x = randn({rows, cols}, {}, &gen);
      std::vector<Tensor> got = RunKernel(*k, {x}, ReturnTypes(*g));
      Tensor e = exp(x);
      EXPECT_TRUE(SameBits(got[0], e));
      // Relative 1e-6: a double sum rounded to f32 may differ by one ulp.
      Tensor lse = log(sum(e, {1}));
      EXPECT_LE(MaxAbsDiff(got[1], lse), 1e-6 * (1 + std::log(static_cast<double>(cols)) + 3));
      Tensor m = mean(e, {1}, true);
      EXPECT_LE(MaxAbsDiff(got[2], m), 1e-6 * MaxAbsDiff(m, zeros_like(m)));
      EXPECT_TRUE(SameBits(got[3], amax(x, {-1})));
    }
  }
  auto g = Parse(R"(
graph @all(%p0: f32[37,29] input) {
  %0 = mul %p0, %p0 : f32[37,29]
  %1 = sum %0 {dims = [], keepdim = false} : f32[]
  %2 = sqrt %1 : f32[]
  return %2
})");
  ASSERT_NE(g, nullptr);
  absl::StatusOr<RegionKernel> k = CompileRegion(*g);
  ASSERT_TRUE(k.ok()) << k.status();
  Generator gen(5);
  Tensor x = randn({37, 29}, {}, &gen);
  const double norm = RunKernel(*k, {x}, ReturnTypes(*g))[0].item();
  double ref = 0;
  for (double v : x.to(DType::kF64).to_vector<double>()) ref += v * v;
  EXPECT_NEAR(norm, std::sqrt(ref), 1e-6 * std::sqrt(ref));
}

// Regions compile on several threads at once (Program::Build splits them
// across the pool): each thread lowers into its own LLVM context, and a body
// several threads ask for at the same time is compiled once and shared.
// The body's constant is unique to this process and run (exact in the six
// digits the IR text keeps), so no cache holds it.
TEST(RegionKernelTest, ConcurrentCompilesOfOneBodyCompileItOnceAndAllWork) {
  // A constant no earlier run can have left in the disk kernel cache (with
  // one of only 997 values, earlier runs' entries made this test fail now
  // and then): one of 2^40, drawn per run.
  const double c =
      1.0 + static_cast<double>(std::random_device{}() % (uint64_t{1} << 20) *
                                    (uint64_t{1} << 20) +
                                std::random_device{}() % (uint64_t{1} << 20)) /
                static_cast<double>(uint64_t{1} << 41);
  const std::string text =
      absl::StrCat(R"(
graph @concurrent(%p0: f32[1000] input) {
  %0 = full {shape = [], value = )",
                   absl::StrFormat("%.17g", c), R"(, dtype = f32} : f32[]
  %1 = mul %p0, %0 : f32[1000]
  %2 = exp %1 : f32[1000]
  return %2
})");
  constexpr int kThreads = 6;
  std::vector<std::unique_ptr<ir::Graph>> graphs;
  for (int t = 0; t < kThreads; ++t) {
    graphs.push_back(Parse(text));
    ASSERT_NE(graphs.back(), nullptr);
  }
  std::vector<absl::StatusOr<RegionKernel>> kernels(
      kThreads, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] { kernels[t] = CompileRegion(*graphs[t]); });
  }
  for (std::thread& th : threads) th.join();
  Generator gen(11);
  const Tensor x = rand({1000}, {}, &gen);
  const std::vector<float> xs = x.to_vector<float>();
  int compiled = 0;
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_TRUE(kernels[t].ok()) << kernels[t].status();
    compiled += kernels[t]->cache_hit ? 0 : 1;
    const std::vector<float> got =
        RunKernel(*kernels[t], {x}, ReturnTypes(*graphs[t]))[0]
            .to_vector<float>();
    for (size_t i = 0; i < xs.size(); ++i) {
      const double want = std::exp(static_cast<double>(
          static_cast<float>(xs[i] * static_cast<float>(c))));
      ASSERT_NEAR(got[i], want, 4e-7 * want) << "thread " << t << " i " << i;
    }
  }
  EXPECT_EQ(compiled, 1) << "one thread compiles, the others share it";
}

// AdamW's 0-d bookkeeping (step += 1, bias corrections in f64) runs once in
// the scalar part, even when the main loop is split over threads; the
// in-place step counter advances by exactly one.
TEST(RegionKernelTest, ScalarPrologueRunsOnceBeforeTheSplitLoop) {
  auto g = Parse(R"(
graph @adam(%p0: f32[] input, %p1: f64[] input, %p2: f32[300,257] input, %p3: f32[300,257] input) {
  %0 = full {shape = [], value = 1.0, dtype = f32} : f32[]
  %1 = add_ %p0, %0 {alpha = 1.0, in_place = true} : f32[]
  %2 = pow %p1, %1 : f64[]
  %3 = full {shape = [], value = 1.0, dtype = f64} : f64[]
  %4 = sub %3, %2 : f64[]
  %5 = div %p2, %4 : f32[300,257]
  %6 = full {shape = [], value = 0.9, dtype = f32} : f32[]
  %7 = lerp_ %p3, %5, %6 {in_place = true} : f32[300,257]
  return %1, %4, %7
})");
  ASSERT_NE(g, nullptr);
  absl::StatusOr<RegionKernel> k = CompileRegion(*g);
  ASSERT_TRUE(k.ok()) << k.status();
  ASSERT_NE(k->scalar, nullptr);
  Generator gen(9);
  Tensor step = scalar_tensor(4.0), beta = scalar_tensor(0.9, {.dtype = DType::kF64});
  Tensor grad = randn({300, 257}, {}, &gen), avg = randn({300, 257}, {}, &gen);
  Tensor expect_avg = avg.clone();
  // The step counter is updated in place: pass it as its own output.
  std::vector<void*> ptrs = {step.data_ptr(), beta.data_ptr(), grad.data_ptr(), avg.data_ptr()};
  Tensor bc = empty({}, {.dtype = DType::kF64});
  ptrs.insert(ptrs.end(), {step.data_ptr(), bc.data_ptr(), avg.data_ptr()});
  runtime::cpu::RunRegionKernel(*k, ptrs);
  EXPECT_EQ(step.item(), 5.0f);
  const double expect_bc = 1.0 - std::pow(0.9, 5.0);
  EXPECT_EQ(bc.item(), expect_bc);
  expect_avg.lerp_(grad / scalar_tensor(expect_bc, {.dtype = DType::kF64}), 0.9);
  EXPECT_TRUE(SameBits(avg, expect_avg)) << MaxAbsDiff(avg, expect_avg);
}

// Row plans (a reduced value broadcast back over its row, softmax and the
// other row ops) lower since the row plan; tests/codegen/row_kernel_test.cc
// checks them.
TEST(RegionKernelTest, RegionsItCannotLowerAreUnimplemented) {
  for (const char* text :
       {// reductions over different dims
        R"(graph @b(%p0: f32[4,8] input) {
  %0 = sum %p0 {dims = [0], keepdim = false} : f32[8]
  %1 = sum %p0 {dims = [1], keepdim = false} : f32[4]
  return %0, %1
})",
        // a float becomes an integer (out-of-range values undefined)
        R"(graph @c(%p0: f32[16] input) {
  %0 = cast %p0 {dtype = i64} : i64[16]
  return %0
})",
        // an integer op without an integer lowering
        R"(graph @e(%p0: i64[16] input) {
  %0 = abs %p0 : i64[16]
  return %0
})",
        // a reduction over leading dims whose result is broadcast back
        R"(graph @d(%p0: f32[4,8] input) {
  %0 = amax %p0 {dims = [0], keepdim = true} : f32[1,8]
  %1 = sub %p0, %0 : f32[4,8]
  return %1
})"}) {
    auto g = Parse(text);
    ASSERT_NE(g, nullptr);
    absl::StatusOr<RegionKernel> k = CompileRegion(*g);
    EXPECT_TRUE(absl::IsUnimplemented(k.status())) << text << "\n" << k.status();
  }
}

constexpr char kCacheRegion[] = R"(
graph @cached(%p0: f32[50,40] input, %p1: f32[40] input) {
  %0 = add %p0, %p1 : f32[50,40]
  %1 = tanh %0 : f32[50,40]
  %2 = sum %1 {dims = [0], keepdim = false} : f32[40]
  return %1, %2
})";

// Child half of the cross-process cache test: compiles kCacheRegion, checks
// its result against eager, and writes "<cache_hit> <corrupt_entries>".
TEST(RegionKernelCacheChild, CompileAndReport) {
  const char* out = std::getenv("STEPJIT_TEST_CHILD_OUT");
  if (out == nullptr) GTEST_SKIP() << "runs only as the child of KernelCacheAcrossProcesses";
  auto g = Parse(kCacheRegion);
  ASSERT_NE(g, nullptr);
  absl::StatusOr<RegionKernel> k = CompileRegion(*g);
  ASSERT_TRUE(k.ok()) << k.status();
  Generator gen(2);
  Tensor x = randn({50, 40}, {}, &gen), b = randn({40}, {}, &gen);
  std::vector<Tensor> got = RunKernel(*k, {x, b}, ReturnTypes(*g));
  ASSERT_TRUE(SameBits(got[0], tanh(x + b)));
  ASSERT_TRUE(SameBits(got[1], sum(tanh(x + b), {0})));
  std::ofstream(out) << (k->cache_hit ? 1 : 0) << " " << KernelCache::Global().stats().corrupt_entries
                     << " " << k->compile_ms << "\n";
}

// A second process finds the kernel in the disk cache; a truncated entry is
// rejected (never executed) and rebuilt.
TEST(RegionKernelTest, KernelCacheAcrossProcesses) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / absl::StrCat("stepjit_cache_test_", getpid());
  std::filesystem::remove_all(dir);
  const std::string report = (dir.string() + ".out");
  auto child = [&]() -> std::vector<double> {
    const std::string cmd =
        absl::StrCat("STEPJIT_CACHE_DIR='", dir.string(), "' STEPJIT_TEST_CHILD_OUT='", report,
                     "' /proc/", getpid(), "/exe --gtest_filter=RegionKernelCacheChild.* >/dev/null 2>&1");
    const int rc = std::system(cmd.c_str());
    EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << cmd;
    std::ifstream in(report);
    std::vector<double> v(3, -1);
    in >> v[0] >> v[1] >> v[2];
    return v;
  };
  std::vector<double> cold = child();
  EXPECT_EQ(cold[0], 0) << "first process compiles";
  std::vector<double> warm = child();
  EXPECT_EQ(warm[0], 1) << "second process loads from disk";
  EXPECT_EQ(warm[1], 0);
  std::printf("kernel compile: cold %.2f ms, warm (disk) %.2f ms\n", cold[2], warm[2]);
  // Truncate every entry: the next process must detect it and recompile.
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".bin") continue;
    std::filesystem::resize_file(e.path(), std::filesystem::file_size(e.path()) / 2);
    ++entries;
  }
  EXPECT_GE(entries, 1);
  std::vector<double> rebuilt = child();
  EXPECT_EQ(rebuilt[0], 0) << "a truncated entry is not loaded";
  EXPECT_EQ(rebuilt[1], 1) << "and is counted as corrupt";
  std::vector<double> again = child();
  EXPECT_EQ(again[0], 1) << "the rebuilt entry is good";
  std::filesystem::remove_all(dir);
  std::filesystem::remove(report);
}

}  // namespace
}  // namespace stepjit::codegen::cpu

namespace stepjit::codegen::cpu {
namespace {

// The fused patterns of the MLP step (bias + ReLU + mask with broadcast;
// bias-grad column sum + momentum epilogue; AdamW update with its scalar
// prologue) in every float dtype, run by the executor with generated code
// and by the interpreter (the eager kernels): bit-identical results. The
// last operand is passed as a transposed (strided) view.
constexpr char kPatterns[] = R"(
graph @patterns(%x: DT[6,37] input, %b: DT[37] input, %gt: DT[37,6] input, %m: DT[37] state, %t: f32[] state, %v: DT[6,37] state) {
  %0 = fusion @bias_relu(%x, %b) : (DT[6,37], bool[6,37]) {
    graph @bias_relu(%p0: DT[6,37] input, %p1: DT[37] input) {
      %0 = add %p0, %p1 : DT[6,37]
      %1 = relu %0 : DT[6,37]
      %2 = full {shape = [], value = 0.0, dtype = DT} : DT[]
      %3 = gt %1, %2 : bool[6,37]
      return %1, %3
    }
  }
  %1 = permute %gt {dims = [1, 0]} : DT[6,37]
  %2 = fusion @bgrad(%0#1, %1, %m) : (DT[6,37], DT[37], DT[37]) {
    graph @bgrad(%p0: bool[6,37] input, %p1: DT[6,37] input, %p2: DT[37] input) {
      %0 = full {shape = [], value = 0.0, dtype = DT} : DT[]
      %1 = where %p0, %p1, %0 : DT[6,37]
      %2 = sum %1 {dims = [0], keepdim = false} : DT[37]
      %3 = full {shape = [], value = 0.1, dtype = DT} : DT[]
      %4 = lerp_ %p2, %2, %3 : DT[37]
      return %1, %2, %4
    }
  }
  %3 = fusion @adam(%t, %v, %2#0) : (f32[], DT[6,37]) {
    graph @adam(%p0: f32[] input, %p1: DT[6,37] input, %p2: DT[6,37] input) {
      %0 = full {shape = [], value = 1.0, dtype = f32} : f32[]
      %1 = add_ %p0, %0 {alpha = 1.0} : f32[]
      %2 = full {shape = [], value = 0.999, dtype = DT} : DT[]
      %3 = mul_ %p1, %2 : DT[6,37]
      %4 = addcmul_ %3, %p2, %p2 {value = 0.001} : DT[6,37]
      %5 = sqrt %4 : DT[6,37]
      %6 = div %5, %1 : DT[6,37]
      return %1, %6
    }
  }
  assign %m, %2#2
  assign %t, %3#0
  return %0#0, %2#1, %3#1
})";

TEST(RegionKernelTest, FusedPatternsInEveryFloatDTypeMatchTheInterpreter) {
  for (ir::DType dt : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) {
    const std::string name(ir::DTypeName(dt));
    auto g = Parse(absl::StrReplaceAll(kPatterns, {{"DT", name}}));
    ASSERT_NE(g, nullptr);
    runtime::ProgramOptions generate, interpret;
    generate.use_cache = false;
    interpret.codegen = false;
    auto generated = runtime::Program::Build(*g, generate);
    auto interpreted = runtime::Program::Build(*g, interpret);
    ASSERT_TRUE(generated.ok()) << generated.status();
    ASSERT_TRUE(interpreted.ok()) << interpreted.status();
    EXPECT_EQ(generated->compiled_regions(), 3) << name;
    Generator gen(21);
    Tensor x = randn({6, 37}, {}, &gen).to(dt), b = randn({37}, {}, &gen).to(dt);
    Tensor gt_in = randn({37, 6}, {}, &gen).to(dt);
    Tensor m = randn({37}, {}, &gen).to(dt), v = rand({6, 37}, {}, &gen).to(dt);
    Tensor t = scalar_tensor(3.0);
    auto run = [&](const runtime::Program& p) {
      std::vector<Tensor> state = {m.clone(), t.clone(), v.clone()};
      std::vector<Tensor> out = p.Run({x, b, gt_in}, state);
      out.insert(out.end(), state.begin(), state.end());
      return out;
    };
    std::vector<Tensor> got = run(*generated), want = run(*interpreted);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(SameBits(got[i], want[i])) << name << " output " << i << " max diff "
                                             << MaxAbsDiff(got[i], want[i]);
    }
    EXPECT_EQ(got[4].item(), 4.0) << "the step count advances once";
  }
}

}  // namespace
}  // namespace stepjit::codegen::cpu
