// Row-plan region kernels (codegen/region_plan.h): softmax, log_softmax,
// layer_norm, var, cross_entropy, mse_loss and the backward patterns their
// gradient rules write, generated and run on the CPU, against the same
// bodies run op by op through the eager kernels.
//
// Tolerance: |got - want| <= ulps * eps(dtype) * (|want| + scale), NaN
// exactly where eager has NaN. eps is the dtype's machine epsilon (f32
// 2^-23, bf16 2^-7); `scale` is the magnitude an op's error is relative to
// (the row's logsumexp for log_softmax, 1 for normalized or O(1) values).
// f32 allows 4 ulps (the eager kernels' exp/log and summation order differ
// from the generated code's), bf16 1 ulp (a rounding of nearly equal f32
// values may land on either neighbour).
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "codegen/cpu/region_kernel.h"
#include "codegen/region_plan.h"
#include "gtest/gtest.h"
#include "ir/parser.h"
#include "runtime/cpu/program/cpu_backend.h"
#include "runtime/dispatch.h"
#include "runtime/generator.h"
#include "runtime/ops.h"

namespace stepjit::codegen::cpu {
namespace {

using ir::DType;

constexpr double kInf = std::numeric_limits<double>::infinity();

std::unique_ptr<ir::Graph> Parse(std::string text, DType t, int64_t n,
                                 int64_t c) {
  text = absl::StrReplaceAll(text, {{"{T}", ir::DTypeName(t)},
                                    {"{N}", absl::StrCat(n)},
                                    {"{C}", absl::StrCat(c)}});
  auto g = ir::ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status() << "\n" << text;
  return g.ok() ? *std::move(g) : nullptr;
}

// The body run node by node through Dispatch (the eager kernels).
std::vector<Tensor> Interpret(const ir::Graph& g,
                              const std::vector<Tensor>& args) {
  absl::flat_hash_map<const ir::Value*, Tensor> env;
  for (size_t i = 0; i < args.size(); ++i) env[g.params()[i]] = args[i];
  for (const auto& n : g.nodes()) {
    std::vector<Tensor> in;
    for (const ir::Value* v : n->inputs()) in.push_back(env.at(v));
    env[n->output()] = runtime::Dispatch(n->op(), in, n->attrs());
  }
  std::vector<Tensor> out;
  for (const ir::Value* r : g.returns()) out.push_back(env.at(r));
  return out;
}

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

double Eps(DType t) {
  switch (t) {
    case DType::kBF16:
      return 0x1p-7;
    case DType::kF16:
      return 0x1p-10;
    case DType::kF64:
      return 0x1p-52;
    default:
      return 0x1p-23;
  }
}

void ExpectClose(const Tensor& got, const Tensor& want, double ulps,
                 double scale, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> a = got.to(DType::kF64).to_vector<double>();
  const std::vector<double> b = want.to(DType::kF64).to_vector<double>();
  const double tol = ulps * Eps(want.dtype());
  int bad = 0;
  for (size_t i = 0; i < a.size() && bad < 5; ++i) {
    if (std::isnan(b[i])) {
      if (!std::isnan(a[i])) {
        ADD_FAILURE() << what << " [" << i << "]: " << a[i] << ", eager NaN";
        ++bad;
      }
      continue;
    }
    if (a[i] == b[i]) continue;  // infinities included
    if (!(std::abs(a[i] - b[i]) <= tol * (std::abs(b[i]) + scale))) {
      ADD_FAILURE() << what << " [" << i << "]: " << a[i] << " vs eager "
                    << b[i] << " (tolerance " << tol << " * (" << std::abs(b[i])
                    << " + " << scale << "))";
      ++bad;
    }
  }
}

// Random O(1) values with, in the first rows, a -inf, a large value, and a
// whole row of -inf (when the row has room).
Tensor Logits(int64_t n, int64_t c, DType t, uint64_t seed,
              bool specials = true) {
  Generator gen(seed);
  std::vector<double> v =
      (randn({n, c}, {}, &gen) * 3.0).to(DType::kF64).to_vector<double>();
  if (specials && c > 1) {
    v[0] = -kInf;
    if (n > 1) v[c + c / 2] = t == DType::kBF16 ? 1e30 : 3e4;
    if (n > 2) {
      for (int64_t j = 0; j < c; ++j) v[2 * c + j] = -kInf;
    }
  }
  return from_vector(v, {n, c}).to(t);
}

const std::vector<std::pair<int64_t, int64_t>>& Shapes() {
  static const auto* s = new std::vector<std::pair<int64_t, int64_t>>{
      {5, 1}, {5, 7}, {3, 33}, {4, 1000}, {3, 4097}, {1, 33}, {17, 10}};
  return *s;
}

struct Case {
  const char* name;
  const char* text;
  // Operands for (n, c, dtype, seed).
  std::vector<Tensor> (*args)(int64_t, int64_t, DType, uint64_t);
  double scale;
};

// Compiles and runs `c` for every shape in f32 and bf16 and compares.
void CheckCase(const Case& c) {
  for (DType t : {DType::kF32, DType::kBF16}) {
    for (auto [n, cols] : Shapes()) {
      const std::string what =
          absl::StrCat(c.name, " ", ir::DTypeName(t), " [", n, ",", cols, "]");
      auto g = Parse(c.text, t, n, cols);
      ASSERT_NE(g, nullptr);
      absl::StatusOr<RegionKernel> k = CompileRegion(*g, {.use_cache = false});
      ASSERT_TRUE(k.ok()) << what << ": " << k.status();
      const std::vector<Tensor> args = c.args(n, cols, t, n * 131 + cols);
      const std::vector<Tensor> got = Generated(*k, *g, args);
      const std::vector<Tensor> want = Interpret(*g, args);
      double scale = c.scale;
      if (scale < 0) {  // log_softmax: relative to the largest finite |x|
        scale = 0;
        for (double x : args[0].to(DType::kF64).to_vector<double>())
          if (std::isfinite(x)) scale = std::max(scale, std::abs(x));
      }
      for (size_t r = 0; r < got.size(); ++r)
        ExpectClose(got[r], want[r], t == DType::kBF16 ? 1 : 4, scale,
                    absl::StrCat(what, " result ", r));
    }
  }
}

std::vector<Tensor> OneLogits(int64_t n, int64_t c, DType t, uint64_t s) {
  return {Logits(n, c, t, s)};
}
std::vector<Tensor> LogitsAndAffine(int64_t n, int64_t c, DType t, uint64_t s) {
  Generator gen(s + 7);
  return {Logits(n, c, t, s, false), (randn({c}, {}, &gen) + 1.0).to(t),
          randn({c}, {}, &gen).to(t)};
}
std::vector<Tensor> LogitsAndTargets(int64_t n, int64_t c, DType t,
                                     uint64_t s) {
  std::vector<int64_t> y(n);
  for (int64_t i = 0; i < n; ++i) y[i] = (i * 5 + 3) % c;
  return {Logits(n, c, t, s, false), from_vector(y, {n})};
}
std::vector<Tensor> TwoRows(int64_t n, int64_t c, DType t, uint64_t s) {
  Generator gen(s + 3);
  return {softmax(Logits(n, c, DType::kF32, s, false), 1).to(t),
          randn({n, c}, {}, &gen).to(t)};
}
std::vector<Tensor> LogSoftmaxAndGrad(int64_t n, int64_t c, DType t,
                                      uint64_t s) {
  Generator gen(s + 3);
  return {log_softmax(Logits(n, c, DType::kF32, s, false), 1).to(t),
          randn({n, c}, {}, &gen).to(t)};
}
std::vector<Tensor> LayerNormGradArgs(int64_t n, int64_t c, DType t,
                                      uint64_t s) {
  Generator gen(s + 3);
  return {(Logits(n, c, DType::kF32, s, false) + 2.0).to(t),
          randn({n, c}, {}, &gen).to(t)};
}
std::vector<Tensor> CrossEntropyGradArgs(int64_t n, int64_t c, DType t,
                                         uint64_t s) {
  std::vector<int64_t> y(n);
  for (int64_t i = 0; i < n; ++i) y[i] = (i * 5 + 3) % c;
  return {Logits(n, c, t, s, false), one_hot(from_vector(y, {n}), c, t),
          scalar_tensor(1.0 / static_cast<double>(n)).to(t)};
}

TEST(RowKernelTest, SoftmaxMatchesEager) {
  CheckCase({"softmax", R"(graph @r(%p0: {T}[{N},{C}] input) {
  %0 = softmax %p0 {dim = 1} : {T}[{N},{C}]
  return %0
})",
             OneLogits, 0});
}

