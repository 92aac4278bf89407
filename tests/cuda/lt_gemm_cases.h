// Host GEMM cases for the cuBLASLt plan tests: random operands with padded
// pitches, the plan interpreted with column-major BLAS semantics in double,
// and comparisons against runtime::cpu::Gemm.
#ifndef STEPJIT_TESTS_CUDA_LT_GEMM_CASES_H_
#define STEPJIT_TESTS_CUDA_LT_GEMM_CASES_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "devices/cpu/gemm.h"
#include "devices/cuda/backend.h"
#include "devices/cuda/cublaslt/cublaslt_plan.h"
#include "gtest/gtest.h"
#include "ir/dtype.h"
#include "ir/gemm_activation.h"
#include "ir/host_math.h"
#include "ir/scalar_def.h"
#include "tests/util/dtype_elements.h"

namespace stepjit::runtime::cuda::lt_test {

using cpu::GemmActivation;
using ir::DType;
using test::LoadElement;
using test::StoreElement;

inline constexpr GemmActivation kActivations[] = {
    GemmActivation(), GemmActivation(ir::OpId::kRelu),
    GemmActivation(ir::OpId::kGelu), GemmActivation(ir::OpId::kGeluTanh)};

inline DType FromLt(LtDataType t) {
  switch (t) {
    case LtDataType::kF64:
      return DType::kF64;
    case LtDataType::kF16:
      return DType::kF16;
    case LtDataType::kBF16:
      return DType::kBF16;
    default:
      return DType::kF32;
  }
}

inline double Activate(GemmActivation act, double x) {
  if (!act.has_value()) return x;
  ir::HostMath<double> m;
  double y = NAN;
  ir::VisitGemmActivation(
      *act, [&]<ir::OpId op>() { y = ir::ScalarDef<op>::Apply(m, x); });
  return y;
}

// out[j] = sum over l < k of op_b(B)[l, j] for j < n: what BGRADB writes to
// the bias pointer and the bias-gradient kernel to post_bias_grad.
inline void SumBOverK(const LtPlan& p, void* out) {
  const DType t = FromLt(p.data_type);
  for (int64_t j = 0; j < p.n; ++j) {
    double s = 0;
    for (int64_t l = 0; l < p.k; ++l) {
      s += LoadElement(p.b.ptr, t,
                       p.op_b == LtOp::kN ? l + j * p.b.ld : j + l * p.b.ld);
    }
    StoreElement(out, t, j, s);
  }
}

// Runs `p` as cuBLASLt defines it, in double: per batch element,
// column-major D = epilogue(alpha op_a(A) op_b(B) + beta C), then the
// epilogue kernels' passes (C row-major, the bias gradient). Checks the
// layouts are the ones the ops need (A m x k after op_a, and so on) first.
inline void RunPlanOnHost(const LtPlan& p) {
  if (p.post_bias_grad != nullptr) {
    ASSERT_EQ(p.batch, 1);
    SumBOverK(p, p.post_bias_grad);
  }
  if (p.no_work) return;
  const DType t = FromLt(p.data_type);
  auto stored = [](LtOp op, int64_t r, int64_t c) {
    return op == LtOp::kN ? std::make_pair(r, c) : std::make_pair(c, r);
  };
  ASSERT_EQ(std::make_pair(p.a.rows, p.a.cols), stored(p.op_a, p.m, p.k));
  ASSERT_EQ(std::make_pair(p.b.rows, p.b.cols), stored(p.op_b, p.k, p.n));
  ASSERT_EQ(p.c.rows, p.m);
  ASSERT_EQ(p.c.cols, p.n);
  for (const LtMatrix* x : {&p.a, &p.b, &p.c})
    ASSERT_GE(x->ld, std::max<int64_t>(1, x->rows));
  auto at = [](const LtMatrix& x, int64_t b, int64_t r, int64_t c) {
    return b * x.batch_stride + r + c * x.ld;
  };
  void* c_ptr = const_cast<void*>(p.c.ptr);
  const bool bias = p.epilogue == LtEpilogue::kBias ||
                    p.epilogue == LtEpilogue::kReluBias ||
                    p.epilogue == LtEpilogue::kGeluBias;
  const bool bias_grad = p.epilogue == LtEpilogue::kBgradB;
  ASSERT_EQ(bias || bias_grad, p.bias != nullptr);
  if (bias_grad) {
    ASSERT_EQ(p.batch, 1);
    ASSERT_EQ(p.post_bias_grad, nullptr) << "the bias gradient twice";
    SumBOverK(p, const_cast<void*>(p.bias));
  }
  GemmActivation act = GemmActivation();
  if (p.epilogue == LtEpilogue::kRelu || p.epilogue == LtEpilogue::kReluBias)
    act = GemmActivation(ir::OpId::kRelu);
  if (p.epilogue == LtEpilogue::kGelu || p.epilogue == LtEpilogue::kGeluBias)
    act = GemmActivation(ir::OpId::kGeluTanh);
  for (int64_t b = 0; b < p.batch && !p.skip_product; ++b) {
    for (int64_t j = 0; j < p.n; ++j) {
      for (int64_t i = 0; i < p.m; ++i) {
        double sum = 0;
        for (int64_t l = 0; l < p.k; ++l) {
          const int64_t ia =
              p.op_a == LtOp::kN ? at(p.a, b, i, l) : at(p.a, b, l, i);
          const int64_t ib =
              p.op_b == LtOp::kN ? at(p.b, b, l, j) : at(p.b, b, j, l);
          sum += LoadElement(p.a.ptr, t, ia) * LoadElement(p.b.ptr, t, ib);
        }
        double x = p.alpha * sum;
        if (p.beta != 0) x += p.beta * LoadElement(c_ptr, t, at(p.c, b, i, j));
        if (bias) x += LoadElement(p.bias, t, i);  // one per row of D
        StoreElement(c_ptr, t, at(p.c, b, i, j), Activate(act, x));
      }
    }
  }
  if (!p.skip_product && p.post_bias == nullptr &&
      p.post_activation == GemmActivation()) {
    return;
  }
  // The kernel's view: the caller's row-major C, rows x cols.
  const int64_t rows = p.n, cols = p.m;
  const bool keep_c = !p.skip_product || p.beta != 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t col = 0; col < cols; ++col) {
        const int64_t i = b * p.c.batch_stride + r * p.c.ld + col;
        double x = keep_c ? LoadElement(c_ptr, t, i) : 0;
        if (p.post_bias != nullptr) x += LoadElement(p.post_bias, t, col);
        StoreElement(c_ptr, t, i, Activate(p.post_activation, x));
      }
    }
  }
}

