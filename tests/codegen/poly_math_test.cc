// exp, log, tanh and erf (ir/poly_math.h) as the generated CPU code computes
// them: dense f32 sweeps and f64 samples against libm in a wider type, with
// the ulp bounds the header states; the special values; the eager kernels'
// results, bit for bit; and loops the vectorizer turns into vector code.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/cpu/region_kernel.h"
#include "gtest/gtest.h"
#include "ir/parser.h"
#include "program/cpu/cpu_backend.h"
#include "runtime/dispatch.h"
#include "runtime/ops.h"

namespace stepjit::codegen::cpu {
namespace {

using ir::DType;
using ir::OpId;
using F = std::numeric_limits<float>;
using D = std::numeric_limits<double>;

// The bound ir/poly_math.h states for every function it defines.
constexpr double kMaxUlp = 2.0;

struct Fn {
  OpId op;
  const char* name;
  long double (*ref)(long double);
  float lo, hi;  // the f32 sweep
};

// libm in long double is the reference: for f32 its error is far below
// the f32 ulp, for f64 (x86's 64-bit significand) about 2^-11 ulp.
const Fn kFns[] = {
    {OpId::kExp, "exp", [](long double x) { return expl(x); }, -110, 100},
    {OpId::kLog, "log", [](long double x) { return logl(x); }, 0,
     F::infinity()},
    {OpId::kTanh, "tanh", [](long double x) { return tanhl(x); },
     -F::infinity(), F::infinity()},
    {OpId::kErf, "erf", [](long double x) { return erfl(x); }, -F::infinity(),
     F::infinity()},
};

// The ulp error of `got` against the exact `want` in a type with `mant`
// significand bits and least normal exponent `emin`; subnormal results
// count in the subnormal spacing. A result that rounds to an infinity must
// be that infinity, NaN must be NaN.
long double UlpError(long double got, long double want, int mant, int emin) {
  if (std::isnan(want)) return std::isnan(got) ? 0 : D::infinity();
  const bool f32 = mant == 23;
  const long double rounded =
      f32 ? static_cast<float>(want) : static_cast<double>(want);
  if (std::isinf(rounded) || want == 0)
    return got == rounded ? 0 : D::infinity();
  int e;
  std::frexp(want, &e);
  return std::fabs(got - want) / std::ldexp(1.0L, std::max(e - 1, emin) - mant);
}

std::unique_ptr<ir::Graph> Body(OpId op, DType dt, int64_t n) {
  auto g = std::make_unique<ir::Graph>("body");
  ir::Value* p = g->AddParam("p0", {dt, {n}}, ir::ParamKind::kInput);
  g->SetReturns({g->AddOp(op, {p}, {}, {dt, {n}})->output()});
  return g;
}

// `op` over `x` through a generated kernel.
Tensor Generated(OpId op, const Tensor& x) {
  auto body = Body(op, x.dtype(), x.numel());
  absl::StatusOr<RegionKernel> k = CompileRegion(*body, {.use_cache = false});
  EXPECT_TRUE(k.ok()) << k.status();
  if (!k.ok()) return Tensor();
  Tensor out = empty({x.numel()}, {.dtype = x.dtype()});
  runtime::cpu::RunRegionKernel(*k, {x.data_ptr(), out.data_ptr()});
  return out;
}

// Values where the functions change behaviour: signed zeros, subnormals,
// the normal limits, infinities, NaN, exp's overflow and underflow edges,
// tanh's and erf's saturation, and where they leave their polynomial at 0.
template <typename T>
std::vector<T> Specials() {
  using L = std::numeric_limits<T>;
  std::vector<T> s = {
      0,
      L::denorm_min(),
      L::min() - L::denorm_min(),
      L::min(),
      L::max(),
      L::infinity(),
      1,
      0.875,
      0.625,
      0.921875,
      4,
      9.01,
      19.1,
      static_cast<T>(std::log(static_cast<long double>(L::max()))),
      static_cast<T>(std::log(static_cast<long double>(L::min()))),
      static_cast<T>(std::log(static_cast<long double>(L::denorm_min()))),
      static_cast<T>(std::log(static_cast<long double>(L::denorm_min()) / 2))};
  const size_t n = s.size();
  for (size_t i = 1; i < n; ++i) {
    s.push_back(std::nextafter(s[i], T(0)));
    s.push_back(std::nextafter(s[i], L::infinity()));
  }
  for (size_t i = 0, m = s.size(); i < m; ++i) s.push_back(-s[i]);
  s.push_back(L::quiet_NaN());
  return s;
}

// The measured worst case: largest ulp error, where, and how many results
// differ from the eager kernels' (NaN matches any NaN).
struct Report {
  long double worst = 0;
  double at = 0;
  int64_t differ = 0;
};

template <typename T>
Report Measure(const Fn& f, const std::vector<T>& xs) {
  const int64_t n = static_cast<int64_t>(xs.size());
  const Tensor x = from_vector(xs, {n});
  const Tensor got = Generated(f.op, x);
  const Tensor eager = runtime::Dispatch(f.op, {x});
  if (!got.defined()) return {D::infinity(), 0, n};
  const T* g = got.data<T>();
  const T* e = eager.data<T>();
  Report r;
  for (int64_t i = 0; i < n; ++i) {
    const long double err = std::is_same_v<T, float>
                                ? UlpError(g[i], f.ref(xs[i]), 23, -126)
                                : UlpError(g[i], f.ref(xs[i]), 52, -1022);
    if (err > r.worst) r = {err, static_cast<double>(xs[i]), r.differ};
    const bool same = std::isnan(g[i])
                          ? std::isnan(e[i])
                          : std::memcmp(&g[i], &e[i], sizeof(T)) == 0;
    r.differ += !same;
  }
  return r;
}

// Measures `f` on `xs`, prints the worst case, and expects it within
// kMaxUlp and every result the eager kernel's.
template <typename T>
void ExpectAccurate(const Fn& f, const std::vector<T>& xs) {
  const Report r = Measure(f, xs);
  std::printf("%s %-4s %zu values: max %.3Lf ulp at %a\n",
              std::is_same_v<T, float> ? "f32" : "f64", f.name, xs.size(),
              r.worst, r.at);
  EXPECT_LE(r.worst, kMaxUlp) << f.name << " at " << r.at;
  EXPECT_EQ(r.differ, 0) << f.name
                         << ": results that differ from the eager kernel's";
}

// Every `stride`-th f32 bit pattern in [lo, hi] (both signs), plus the
// specials: about 4M values a function.
std::vector<float> Sweep(float lo, float hi) {
  constexpr uint64_t kStride = 1021;
  std::vector<float> xs;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += kStride) {
    const uint32_t bits = static_cast<uint32_t>(b);
    float x;
    std::memcpy(&x, &bits, sizeof(x));
    if (x >= lo && x <= hi) xs.push_back(x);
  }
  for (float s : Specials<float>()) xs.push_back(s);
  return xs;
}

TEST(PolyMathTest, F32WithinTwoUlpOverDenseSweeps) {
  for (const Fn& f : kFns) {
    ExpectAccurate(f, Sweep(f.lo, f.hi));
  }
}

// Uniform samples over the whole domain and around 1, log-uniform ones
// from the smallest magnitudes up. erf is libm's in f64 (ir/poly_math.h),
// not measured here.
TEST(PolyMathTest, F64WithinTwoUlpOverSamples) {
  std::mt19937_64 rng(7);
  auto uniform = [&](double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng);
  };
  auto log_uniform = [&](double lo, double hi) {
    return std::exp(uniform(std::log(lo), std::log(hi)));
  };
  constexpr int kSamples = 200000;
  for (const Fn& f : kFns) {
    if (f.op == OpId::kErf) continue;
    std::vector<double> xs = Specials<double>();
    for (int i = 0; i < kSamples; ++i) {
      switch (f.op) {
        case OpId::kExp:
          xs.push_back(i % 2 ? uniform(-746, 710) : uniform(-1, 1));
          break;
        case OpId::kLog:
          xs.push_back(i % 2 ? log_uniform(D::denorm_min(), D::max())
                             : uniform(0.5, 2));
          break;
        default:
          xs.push_back((i % 2 ? log_uniform(1e-300, 40) : uniform(0, 3)) *
                       (i % 4 < 2 ? 1 : -1));
      }
    }
    ExpectAccurate(f, xs);
  }
}

