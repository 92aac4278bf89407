// Independent references for the op tests (tests/runtime/ops/*_test.cc),
// which test the forward values of every op in ir/ops.def against float64
// reference loops written there (never against the library itself):
// dtypes, NumPy broadcasting, non-contiguous inputs, sizes large enough for
// the threaded kernels, storage sharing of views, version counters and
// user errors. Here: independent encodings of the stored formats, tensors
// from and to double vectors, broadcasting arithmetic, tolerances.
//
// Tolerances, as |got - want| <= atol + rtol * |want| for the output dtype:
//   f64  rtol 1e-12, atol 1e-14  (a few ulps of double)
//   f32  rtol 1e-5 (3e-5 for transcendental functions), atol 1e-6
//   f16  rtol 1e-3, atol 1e-5    (one rounding to 11 significant bits: 4.9e-4)
//   bf16 rtol 1e-2, atol 1e-4    (one rounding to 8 significant bits: 3.9e-3)
// Low-precision inputs are read back bit-exactly before the reference runs,
// so the tolerance only has to cover the kernel's arithmetic and the final
// rounding. Matmul scales the tolerance by sum_k |a_ik * b_kj| instead.
#ifndef STEPJIT_TESTS_RUNTIME_OPS_OP_REFERENCE_H_
#define STEPJIT_TESTS_RUNTIME_OPS_OP_REFERENCE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <numbers>
#include <ostream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "devices/matmul_plan.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/dtype.h"
#include "ir/status.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/generator.h"
#include "runtime/ops.h"
#include "runtime/tensor.h"
#include "tests/util/expect_error.h"