// Host operands for one GEMM, random, with padded leading dimensions.
struct GemmCase {
  DType dtype = DType::kF32;
  bool trans_a = false, trans_b = false;
  int64_t m = 5, n = 7, k = 4;
  int64_t batch = 1;
  bool broadcast_a = false, broadcast_b = false;
  bool bias = false;
  GemmActivation activation = GemmActivation();
  bool accumulate = false;
  bool allow_tf32 = false;
  bool bias_grad = false;

  std::string Name() const {
    return absl::StrCat(ir::DTypeName(dtype), allow_tf32 ? "(tf32)" : "", " ",
                        trans_a ? "T" : "N", trans_b ? "T" : "N", " m=", m,
                        " n=", n, " k=", k, " batch=", batch,
                        broadcast_a ? " bcastA" : "",
                        broadcast_b ? " bcastB" : "", bias ? " +bias" : "", " ",
                        cpu::GemmActivationName(activation),
                        accumulate ? " +=C" : "", bias_grad ? " +bgrad" : "");
  }
};

struct HostGemm {
  GemmCase c;
  std::vector<char> a, b, out, bias, grad;
  cpu::GemmArgs args;  // pointing into the vectors above

  explicit HostGemm(const GemmCase& gc, uint32_t seed) : c(gc) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> normal;
    const size_t es = ir::DTypeSize(c.dtype);
    auto fill = [&](std::vector<char>& v, int64_t n) {
      v.resize(static_cast<size_t>(std::max<int64_t>(n, 1) * es));
      for (int64_t i = 0; i < n; ++i)
        StoreElement(v.data(), c.dtype, i, normal(gen));
    };
    cpu::GemmArgs& g = args;
    g.dtype = c.dtype;
    g.trans_a = c.trans_a;
    g.trans_b = c.trans_b;
    g.m = c.m;
    g.n = c.n;
    g.k = c.k;
    g.lda = (c.trans_a ? c.m : c.k) + 3;
    g.ldb = (c.trans_b ? c.k : c.n) + 2;
    g.ldc = c.n + 1;
    const int64_t size_a = (c.trans_a ? c.k : c.m) * g.lda;
    const int64_t size_b = (c.trans_b ? c.n : c.k) * g.ldb;
    const int64_t size_c = c.m * g.ldc;
    g.batch = c.batch;
    g.stride_a = c.broadcast_a ? 0 : size_a + 5;
    g.stride_b = c.broadcast_b ? 0 : size_b + 1;
    g.stride_c = size_c + 3;
    fill(a, g.stride_a * (c.batch - 1) + size_a);
    fill(b, g.stride_b * (c.batch - 1) + size_b);
    fill(out, g.stride_c * (c.batch - 1) + size_c);
    g.a = a.data();
    g.b = b.data();
    g.c = out.data();
    if (c.bias) {
      fill(bias, c.n);
      g.bias = bias.data();
    }
    g.activation = c.activation;
    g.accumulate = c.accumulate;
    if (c.bias_grad) {
      fill(grad, c.m);  // overwritten
      g.bias_grad = grad.data();
    }
  }

  DeviceGemmArgs Device() const {
    DeviceGemmArgs d;
    d.gemm = args;
    d.allow_tf32 = c.allow_tf32;
    return d;
  }

  // Per element of C: sum |a||b| + |bias| + |C before|, the size rounding
  // errors are relative to.
  std::vector<double> Scale(const std::vector<char>& c_before) const {
    const cpu::GemmArgs& g = args;
    std::vector<double> s(out.size() / ir::DTypeSize(g.dtype), 0);
    for (int64_t bt = 0; bt < g.batch; ++bt) {
      for (int64_t i = 0; i < g.m; ++i) {
        for (int64_t j = 0; j < g.n; ++j) {
          double v = 0;
          for (int64_t l = 0; l < g.k; ++l) {
            const int64_t ia =
                bt * g.stride_a + (g.trans_a ? l * g.lda + i : i * g.lda + l);
            const int64_t ib =
                bt * g.stride_b + (g.trans_b ? j * g.ldb + l : l * g.ldb + j);
            v += std::abs(LoadElement(g.a, g.dtype, ia) *
                          LoadElement(g.b, g.dtype, ib));
          }
          const int64_t ic = bt * g.stride_c + i * g.ldc + j;
          if (g.bias != nullptr) v += std::abs(LoadElement(g.bias, g.dtype, j));
          if (g.accumulate)
            v += std::abs(LoadElement(c_before.data(), g.dtype, ic));
          s[ic] = std::max(v, 1.0);
        }
      }
    }
    return s;
  }
};

