// The row-op cases both region code generators are checked on
// (tests/codegen/row_kernel_test.cc on the CPU, cuda_row_test.cc on the CUDA
// emulator): region bodies holding softmax, log_softmax, layer_norm, var,
// cross_entropy, mse_loss and the backward patterns their gradient rules
// write, their operands, the eager reference (the body run op by op through
// Dispatch) and the comparison.
//
// Tolerance: |got - want| <= ulps * eps(dtype) * (|want| + scale), NaN
// exactly where eager has NaN. eps is the dtype's machine epsilon (f32
// 2^-23, f16 2^-10, bf16 2^-7); `scale` is the magnitude an op's error is
// relative to (the largest finite |x| for log_softmax, 1 for normalized or
// O(1) values). The callers allow f32 4 ulps (summation order differs from
// the eager kernels'; exp and log are the same, ir/poly_math.h), f16/bf16
// 1 ulp (a rounding of nearly equal f32 values may land on either
// neighbour).
#ifndef STEPJIT_TESTS_UTIL_ROW_CASES_H_
#define STEPJIT_TESTS_UTIL_ROW_CASES_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "codegen/cpu/region_kernel.h"
#include "gtest/gtest.h"
#include "ir/parser.h"
#include "program/cpu/cpu_backend.h"
#include "runtime/dispatch.h"
#include "runtime/generator.h"
#include "runtime/ops.h"

namespace stepjit::test::rows {

using ir::DType;

inline constexpr double kInf = std::numeric_limits<double>::infinity();

// `text` with {T}, {N} and {C} replaced by the dtype, rows and row length.
inline std::unique_ptr<ir::Graph> Parse(std::string text, DType t, int64_t n,
                                        int64_t c) {
  text = absl::StrReplaceAll(text, {{"{T}", ir::DTypeName(t)},
                                    {"{N}", absl::StrCat(n)},
                                    {"{C}", absl::StrCat(c)}});
  auto g = ir::ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status() << "\n" << text;
  return g.ok() ? *std::move(g) : nullptr;
}

// The body run node by node through Dispatch (the eager CPU kernels).
inline std::vector<Tensor> Interpret(const ir::Graph& g,
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

// `g`'s generated CPU kernel `k` run on `args`, into fresh outputs.
inline std::vector<Tensor> RunCpuKernel(const codegen::cpu::RegionKernel& k,
                                        const ir::Graph& g,
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

inline double Eps(DType t) {
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

inline void ExpectClose(const Tensor& got, const Tensor& want, double ulps,
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
inline Tensor Logits(int64_t n, int64_t c, DType t, uint64_t seed,
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

inline Tensor Targets(int64_t n, int64_t c) {
  std::vector<int64_t> y(n);
  for (int64_t i = 0; i < n; ++i) y[i] = (i * 5 + 3) % c;
  return from_vector(y, {n});
}

// Operands of a case for (rows, row length, dtype, seed).
using ArgsFn = std::vector<Tensor> (*)(int64_t, int64_t, DType, uint64_t);

inline std::vector<Tensor> OneLogits(int64_t n, int64_t c, DType t,
                                     uint64_t s) {
  return {Logits(n, c, t, s)};
}
inline std::vector<Tensor> LogitsAndAffine(int64_t n, int64_t c, DType t,
                                           uint64_t s) {
  Generator gen(s + 7);
  return {Logits(n, c, t, s, false), (randn({c}, {}, &gen) + 1.0).to(t),
          randn({c}, {}, &gen).to(t)};
}
inline std::vector<Tensor> LogitsTargetsScale(int64_t n, int64_t c, DType t,
                                              uint64_t s) {
  return {Logits(n, c, t, s, false), Targets(n, c), scalar_tensor(4.0).to(t)};
}
inline std::vector<Tensor> TwoRows(int64_t n, int64_t c, DType t, uint64_t s) {
  Generator gen(s + 3);
  return {softmax(Logits(n, c, DType::kF32, s, false), 1).to(t),
          randn({n, c}, {}, &gen).to(t)};
}
inline std::vector<Tensor> LogSoftmaxAndGrad(int64_t n, int64_t c, DType t,
                                             uint64_t s) {
  Generator gen(s + 3);
  return {log_softmax(Logits(n, c, DType::kF32, s, false), 1).to(t),
          randn({n, c}, {}, &gen).to(t)};
}
inline std::vector<Tensor> LayerNormGradArgs(int64_t n, int64_t c, DType t,
                                             uint64_t s) {
  Generator gen(s + 3);
  return {(Logits(n, c, DType::kF32, s, false) + 2.0).to(t),
          randn({n, c}, {}, &gen).to(t)};
}
inline std::vector<Tensor> CrossEntropyGradArgs(int64_t n, int64_t c, DType t,
                                                uint64_t s) {
  return {Logits(n, c, t, s, false), one_hot(Targets(n, c), c, t),
          scalar_tensor(1.0 / static_cast<double>(n)).to(t)};
}

// A region body over rows [{N}, {C}] of dtype {T}, and its operands.
struct Case {
  std::string name;
  std::string text;
  ArgsFn args;
  // What errors are relative to; negative: the largest finite |x| of the
  // first operand (log_softmax).
  double scale;
};

inline double ScaleFor(const Case& c, const std::vector<Tensor>& args) {
  if (c.scale >= 0) return c.scale;
  double scale = 0;
  for (double x : args[0].to(DType::kF64).to_vector<double>())
    if (std::isfinite(x)) scale = std::max(scale, std::abs(x));
  return scale;
}

inline Case Softmax() {
  return {"softmax", R"(graph @r(%p0: {T}[{N},{C}] input) {
  %0 = softmax %p0 {dim = 1} : {T}[{N},{C}]
  return %0
})",
          OneLogits, 0};
}

inline Case LogSoftmax() {
  return {"log_softmax", R"(graph @r(%p0: {T}[{N},{C}] input) {
  %0 = log_softmax %p0 {dim = 1} : {T}[{N},{C}]
  return %0
})",
          OneLogits, -1};
}

// Plain, and with an affine transform followed by an elementwise neighbour.
inline std::vector<Case> LayerNorm() {
  return {
      {"layer_norm", R"(graph @r(%p0: {T}[{N},{C}] input) {
  %0 = layer_norm %p0 {normalized_ndim = 1, eps = 1e-05} : {T}[{N},{C}]
  return %0
})",
       OneLogits, 1},
      {"layer_norm affine",
       R"(graph @r(%p0: {T}[{N},{C}] input, %w: {T}[{C}] input, %b: {T}[{C}] input) {
  %0 = layer_norm %p0, %w, %b {normalized_ndim = 1, eps = 1e-05} : {T}[{N},{C}]
  %1 = relu %0 : {T}[{N},{C}]
  return %1
})",
       LogitsAndAffine, 1}};
}