// The special values exactly, sign of zero included, in both precisions.
template <typename T>
void CheckSpecialValues() {
  using L = std::numeric_limits<T>;
  const T inf = L::infinity(), nan = L::quiet_NaN();
  struct Case {
    OpId op;
    T x, want;
  };
  std::vector<Case> cases = {
      {OpId::kExp, 0, 1},      {OpId::kExp, -T(0), 1},
      {OpId::kExp, inf, inf},  {OpId::kExp, -inf, 0},
      {OpId::kExp, nan, nan},  {OpId::kExp, 1000, inf},
      {OpId::kExp, -1000, 0},  {OpId::kLog, 1, 0},
      {OpId::kLog, 0, -inf},   {OpId::kLog, -T(0), -inf},
      {OpId::kLog, inf, inf},  {OpId::kLog, -1, nan},
      {OpId::kLog, -inf, nan}, {OpId::kLog, nan, nan},
      {OpId::kTanh, 0, 0},     {OpId::kTanh, -T(0), -T(0)},
      {OpId::kTanh, inf, 1},   {OpId::kTanh, -inf, -1},
      {OpId::kTanh, 40, 1},    {OpId::kTanh, -40, -1},
      {OpId::kTanh, nan, nan},
  };
  if (std::is_same_v<T, float>) {
    cases.insert(cases.end(), {{OpId::kErf, 0, 0},
                               {OpId::kErf, -T(0), -T(0)},
                               {OpId::kErf, inf, 1},
                               {OpId::kErf, -inf, -1},
                               {OpId::kErf, 5, 1},
                               {OpId::kErf, -5, -1},
                               {OpId::kErf, nan, nan},
                               {OpId::kErf, L::denorm_min(), L::denorm_min()}});
  }
  for (const Case& c : cases) {
    std::vector<T> xs(16, c.x);  // a vector's worth, not a one-element region
    const Tensor got = Generated(c.op, from_vector(xs, {16}));
    ASSERT_TRUE(got.defined());
    const T y = got.data<T>()[0];
    const std::string what =
        absl::StrCat(ir::OpName(c.op), "(", c.x, ") = ", y, ", want ", c.want);
    if (std::isnan(c.want)) {
      EXPECT_TRUE(std::isnan(y)) << what;
    } else {
      EXPECT_EQ(y, c.want) << what;
      EXPECT_EQ(std::signbit(y), std::signbit(c.want)) << what << " (sign)";
    }
  }
}