TEST(RowKernelTest, LogSoftmaxMatchesEager) {
  CheckCase({"log_softmax", R"(graph @r(%p0: {T}[{N},{C}] input) {
  %0 = log_softmax %p0 {dim = 1} : {T}[{N},{C}]
  return %0
})",
             OneLogits, -1});
}

TEST(RowKernelTest, LayerNormMatchesEager) {
  CheckCase({"layer_norm", R"(graph @r(%p0: {T}[{N},{C}] input) {
  %0 = layer_norm %p0 {normalized_ndim = 1, eps = 1e-05} : {T}[{N},{C}]
  return %0
})",
             OneLogits, 1});
  CheckCase(
      {"layer_norm affine",
       R"(graph @r(%p0: {T}[{N},{C}] input, %w: {T}[{C}] input, %b: {T}[{C}] input) {
  %0 = layer_norm %p0, %w, %b {normalized_ndim = 1, eps = 1e-05} : {T}[{N},{C}]
  %1 = relu %0 : {T}[{N},{C}]
  return %1
})",
       LogitsAndAffine, 1});
}

TEST(RowKernelTest, VarMatchesEager) {
  CheckCase({"var", R"(graph @r(%p0: {T}[{N},{C}] input) {
  %0 = var %p0 {dims = [1], keepdim = false, correction = 1} : {T}[{N}]
  %1 = sqrt %0 : {T}[{N}]
  return %0, %1
})",
             OneLogits, 0});
}