namespace stepjit {
namespace ir {
// Readable test-parameter names in gtest messages (internal linkage: every
// test file may have its own).
[[maybe_unused]] static void PrintTo(DType t, std::ostream* os) {
  *os << DTypeName(t);
}
}  // namespace ir

namespace op_test {

using ::testing::HasSubstr;
using Values = std::vector<double>;
using Dims = std::vector<int64_t>;

inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

inline constexpr DType kFloatTypes[] = {DType::kF32, DType::kF64, DType::kF16,
                                        DType::kBF16};
inline constexpr DType kAllTypes[] = {DType::kF32,  DType::kF64, DType::kF16,
                                      DType::kBF16, DType::kI64, DType::kI32,
                                      DType::kBool};

inline std::string Name(DType t) { return std::string(ir::DTypeName(t)); }

// Test names "<case>_<dtype>" for suites over (a case with a `name`, a
// dtype).
struct CaseAndDTypeName {
  template <typename Info>
  std::string operator()(const Info& info) const {
    return std::string(std::get<0>(info.param).name) + "_" +
           Name(std::get<1>(info.param));
  }
};

// ---------------------------------------------------------------------------
// Independent encodings of the stored formats (not the library's
// Half/BFloat16).

// Rounds x to `mant` fraction bits, ties to even, with exponents clamped below
// at `min_exp` (gradual underflow); beyond `max_finite` it overflows to inf.
inline double RoundToFormat(double x, int mant, int min_exp,
                            double max_finite) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  const double a = std::fabs(x);
  int e;
  std::frexp(a, &e);  // a = f * 2^e with f in [0.5, 1)
  const int exp = std::max(e - 1, min_exp);
  const double r =
      std::ldexp(std::nearbyint(std::ldexp(a, mant - exp)), exp - mant);
  return std::copysign(r > max_finite ? kInf : r, x);
}
inline double RoundHalf(double x) { return RoundToFormat(x, 10, -14, 65504.0); }
inline double RoundBF16(double x) {
  return RoundToFormat(x, 7, -126, 3.3895313892515355e38);
}

// The value `v` has once stored in `t` (C++ conversion rules for integers).
inline double RoundTo(double v, DType t) {
  switch (t) {
    case DType::kF32:
      return static_cast<float>(v);
    case DType::kF64:
      return v;
    case DType::kF16:
      return RoundHalf(v);
    case DType::kBF16:
      return RoundBF16(v);
    case DType::kI64:
      return static_cast<double>(static_cast<int64_t>(v));
    case DType::kI32:
      return static_cast<double>(static_cast<int32_t>(v));
    case DType::kBool:
      return v != 0 ? 1.0 : 0.0;
  }
  return v;
}

inline uint16_t HalfBits(double x) {  // x is already a binary16 value
  if (std::isnan(x)) return 0x7e00;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  if (std::isinf(a)) return sign | 0x7c00;
  if (a < std::ldexp(1.0, -14))
    return sign | static_cast<uint16_t>(std::ldexp(a, 24));
  int e;
  const double f = std::frexp(a, &e);
  return sign | static_cast<uint16_t>((e - 1 + 15) << 10) |
         static_cast<uint16_t>(std::ldexp(f, 11) - 1024);
}
inline double HalfValue(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double v = e == 0    ? std::ldexp(m, -24)
                   : e == 31 ? (m ? kNaN : kInf)
                             : std::ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -v : v;
}
inline uint16_t BF16Bits(double x) {  // x is already a bfloat16 value
  if (std::isnan(x)) return 0x7fc0;
  const float f = static_cast<float>(x);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}
inline double BF16Value(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// One element's bytes, which need not be aligned.
template <typename T>
void PutBytes(char* p, T v) {
  std::memcpy(p, &v, sizeof(v));
}
template <typename T>
T TakeBytes(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline void Encode(char* p, double v, DType t) {
  v = RoundTo(v, t);
  switch (t) {
    case DType::kF32:
      return PutBytes(p, static_cast<float>(v));
    case DType::kF64:
      return PutBytes(p, v);
    case DType::kF16:
      return PutBytes(p, HalfBits(v));
    case DType::kBF16:
      return PutBytes(p, BF16Bits(v));
    case DType::kI64:
      return PutBytes(p, static_cast<int64_t>(v));
    case DType::kI32:
      return PutBytes(p, static_cast<int32_t>(v));
    case DType::kBool:
      return PutBytes(p, v != 0);
  }
}
inline double Decode(const char* p, DType t) {
  switch (t) {
    case DType::kF32:
      return TakeBytes<float>(p);
    case DType::kF64:
      return TakeBytes<double>(p);
    case DType::kF16:
      return HalfValue(TakeBytes<uint16_t>(p));
    case DType::kBF16:
      return BF16Value(TakeBytes<uint16_t>(p));
    case DType::kI64:
      return static_cast<double>(TakeBytes<int64_t>(p));
    case DType::kI32:
      return TakeBytes<int32_t>(p);
    case DType::kBool:
      return TakeBytes<uint8_t>(p) != 0 ? 1.0 : 0.0;
  }
  return kNaN;
}

inline int64_t Numel(const Dims& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}
inline Dims ShapeOf(const Tensor& t) {
  return Dims(t.shape().begin(), t.shape().end());
}

// A fresh contiguous tensor holding `v` rounded to `t`, written byte by byte.
inline Tensor Make(const Values& v, const Dims& shape, DType t = DType::kF32) {
  EXPECT_EQ(static_cast<int64_t>(v.size()), Numel(shape));
  Tensor out = empty(shape, {.dtype = t});
  char* p = static_cast<char*>(out.data_ptr());
  for (size_t i = 0; i < v.size(); ++i)
    Encode(p + i * out.element_size(), v[i], t);
  return out;
}

// The elements of any strided view in row-major order, decoded to double.
inline Values Read(const Tensor& t) {
  const int64_t n = t.numel();
  Values out(n);
  const char* base = static_cast<const char*>(t.storage()->data());
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, off = t.offset();
    for (int64_t d = t.dim() - 1; d >= 0; --d) {
      off += (rem % t.shape()[d]) * t.strides()[d];
      rem /= t.shape()[d];
    }
    out[i] = Decode(base + off * t.element_size(), t.dtype());
  }
  return out;
}

inline Values Uniform(int64_t n, double lo, double hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Values v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}
inline Tensor RandomTensor(const Dims& shape, DType t, double lo, double hi,
                           uint64_t seed) {
  return Make(Uniform(Numel(shape), lo, hi, seed), shape, t);
}

inline Dims Unravel(int64_t i, const Dims& shape) {
  Dims idx(shape.size());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  return idx;
}
// Row-major index into `in` (right-aligned, size-1 dims broadcast) of the
// element that output multi-index `idx` reads.
inline int64_t BroadcastIndex(const Dims& idx, const Dims& in) {
  const size_t lead = idx.size() - in.size();
  int64_t lin = 0;
  for (size_t d = 0; d < in.size(); ++d)
    lin = lin * in[d] + (in[d] == 1 ? 0 : idx[lead + d]);
  return lin;
}
inline Dims BroadcastShape(const Dims& a, const Dims& b) {
  const size_t r = std::max(a.size(), b.size());
  Dims out(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// "{1,2}": dims in test messages.
inline std::string DimsString(const Dims& d) {
  std::ostringstream os;
  os << "{";
  for (size_t i = 0; i < d.size(); ++i) os << (i ? "," : "") << d[i];
  os << "}";
  return os.str();
}

struct Tol {
  double rtol, atol;
};
inline Tol TolFor(DType t, bool transcendental = false) {
  switch (t) {
    case DType::kF64:
      return {1e-12, 1e-14};
    case DType::kF32:
      return {transcendental ? 3e-5 : 1e-5, 1e-6};
    case DType::kF16:
      return {1e-3, 1e-5};
    case DType::kBF16:
      return {1e-2, 1e-4};
    default:
      return {0, 0};  // integers and bools are exact
  }
}

inline bool Close(double got, double want, double rtol, double atol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::fabs(got - want) <= atol + rtol * std::fabs(want);
}

inline ::testing::AssertionResult AllClose(const Values& got,
                                           const Values& want, Tol tol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << "size " << got.size() << " vs " << want.size();
  }
  int64_t bad = 0;
  std::ostringstream os;
  os.precision(17);
  for (size_t i = 0; i < got.size(); ++i) {
    if (Close(got[i], want[i], tol.rtol, tol.atol)) continue;
    if (bad++ < 6)
      os << "\n  [" << i << "] got " << got[i] << " want " << want[i];
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " elements differ (rtol " << tol.rtol
         << ", atol " << tol.atol << "):" << os.str();
}

using test::ExpectError;

}  // namespace op_test
}  // namespace stepjit

#endif  // STEPJIT_TESTS_RUNTIME_OPS_OP_REFERENCE_H_
