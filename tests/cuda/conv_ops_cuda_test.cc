// conv2d, max_pool2d, avg_pool2d and their gradients on the CUDA device
// (devices/cuda/kernels/conv_ops.cc; the host emulator unless
// STEPJIT_TEST_CUDA_BACKEND=driver) against float64 loops written here from
// ir/ops.def's semantics, PyTorch's: the references scatter where the
// kernels gather, and compute output sizes and avg_pool2d's divisors
// themselves. Every op must run on the device (no host round trip).
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "devices/cuda/ops.h"
#include "gtest/gtest.h"
#include "runtime/ops.h"
#include "tests/cuda/cuda_test_backend.h"

namespace stepjit {
namespace {

using test::Values;

const Device kCuda = Device::cuda(0);
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

class ConvOpsCudaTest : public test::CudaTest {};

// Tolerances relative to max(1, |reference|): f32 accumulates at most ~70
// products of values in [-1, 1] in f32 (error below 70 * 2^-24 = 4.2e-6);
// f64 the same in f64. Half precision adds the result's rounding (2^-11 for
// f16, 2^-8 for bf16).
double Tolerance(DType t) {
  switch (t) {
    case DType::kF64:
      return 1e-12;
    case DType::kF16:
      return 2e-3;
    case DType::kBF16:
      return 1e-2;
    default:
      return 1e-5;
  }
}

std::vector<double> Uniform(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v(n);
  for (double& x : v) x = u(gen);
  return v;
}

int64_t Numel(ShapeRef s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// `values` as a `dtype` tensor on the device; with `transposed`, a
// non-contiguous view (the last two dims swapped back) of the same values.
Tensor OnDevice(const std::vector<double>& values, ShapeRef shape, DType dtype,
                bool transposed = false) {
  const Tensor t = from_vector(values, shape).to(dtype);
  if (!transposed) return t.to(kCuda);
  const Tensor swapped = t.permute({0, 1, 3, 2}).contiguous().to(kCuda);
  return swapped.permute({0, 1, 3, 2});
}

void ExpectNear(const Tensor& got, ShapeRef shape,
                const std::vector<double>& want, double tol,
                const std::string& what) {
  ASSERT_TRUE(got.device().is_cuda()) << what;
  ASSERT_EQ(got.shape(), Shape(shape.begin(), shape.end())) << what;
  const std::vector<double> v = Values(got);
  ASSERT_EQ(v.size(), want.size()) << what;
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(want[i]) || std::isinf(want[i])) {
      EXPECT_TRUE(std::isnan(want[i]) ? std::isnan(v[i]) : v[i] == want[i])
          << what << " element " << i << ": " << v[i] << " vs " << want[i];
    } else {
      EXPECT_NEAR(v[i], want[i], tol * std::max(1.0, std::abs(want[i])))
          << what << " element " << i;
    }
  }
}

// PyTorch's output size: windows starting every `s` over the padded input,
// rounded up with ceil_mode unless the last would start in the right
// padding.
int64_t OutSize(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d,
                bool ceil_mode) {
  const int64_t span = in + 2 * p - d * (k - 1) - 1;
  int64_t out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

// Flat index of [a, b, c, d] in a contiguous 4-D `shape`.
int64_t At(ShapeRef shape, int64_t a, int64_t b, int64_t c, int64_t d) {
  return ((a * shape[1] + b) * shape[2] + c) * shape[3] + d;
}

struct ConvCase {
  Shape input;   // [N, C, H, W]
  Shape weight;  // [O, C / groups, KH, KW]
  Conv2dOptions options;
  bool bias;
  bool transposed_input;  // a non-contiguous input view
};

Shape ConvOut(const ConvCase& c) {
  const Conv2dOptions& o = c.options;
  return {c.input[0], c.weight[0],
          OutSize(c.input[2], c.weight[2], o.stride[0], o.padding[0],
                  o.dilation[0], false),
          OutSize(c.input[3], c.weight[3], o.stride[1], o.padding[1],
                  o.dilation[1], false)};
}

struct ConvReference {
  Shape out;
  std::vector<double> y, dx, dw;
};

// The sums of ir/ops.def's conv2d for each (output, input, tap), with the
// gradients for the output gradient `grad` scattered from the same terms.
ConvReference ConvLoops(const ConvCase& c, const std::vector<double>& x,
                        const std::vector<double>& w,
                        const std::vector<double>& b,
                        const std::vector<double>& grad) {
  const Conv2dOptions& o = c.options;
  const int64_t cg = c.weight[1], og = c.weight[0] / o.groups;
  ConvReference r;
  r.out = ConvOut(c);
  r.y.assign(Numel(r.out), 0);
  r.dx.assign(x.size(), 0);
  r.dw.assign(w.size(), 0);
  for (int64_t n = 0; n < r.out[0]; ++n) {
    for (int64_t oc = 0; oc < r.out[1]; ++oc) {
      for (int64_t oy = 0; oy < r.out[2]; ++oy) {
        for (int64_t ox = 0; ox < r.out[3]; ++ox) {
          const int64_t e = At(r.out, n, oc, oy, ox);
          if (c.bias) r.y[e] = b[oc];
          for (int64_t ic = 0; ic < cg; ++ic) {
            for (int64_t i = 0; i < c.weight[2]; ++i) {
              for (int64_t j = 0; j < c.weight[3]; ++j) {
                const int64_t y =
                    oy * o.stride[0] - o.padding[0] + i * o.dilation[0];
                const int64_t xx =
                    ox * o.stride[1] - o.padding[1] + j * o.dilation[1];
                if (y < 0 || y >= c.input[2] || xx < 0 || xx >= c.input[3])
                  continue;
                const int64_t xi = At(c.input, n, oc / og * cg + ic, y, xx);
                const int64_t wi = At(c.weight, oc, ic, i, j);
                r.y[e] += x[xi] * w[wi];
                r.dx[xi] += grad[e] * w[wi];
                r.dw[wi] += grad[e] * x[xi];
              }
            }
          }
        }
      }
    }
  }
  return r;
}

TEST_F(ConvOpsCudaTest, Conv2dAndItsGradientsMatchFloat64Loops) {
  const std::vector<ConvCase> cases = {
      {{2, 4, 7, 5}, {6, 4, 3, 3}, {.padding = {1, 1}}, true, false},
      {{2, 4, 7, 5},
       {4, 2, 3, 2},
       {.stride = {2, 1}, .padding = {0, 1}, .groups = 2},
       false,
       true},
      {{1, 4, 7, 5},
       {2, 2, 2, 3},
       {.stride = {2, 2}, .padding = {1, 1}, .dilation = {2, 2}, .groups = 2},
       true,
       false},
      {{2, 3, 5, 6}, {3, 3, 1, 1}, {.stride = {2, 2}}, true, false},
      {{2, 2, 7, 5},
       {4, 1, 3, 3},
       {.stride = {1, 2}, .padding = {1, 0}, .dilation = {2, 1}, .groups = 2},
       false,
       false},
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    const ConvCase& c = cases[k];
    const uint32_t seed = 10 * k;
    const std::vector<double> x = Uniform(Numel(c.input), seed),
                              w = Uniform(Numel(c.weight), seed + 1),
                              b = Uniform(c.weight[0], seed + 2),
                              g = Uniform(Numel(ConvOut(c)), seed + 3);
    for (DType dt : {DType::kF32, DType::kF64}) {
      const std::string what = absl::StrCat(ir::DTypeName(dt), " case ", k);
      const Tensor dx = OnDevice(x, c.input, dt, c.transposed_input),
                   dwt = OnDevice(w, c.weight, dt),
                   db = c.bias ? OnDevice(b, {c.weight[0]}, dt) : Tensor();
      // The reference reads the values the device holds (rounded to dt).
      const std::vector<double> xs = Values(dx), ws = Values(dwt),
                                bs = c.bias ? Values(db) : b;
      const Tensor dg = OnDevice(g, ConvOut(c), dt);
      const ConvReference r = ConvLoops(c, xs, ws, bs, Values(dg));
      const int64_t fallbacks = runtime::cuda::GetEagerStats().host_fallbacks;
      const Tensor y = conv2d(dx, dwt, db, c.options);
      const Tensor gx = conv2d_backward_input(dg, dwt, c.input, c.options);
      const Tensor gw = conv2d_backward_weight(dg, dx, c.weight, c.options);
      EXPECT_EQ(runtime::cuda::GetEagerStats().host_fallbacks, fallbacks)
          << what << ": " << runtime::cuda::HostFallbackSummary();
      ExpectNear(y, r.out, r.y, Tolerance(dt), "conv2d " + what);
      ExpectNear(gx, c.input, r.dx, Tolerance(dt), "backward_input " + what);
      ExpectNear(gw, c.weight, r.dw, Tolerance(dt), "backward_weight " + what);
    }
  }
}

struct PoolReference {
  Shape out;
  std::vector<double> max, max_dx, avg, avg_dx;
};

// PyTorch's divisor: the window clipped to the padded input
// (count_include_pad) or to the input; 0 when no element is inside.
int64_t Divisor(int64_t y0, int64_t x0, ShapeRef input,
                const Pool2dOptions& o) {
  auto extent = [](int64_t start, int64_t k, int64_t lo, int64_t hi) {
    return std::max<int64_t>(0, std::min(start + k, hi) - std::max(start, lo));
  };
  const int64_t kh = o.kernel_size[0], kw = o.kernel_size[1];
  const int64_t inside =
      extent(y0, kh, 0, input[2]) * extent(x0, kw, 0, input[3]);
  if (inside == 0 || !o.count_include_pad) return inside;
  return extent(y0, kh, -o.padding[0], input[2] + o.padding[0]) *
         extent(x0, kw, -o.padding[1], input[3] + o.padding[1]);
}

Shape PoolOut(ShapeRef input, const Pool2dOptions& o) {
  const std::array<int64_t, 2> s = o.stride.value_or(o.kernel_size);
  Shape out = {input[0], input[1], 0, 0};
  for (int d = 0; d < 2; ++d) {
    out[2 + d] = OutSize(input[2 + d], o.kernel_size[d], s[d], o.padding[d],
                         o.dilation[d], o.ceil_mode);
  }
  return out;
}

// max_pool2d and avg_pool2d of `x` (`o.dilation` for max only) and their
// gradients for the output gradient `grad`, scattered.
PoolReference PoolLoops(ShapeRef input, const Pool2dOptions& o,
                        const std::vector<double>& x,
                        const std::vector<double>& grad) {
  const std::array<int64_t, 2> s = o.stride.value_or(o.kernel_size);
  PoolReference r;
  r.out = PoolOut(input, o);
  r.max.assign(Numel(r.out), 0);
  r.avg.assign(Numel(r.out), 0);
  r.max_dx.assign(x.size(), 0);
  r.avg_dx.assign(x.size(), 0);
  for (int64_t p = 0; p < input[0] * input[1]; ++p) {
    for (int64_t oy = 0; oy < r.out[2]; ++oy) {
      for (int64_t ox = 0; ox < r.out[3]; ++ox) {
        const int64_t e = (p * r.out[2] + oy) * r.out[3] + ox;
        const int64_t y0 = oy * s[0] - o.padding[0],
                      x0 = ox * s[1] - o.padding[1];
        int64_t pick = -1;
        double sum = 0;
        for (int64_t i = 0; i < o.kernel_size[0]; ++i) {
          for (int64_t j = 0; j < o.kernel_size[1]; ++j) {
            const int64_t my = y0 + i * o.dilation[0],
                          mx = x0 + j * o.dilation[1];
            if (my >= 0 && my < input[2] && mx >= 0 && mx < input[3]) {
              const int64_t at = (p * input[2] + my) * input[3] + mx;
              if (pick < 0 || x[at] > x[pick] || std::isnan(x[at])) pick = at;
            }
            if (y0 + i >= 0 && y0 + i < input[2] && x0 + j >= 0 &&
                x0 + j < input[3])
              sum += x[(p * input[2] + y0 + i) * input[3] + x0 + j];
          }
        }
        r.max[e] =
            pick >= 0 ? x[pick] : -std::numeric_limits<double>::infinity();
        if (pick >= 0) r.max_dx[pick] += grad[e];
        const int64_t div = Divisor(y0, x0, input, o);
        r.avg[e] = div > 0 ? sum / div : 0;
        for (int64_t my = std::max<int64_t>(y0, 0);
             my < std::min(y0 + o.kernel_size[0], input[2]); ++my) {
          for (int64_t mx = std::max<int64_t>(x0, 0);
               mx < std::min(x0 + o.kernel_size[1], input[3]); ++mx)
            r.avg_dx[(p * input[2] + my) * input[3] + mx] += grad[e] / div;
        }
      }
    }
  }
  return r;
}

// Both pools and their gradients of `x` on the device against PoolLoops;
// avg_pool2d only when the options have no dilation.
void CheckPools(ShapeRef input, const Pool2dOptions& o,
                const std::vector<double>& x, DType dt, bool transposed,
                const std::string& what) {
  const Tensor dx = OnDevice(x, input, dt, transposed);
  const Shape out = PoolOut(input, o);
  const Tensor dg = OnDevice(Uniform(Numel(out), 7), out, dt);
  const PoolReference r = PoolLoops(input, o, Values(dx), Values(dg));
  const bool avg = o.dilation == (std::array<int64_t, 2>{1, 1});
  const int64_t fallbacks = runtime::cuda::GetEagerStats().host_fallbacks;
  const Tensor mx = max_pool2d(dx, o);
  const Tensor mg = max_pool2d_backward(dg, dx, o);
  const Tensor av = avg ? avg_pool2d(dx, o) : Tensor();
  const Tensor ag = avg ? avg_pool2d_backward(dg, input, o) : Tensor();
  EXPECT_EQ(runtime::cuda::GetEagerStats().host_fallbacks, fallbacks)
      << what << ": " << runtime::cuda::HostFallbackSummary();
  const double tol = Tolerance(dt);
  ExpectNear(mx, r.out, r.max, tol, "max_pool2d " + what);
  ExpectNear(mg, input, r.max_dx, tol, "max_pool2d_backward " + what);
  if (!avg) return;
  ExpectNear(av, r.out, r.avg, tol, "avg_pool2d " + what);
  ExpectNear(ag, input, r.avg_dx, tol, "avg_pool2d_backward " + what);
}

struct PoolCase {
  Shape input;
  Pool2dOptions options;
  bool transposed_input;
};

TEST_F(ConvOpsCudaTest, PoolsAndTheirGradientsMatchFloat64Loops) {
  const std::vector<PoolCase> cases = {
      {{2, 4, 7, 5},
       {.kernel_size = {3, 3}, .stride = {{2, 2}}, .padding = {1, 1}},
       false},
      {{2, 4, 7, 5},
       {.kernel_size = {3, 2},
        .stride = {{2, 2}},
        .padding = {1, 0},
        .ceil_mode = true,
        .count_include_pad = false},
       true},
      {{2, 4, 7, 5}, {.kernel_size = {2, 2}, .stride = {{1, 1}}}, false},
      {{1, 3, 8, 6},
       {.kernel_size = {3, 3},
        .stride = {{2, 2}},
        .padding = {1, 1},
        .ceil_mode = true},
       false},
      {{2, 4, 7, 5}, {.kernel_size = {2, 2}, .ceil_mode = true}, false},
      {{2, 4, 7, 5},
       {.kernel_size = {3, 3},
        .stride = {{2, 1}},
        .padding = {1, 1},
        .ceil_mode = true,
        .count_include_pad = false},
       false},
      {{2, 2, 7, 5},
       {.kernel_size = {2, 3},
        .stride = {{1, 2}},
        .padding = {1, 1},
        .dilation = {2, 2}},
       false},
      {{2, 2, 7, 5},
       {.kernel_size = {3, 2},
        .stride = {{2, 2}},
        .padding = {1, 0},
        .dilation = {1, 2},
        .ceil_mode = true},
       true},
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    const std::vector<double> x = Uniform(Numel(cases[k].input), 50 + k);
    for (DType dt : {DType::kF32, DType::kF64}) {
      CheckPools(cases[k].input, cases[k].options, x, dt,
                 cases[k].transposed_input,
                 absl::StrCat(ir::DTypeName(dt), " case ", k));
    }
  }
}

// Values from {-1, 0, 1} tie in most windows; a window holding two NaNs
// must pick the later one (its gradient goes there), one holding a NaN and
// ties after it must keep the NaN.
TEST_F(ConvOpsCudaTest, MaxPoolPicksTheFirstLargestOrTheLastNaN) {
  const Shape input = {2, 3, 5, 6};
  std::vector<double> x = Uniform(Numel(input), 99);
  for (double& v : x) v = std::round(v);
  x[At(input, 0, 0, 1, 1)] = kNaN;
  x[At(input, 0, 0, 1, 2)] = kNaN;
  x[At(input, 1, 2, 3, 0)] = kNaN;
  x[At(input, 1, 2, 3, 1)] = 1;
  x[At(input, 1, 2, 4, 0)] = 1;
  for (DType dt : {DType::kF32, DType::kF64}) {
    for (const Pool2dOptions& o :
         {Pool2dOptions{
              .kernel_size = {3, 3}, .stride = {{1, 1}}, .padding = {1, 1}},
          Pool2dOptions{
              .kernel_size = {2, 3}, .stride = {{2, 2}}, .ceil_mode = true}}) {
      CheckPools(input, o, x, dt, false,
                 absl::StrCat(ir::DTypeName(dt), " kernel ", o.kernel_size[0],
                              "x", o.kernel_size[1]));
    }
  }
}

// Kernel 2, padding 1, dilation 3 over a height of 2 reads rows -1 and 2:
// every window is padding, gives -inf as on the CPU and takes no gradient.
TEST_F(ConvOpsCudaTest, MaxPoolWindowWhollyInThePaddingGivesMinusInfinity) {
  const Shape input = {1, 2, 2, 4};
  const Pool2dOptions o{.kernel_size = {2, 2},
                        .stride = {{1, 1}},
                        .padding = {1, 1},
                        .dilation = {3, 3}};
  CheckPools(input, o, Uniform(Numel(input), 5), DType::kF32, false,
             "all padding");
}

// f16 and bf16 load into f32 and round the result once.
TEST_F(ConvOpsCudaTest, HalfPrecisionConvAndPoolsRunOnTheDevice) {
  const ConvCase c{{2, 4, 7, 5},
                   {4, 2, 3, 3},
                   {.stride = {2, 1}, .padding = {1, 1}, .groups = 2},
                   true,
                   false};
  for (DType dt : {DType::kF16, DType::kBF16}) {
    const Tensor x = OnDevice(Uniform(Numel(c.input), 3), c.input, dt),
                 w = OnDevice(Uniform(Numel(c.weight), 4), c.weight, dt),
                 b = OnDevice(Uniform(c.weight[0], 5), {c.weight[0]}, dt);
    const std::vector<double> xs = Values(x), ws = Values(w), bs = Values(b);
    const Tensor g = OnDevice(Uniform(Numel(ConvOut(c)), 6), ConvOut(c), dt);
    const ConvReference r = ConvLoops(c, xs, ws, bs, Values(g));
    const int64_t fallbacks = runtime::cuda::GetEagerStats().host_fallbacks;
    const Tensor y = conv2d(x, w, b, c.options);
    const Tensor gx = conv2d_backward_input(g, w, c.input, c.options);
    const Tensor gw = conv2d_backward_weight(g, x, c.weight, c.options);
    EXPECT_EQ(runtime::cuda::GetEagerStats().host_fallbacks, fallbacks)
        << runtime::cuda::HostFallbackSummary();
    const std::string what(ir::DTypeName(dt));
    ExpectNear(y, r.out, r.y, Tolerance(dt), "conv2d " + what);
    ExpectNear(gx, c.input, r.dx, Tolerance(dt), "backward_input " + what);
    ExpectNear(gw, c.weight, r.dw, Tolerance(dt), "backward_weight " + what);
    CheckPools(c.input,
               {.kernel_size = {3, 3},
                .stride = {{2, 2}},
                .padding = {1, 1},
                .ceil_mode = true,
                .count_include_pad = false},
               Uniform(Numel(c.input), 8), dt, false, what);
  }
}

}  // namespace
}  // namespace stepjit