TEST(RowKernelTest, CrossEntropyMatchesEager) {
  for (const char* red : {"mean", "sum"}) {
    for (const char* ls : {"0.0", "0.1"}) {
      const std::string text = absl::StrCat(
          R"(graph @r(%p0: {T}[{N},{C}] input, %p1: i64[{N}] input, %s: {T}[] input) {
  %0 = cross_entropy %p0, %p1 {reduction = ")",
          red, R"(", label_smoothing = )", ls, R"(} : {T}[]
  %1 = mul %0, %s : {T}[]
  return %0, %1
})");
      CheckCase({"cross_entropy", text.c_str(),
                 [](int64_t n, int64_t c, DType t, uint64_t s) {
                   std::vector<Tensor> a = LogitsAndTargets(n, c, t, s);
                   a.push_back(scalar_tensor(4.0).to(t));
                   return a;
                 },
                 0});
    }
  }
}

TEST(RowKernelTest, MseLossMatchesEager) {
  CheckCase({"mse_loss",
             R"(graph @r(%p0: {T}[{N},{C}] input, %p1: {T}[{N},{C}] input) {
  %0 = mse_loss %p0, %p1 {reduction = "mean"} : {T}[]
  return %0
})",
             TwoRows, 0});
}

// Backward patterns, as runtime/autograd/grad_rules.cc writes them.

TEST(RowKernelTest, SoftmaxBackwardMatchesEager) {
  CheckCase({"softmax backward",
             R"(graph @r(%y: {T}[{N},{C}] input, %g: {T}[{N},{C}] input) {
  %0 = mul %g, %y : {T}[{N},{C}]
  %1 = sum %0 {dims = [1], keepdim = true} : {T}[{N},1]
  %2 = sub %g, %1 : {T}[{N},{C}]
  %3 = mul %y, %2 : {T}[{N},{C}]
  return %3
})",
             TwoRows, 1});
}

TEST(RowKernelTest, LogSoftmaxBackwardMatchesEager) {
  CheckCase({"log_softmax backward",
             R"(graph @r(%y: {T}[{N},{C}] input, %g: {T}[{N},{C}] input) {
  %0 = sum %g {dims = [1], keepdim = true} : {T}[{N},1]
  %1 = exp %y : {T}[{N},{C}]
  %2 = mul %1, %0 : {T}[{N},{C}]
  %3 = sub %g, %2 : {T}[{N},{C}]
  return %3
})",
             LogSoftmaxAndGrad, 8});
}

TEST(RowKernelTest, LayerNormBackwardMatchesEager) {
  CheckCase({"layer_norm backward",
             R"(graph @r(%x: {T}[{N},{C}] input, %g: {T}[{N},{C}] input) {
  %0 = mean %x {dims = [1], keepdim = true} : {T}[{N},1]
  %1 = var %x {dims = [1], keepdim = true, correction = 0} : {T}[{N},1]
  %2 = full {shape = [], value = 1e-05, dtype = {T}} : {T}[]
  %3 = add %1, %2 : {T}[{N},1]
  %4 = rsqrt %3 : {T}[{N},1]
  %5 = sub %x, %0 : {T}[{N},{C}]
  %6 = mul %5, %4 : {T}[{N},{C}]
  %7 = mean %g {dims = [1], keepdim = true} : {T}[{N},1]
  %8 = mul %g, %6 : {T}[{N},{C}]
  %9 = mean %8 {dims = [1], keepdim = true} : {T}[{N},1]
  %10 = sub %g, %7 : {T}[{N},{C}]
  %11 = mul %6, %9 : {T}[{N},{C}]
  %12 = sub %10, %11 : {T}[{N},{C}]
  %13 = mul %4, %12 : {T}[{N},{C}]
  return %13
})",
             LayerNormGradArgs, 16});
}

TEST(RowKernelTest, CrossEntropyBackwardMatchesEager) {
  CheckCase(
      {"cross_entropy backward",
       R"(graph @r(%x: {T}[{N},{C}] input, %oh: {T}[{N},{C}] input, %s: {T}[] input) {
  %0 = softmax %x {dim = 1} : {T}[{N},{C}]
  %1 = sub %0, %oh : {T}[{N},{C}]
  %2 = mul %1, %s : {T}[{N},{C}]
  return %2
})",
       CrossEntropyGradArgs, 1});
}

}  // namespace
}  // namespace stepjit::codegen::cpu