TEST(PolyMathTest, SpecialValuesF32) { CheckSpecialValues<float>(); }
TEST(PolyMathTest, SpecialValuesF64) { CheckSpecialValues<double>(); }

// The optimized IR of `text`: -O2 for the host, uncached.
std::string OptimizedIr(const std::string& text) {
  absl::StatusOr<std::unique_ptr<ir::Graph>> g = ir::ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return "";
  absl::StatusOr<RegionKernel> k =
      CompileRegion(**g, {.want_optimized_ir = true, .use_cache = false});
  EXPECT_TRUE(k.ok()) << k.status();
  return k.ok() ? k->llvm_ir : "";
}

// The regions a GPT step spends its elementwise time in: GELU with its
// derivative (erf, exp), a tanh GELU, and a causal softmax row (exp). Their
// loops must be vector code with no call left in them; the width is the
// host's (<16 x float> with AVX-512).
TEST(PolyMathTest, TranscendentalLoopsVectorize) {
  const char* kGelu = R"(
graph @gelu(%p0: f32[64,512] input) {
  %0 = gelu %p0 : f32[64,512]
  %1 = erf %p0 : f32[64,512]
  %2 = mul %p0, %p0 : f32[64,512]
  %3 = exp %2 : f32[64,512]
  %4 = add %1, %3 : f32[64,512]
  %5 = gelu_tanh %p0 : f32[64,512]
  %6 = log %p0 : f32[64,512]
  return %0, %4, %5, %6
})";
  const char* kSoftmax = R"(
graph @softmax(%p0: f32[16,4,64,64] input, %p1: bool[64,64] input) {
  %0 = full {shape = [], value = -inf, dtype = f32} : f32[]
  %1 = where %p1, %0, %p0 : f32[16,4,64,64]
  %2 = softmax %1 {dim = -1} : f32[16,4,64,64]
  return %2
})";
  for (const char* text : {kGelu, kSoftmax}) {
    const std::string opt = OptimizedIr(text);
    EXPECT_NE(opt.find(" x float>"), std::string::npos) << opt;
    for (const char* call :
         {"@erff", "@expf", "@tanhf", "@logf", "@llvm.exp.", "@llvm.log."})
      EXPECT_EQ(opt.find(call), std::string::npos) << call << " in\n" << opt;
  }
}

}  // namespace
}  // namespace stepjit::codegen::cpu