// Elements of C (inside the matrices, not the padding) that differ by more
// than tol * scale; the padding must be untouched.
inline void ExpectClose(const GemmCase& gc, const cpu::GemmArgs& g,
                        const std::vector<char>& got,
                        const std::vector<char>& want,
                        const std::vector<double>& scale, double tol) {
  int bad = 0;
  const int64_t n = static_cast<int64_t>(want.size() / ir::DTypeSize(g.dtype));
  for (int64_t i = 0; i < n; ++i) {
    const double x = LoadElement(got.data(), g.dtype, i);
    const double y = LoadElement(want.data(), g.dtype, i);
    if (scale[i] == 0) {  // padding
      if (std::memcmp(&got[i * ir::DTypeSize(g.dtype)],
                      &want[i * ir::DTypeSize(g.dtype)],
                      ir::DTypeSize(g.dtype)) != 0 &&
          ++bad <= 3) {
        ADD_FAILURE() << gc.Name() << ": padding element " << i
                      << " changed: " << x << " vs " << y;
      }
      continue;
    }
    if (!(std::abs(x - y) <= tol * scale[i]) && ++bad <= 3) {
      ADD_FAILURE() << gc.Name() << ": element " << i << " is " << x
                    << ", expected " << y << " (tolerance " << tol * scale[i]
                    << ")";
    }
  }
  EXPECT_EQ(bad, 0) << gc.Name();
}

// Every transpose, batch kind (1, 3, 3 broadcasting A or B), bias,
// activation and accumulation; single products also with a bias gradient.
inline std::vector<GemmCase> AllCases(DType dtype, int64_t m, int64_t n,
                                      int64_t k) {
  std::vector<GemmCase> out;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (int shape = 0; shape < 3; ++shape) {  // batch 1, 3, 3 broadcast
        for (bool bias : {false, true}) {
          for (GemmActivation act : kActivations) {
            for (int variant = 0; variant < (shape == 0 ? 4 : 2); ++variant) {
              const bool acc = variant % 2 == 1;
              GemmCase c;
              c.dtype = dtype;
              c.trans_a = ta;
              c.trans_b = tb;
              c.m = m;
              c.n = n;
              c.k = k;
              c.batch = shape == 0 ? 1 : 3;
              c.broadcast_a = shape == 2 && tb;
              c.broadcast_b = shape == 2 && !tb;
              c.bias = bias;
              c.activation = act;
              c.accumulate = acc;
              c.bias_grad = variant >= 2;
              out.push_back(c);
            }
          }
        }
      }
    }
  }
  return out;
}

// The bias gradient against `want` (runtime::cpu::Gemm's), each row within
// tol * sum over l of |op(A)[i, l]|.
inline void ExpectBiasGradClose(const GemmCase& gc, const cpu::GemmArgs& g,
                                const std::vector<char>& got,
                                const std::vector<char>& want, double tol) {
  int bad = 0;
  for (int64_t i = 0; i < g.m; ++i) {
    double scale = 0;
    for (int64_t l = 0; l < g.k; ++l) {
      scale += std::abs(
          LoadElement(g.a, g.dtype, g.trans_a ? l * g.lda + i : i * g.lda + l));
    }
    const double x = LoadElement(got.data(), g.dtype, i);
    const double y = LoadElement(want.data(), g.dtype, i);
    if (!(std::abs(x - y) <= tol * std::max(scale, 1.0)) && ++bad <= 3) {
      ADD_FAILURE() << gc.Name() << ": bias gradient " << i << " is " << x
                    << ", expected " << y;
    }
  }
  EXPECT_EQ(bad, 0) << gc.Name();
}

}  // namespace stepjit::runtime::cuda::lt_test

#endif  // STEPJIT_TESTS_CUDA_LT_GEMM_CASES_H_