inline Case Var() {
  return {"var", R"(graph @r(%p0: {T}[{N},{C}] input) {
  %0 = var %p0 {dims = [1], keepdim = false, correction = 1} : {T}[{N}]
  %1 = sqrt %0 : {T}[{N}]
  return %0, %1
})",
          OneLogits, 0};
}

// Every reduction, with and without label smoothing, and a consumer of the
// loss in the same region.
inline std::vector<Case> CrossEntropy() {
  std::vector<Case> cases;
  for (const char* red : {"mean", "sum", "none"}) {
    for (const char* ls : {"0.0", "0.1"}) {
      const std::string type =
          std::string(red) == "none" ? "{T}[{N}]" : "{T}[]";
      cases.push_back(
          {absl::StrCat("cross_entropy ", red, " label_smoothing ", ls),
           absl::StrCat(
               R"(graph @r(%p0: {T}[{N},{C}] input, %p1: i64[{N}] input, %s: {T}[] input) {
  %0 = cross_entropy %p0, %p1 {reduction = ")",
               red, R"(", label_smoothing = )", ls, "} : ", type, R"(
  %1 = mul %0, %s : )",
               type, R"(
  return %0, %1
})"),
           LogitsTargetsScale, 0});
    }
  }
  return cases;
}

inline std::vector<Case> MseLoss() {
  std::vector<Case> cases;
  for (const char* red : {"mean", "sum", "none"}) {
    const std::string type =
        std::string(red) == "none" ? "{T}[{N},{C}]" : "{T}[]";
    cases.push_back(
        {absl::StrCat("mse_loss ", red),
         absl::StrCat(
             R"(graph @r(%p0: {T}[{N},{C}] input, %p1: {T}[{N},{C}] input) {
  %0 = mse_loss %p0, %p1 {reduction = ")",
             red, R"("} : )", type, R"(
  return %0
})"),
         TwoRows, 0});
  }
  return cases;
}

// Backward patterns, as runtime/autograd/grad_rules.cc writes them.

inline Case SoftmaxBackward() {
  return {"softmax backward",
          R"(graph @r(%y: {T}[{N},{C}] input, %g: {T}[{N},{C}] input) {
  %0 = mul %g, %y : {T}[{N},{C}]
  %1 = sum %0 {dims = [1], keepdim = true} : {T}[{N},1]
  %2 = sub %g, %1 : {T}[{N},{C}]
  %3 = mul %y, %2 : {T}[{N},{C}]
  return %3
})",
          TwoRows, 1};
}

inline Case LogSoftmaxBackward() {
  return {"log_softmax backward",
          R"(graph @r(%y: {T}[{N},{C}] input, %g: {T}[{N},{C}] input) {
  %0 = sum %g {dims = [1], keepdim = true} : {T}[{N},1]
  %1 = exp %y : {T}[{N},{C}]
  %2 = mul %1, %0 : {T}[{N},{C}]
  %3 = sub %g, %2 : {T}[{N},{C}]
  return %3
})",
          LogSoftmaxAndGrad, 8};
}

inline Case LayerNormBackward() {
  return {"layer_norm backward",
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
          LayerNormGradArgs, 16};
}

inline Case CrossEntropyBackward() {
  return {
      "cross_entropy backward",
      R"(graph @r(%x: {T}[{N},{C}] input, %oh: {T}[{N},{C}] input, %s: {T}[] input) {
  %0 = softmax %x {dim = 1} : {T}[{N},{C}]
  %1 = sub %0, %oh : {T}[{N},{C}]
  %2 = mul %1, %s : {T}[{N},{C}]
  return %2
})",
      CrossEntropyGradArgs, 1};
}

}  // namespace stepjit::test::rows

#endif  // STEPJIT_TESTS_UTIL_ROW_CASES_H_
