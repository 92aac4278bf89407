// conv2d, max_pool2d, avg_pool2d and their gradient ops: strides,
// paddings, dilations, groups, ceil_mode and count_include_pad, against the
// float64 reference loops below (PyTorch's definitions, written out), with
// the tolerances of tests/runtime/ops/op_reference.h; conv sums scale theirs
// by sum |x w| as matmul does. Convolutions run through both CPU paths:
// oneDNN's primitives and the im2col + GEMM reference.
#include "devices/cpu/conv_dnnl.h"
#include "tests/runtime/ops/op_reference.h"

namespace stepjit::op_test {
namespace {

struct Geometry {
  int64_t kh, kw, sh, sw, ph, pw, dh, dw, groups;
};

int64_t OutSize(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d,
                bool ceil_mode) {
  const int64_t span = in + 2 * p - d * (k - 1) - 1;
  int64_t out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

// out[n, o, y, x] and its error scale sum |x w| (+ |bias|).
Values RefConv(const Values& x, const Dims& xs, const Values& w, const Dims& ws,
               const Values* bias, const Geometry& g, Dims* out_shape,
               Values* scale) {
  const int64_t n = xs[0], c = xs[1], h = xs[2], wd = xs[3];
  const int64_t o = ws[0], cg = ws[1], og = o / g.groups;
  const int64_t oh = OutSize(h, g.kh, g.sh, g.ph, g.dh, false),
                ow = OutSize(wd, g.kw, g.sw, g.pw, g.dw, false);
  *out_shape = {n, o, oh, ow};
  Values out, sc;
  for (int64_t s = 0; s < n; ++s)
    for (int64_t oc = 0; oc < o; ++oc)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t xx = 0; xx < ow; ++xx) {
          double acc = bias ? (*bias)[oc] : 0,
                 mag = bias ? std::fabs((*bias)[oc]) : 0;
          const int64_t grp = oc / og;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t ky = 0; ky < g.kh; ++ky)
              for (int64_t kx = 0; kx < g.kw; ++kx) {
                const int64_t iy = y * g.sh - g.ph + ky * g.dh,
                              ix = xx * g.sw - g.pw + kx * g.dw;
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                const double a =
                    x[((s * c + grp * cg + ci) * h + iy) * wd + ix];
                const double b = w[((oc * cg + ci) * g.kh + ky) * g.kw + kx];
                acc += a * b;
                mag += std::fabs(a * b);
              }
          out.push_back(acc);
          sc.push_back(mag);
        }
  *scale = sc;
  return out;
}

// Close within `tol` scaled by each element's error scale.
::testing::AssertionResult ScaledClose(const Values& got, const Values& want,
                                       const Values& scale, Tol tol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure()
           << "size " << got.size() << " vs " << want.size();
  int bad = 0;
  std::ostringstream os;
  os.precision(17);
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::fabs(got[i] - want[i]) <= tol.atol + tol.rtol * scale[i]) continue;
    if (bad++ < 6)
      os << "\n  [" << i << "] got " << got[i] << " want " << want[i]
         << " scale " << scale[i];
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " differ:" << os.str();
}

Conv2dOptions Options(const Geometry& g) {
  return {.stride = {g.sh, g.sw},
          .padding = {g.ph, g.pw},
          .dilation = {g.dh, g.dw},
          .groups = g.groups};
}

const Geometry kGeometries[] = {
    {3, 3, 1, 1, 0, 0, 1, 1, 1}, {3, 3, 1, 1, 1, 1, 1, 1, 1},
    {3, 2, 2, 1, 1, 0, 1, 1, 1}, {3, 3, 2, 2, 2, 1, 2, 1, 1},
    {1, 1, 1, 1, 0, 0, 1, 1, 2}, {3, 3, 1, 2, 1, 1, 1, 2, 2},
    {2, 3, 3, 2, 1, 1, 2, 2, 4}};

using runtime::cpu::ConvBackend;

// Sets the CPU convolution path for one scope.
class BackendScope {
 public:
  explicit BackendScope(ConvBackend b)
      : previous_(runtime::cpu::SetConvBackend(b)) {}
  ~BackendScope() { runtime::cpu::SetConvBackend(previous_); }
  BackendScope(const BackendScope&) = delete;
  BackendScope& operator=(const BackendScope&) = delete;

 private:
  ConvBackend previous_;
};

const char* BackendName(ConvBackend b) {
  return b == ConvBackend::kOneDnn      ? "onednn"
         : b == ConvBackend::kReference ? "reference"
                                        : "auto";
}

class ConvTest
    : public ::testing::TestWithParam<std::tuple<DType, ConvBackend>> {};

TEST_P(ConvTest, ForwardAndBothGradientsMatchTheReference) {
  const DType t = std::get<0>(GetParam());
  const BackendScope backend(std::get<1>(GetParam()));
  Tol tol = TolFor(t);
  if (t == DType::kF32) tol = {1e-6, 1e-7};  // scaled by sum |x w|
  int seed = 0;
  for (const Geometry& g : kGeometries) {
    for (bool with_bias : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << "k " << g.kh << "x" << g.kw << " s " << g.sh << ","
                   << g.sw << " p " << g.ph << "," << g.pw << " d " << g.dh
                   << "," << g.dw << " groups " << g.groups << " bias "
                   << with_bias << " " << Name(t));
      const Dims xs{2, 4, 7, 6}, ws{8, 4 / g.groups, g.kh, g.kw};
      const Tensor x = RandomTensor(xs, t, -1, 1, ++seed);
      const Tensor w = RandomTensor(ws, t, -1, 1, ++seed);
      const Tensor b = RandomTensor({8}, t, -1, 1, ++seed);
      const Values bv = Read(b);
      Dims os;
      Values scale;
      const Values want = RefConv(Read(x), xs, Read(w), ws,
                                  with_bias ? &bv : nullptr, g, &os, &scale);
      const Tensor y = conv2d(x, w, with_bias ? b : Tensor(), Options(g));
      ASSERT_EQ(ShapeOf(y), os);
      ASSERT_EQ(y.dtype(), t);
      EXPECT_TRUE(ScaledClose(Read(y), want, scale, tol));

      // Gradients against the reference's own: d/dx and d/dw of
      // sum(gy * conv(x, w)), by the chain rule written as loops.
      const Tensor gy = RandomTensor(os, t, -1, 1, ++seed);
      const Values gv = Read(gy), xv = Read(x), wv = Read(w);
      Values gx(xv.size(), 0.0), gxs(xv.size(), 0.0), gw(wv.size(), 0.0),
          gws(wv.size(), 0.0);
      const int64_t og = ws[0] / g.groups;
      for (int64_t s = 0; s < os[0]; ++s)
        for (int64_t oc = 0; oc < os[1]; ++oc)
          for (int64_t yy = 0; yy < os[2]; ++yy)
            for (int64_t xx = 0; xx < os[3]; ++xx) {
              const double gval =
                  gv[((s * os[1] + oc) * os[2] + yy) * os[3] + xx];
              for (int64_t ci = 0; ci < ws[1]; ++ci)
                for (int64_t ky = 0; ky < g.kh; ++ky)
                  for (int64_t kx = 0; kx < g.kw; ++kx) {
                    const int64_t iy = yy * g.sh - g.ph + ky * g.dh,
                                  ix = xx * g.sw - g.pw + kx * g.dw;
                    if (iy < 0 || iy >= xs[2] || ix < 0 || ix >= xs[3])
                      continue;
                    const int64_t xi =
                        ((s * xs[1] + oc / og * ws[1] + ci) * xs[2] + iy) *
                            xs[3] +
                        ix;
                    const int64_t wi =
                        ((oc * ws[1] + ci) * g.kh + ky) * g.kw + kx;
                    gx[xi] += gval * wv[wi];
                    gxs[xi] += std::fabs(gval * wv[wi]);
                    gw[wi] += gval * xv[xi];
                    gws[wi] += std::fabs(gval * xv[xi]);
                  }
            }
      const Tensor dx = conv2d_backward_input(gy, w, x.shape(), Options(g));
      ASSERT_EQ(ShapeOf(dx), xs);
      EXPECT_TRUE(ScaledClose(Read(dx), gx, gxs, tol));
      const Tensor dw = conv2d_backward_weight(gy, x, w.shape(), Options(g));
      ASSERT_EQ(ShapeOf(dw), ws);
      EXPECT_TRUE(ScaledClose(Read(dw), gw, gws, tol));
    }
  }
}

// (oneDNN computes in f32: f64 always takes the reference path.)
INSTANTIATE_TEST_SUITE_P(
    Dtypes, ConvTest,
    ::testing::Values(std::make_tuple(DType::kF32, ConvBackend::kOneDnn),
                      std::make_tuple(DType::kF32, ConvBackend::kReference),
                      std::make_tuple(DType::kF64, ConvBackend::kAuto),
                      std::make_tuple(DType::kBF16, ConvBackend::kOneDnn),
                      std::make_tuple(DType::kBF16, ConvBackend::kReference)),
    [](const auto& info) {
      return std::string(Name(std::get<0>(info.param))) + "_" +
             BackendName(std::get<1>(info.param));
    });

// Wide channels, where oneDNN picks blocked layouts and its vectorized
// kernels: each pass in f32 and bf16 through oneDNN against the same pass
// in f64 (the reference path, itself checked against loops above).
TEST(ConvOpsTest, OneDnnMatchesFloat64OnWideChannels) {
  struct Case {
    Dims x, w;
    Geometry g;
  };
  const Case cases[] = {
      {{3, 16, 9, 9}, {32, 16, 3, 3}, {3, 3, 1, 1, 1, 1, 1, 1, 1}},
      {{2, 32, 11, 10}, {32, 16, 3, 3}, {3, 3, 2, 2, 1, 1, 1, 1, 2}},
      {{5, 24, 8, 8}, {48, 24, 1, 1}, {1, 1, 1, 1, 0, 0, 1, 1, 1}},
      {{1, 64, 13, 13}, {16, 64, 5, 5}, {5, 5, 3, 3, 2, 2, 1, 1, 1}},
      {{2, 16, 12, 12}, {16, 1, 3, 3}, {3, 3, 1, 1, 2, 2, 2, 2, 16}},
  };
  const BackendScope backend(ConvBackend::kOneDnn);
  int seed = 100;
  for (const DType t : {DType::kF32, DType::kBF16})
    for (const Case& c : cases) {
      SCOPED_TRACE(::testing::Message()
                   << "x " << ::testing::PrintToString(c.x) << " w "
                   << ::testing::PrintToString(c.w) << " groups "
                   << c.g.groups);
      // bf16 (native kernels where the CPU has them): the operands are exact
      // in f64 too; each result is rounded once to bf16 (2^-8 relative).
      const double rel = t == DType::kBF16 ? 0x1p-8 : 0;
      const Tensor x = RandomTensor(c.x, t, -1, 1, ++seed);
      const Tensor w = RandomTensor(c.w, t, -1, 1, ++seed);
      const Tensor b = RandomTensor({c.w[0]}, t, -1, 1, ++seed);
      const Tensor x64 = x.to(DType::kF64), w64 = w.to(DType::kF64),
                   b64 = b.to(DType::kF64);
      const Tensor y = conv2d(x, w, b, Options(c.g));
      const Tensor y64 = conv2d(x64, w64, b64, Options(c.g));
      const Values bv = Read(b);
      Dims os;
      Values scale;
      RefConv(Read(x), c.x, Read(w), c.w, &bv, c.g, &os, &scale);
      ASSERT_EQ(ShapeOf(y), os);
      ASSERT_EQ(y.dtype(), t);
      // Close within 1e-6 of the error scale, plus the final rounding.
      auto close = [rel](const Values& got, const Values& want,
                         const Values& sc) {
        Values widened = sc;
        for (size_t i = 0; i < sc.size(); ++i)
          widened[i] = sc[i] + rel * std::fabs(want[i]) / 1e-6;
        return ScaledClose(got, want, widened, {1e-6, 1e-6});
      };
      EXPECT_TRUE(close(Read(y), Read(y64), scale));

      const Tensor gy = RandomTensor(os, t, -1, 1, ++seed);
      const Tensor gy64 = gy.to(DType::kF64);
      const Tensor dx = conv2d_backward_input(gy, w, x.shape(), Options(c.g));
      const Tensor dx64 =
          conv2d_backward_input(gy64, w64, x.shape(), Options(c.g));
      const Values dx_scale(static_cast<size_t>(dx.numel()),
                            static_cast<double>(c.w[0] * c.w[2] * c.w[3]));
      EXPECT_TRUE(close(Read(dx), Read(dx64), dx_scale));
      const Tensor dw = conv2d_backward_weight(gy, x, w.shape(), Options(c.g));
      const Tensor dw64 =
          conv2d_backward_weight(gy64, x64, w.shape(), Options(c.g));
      const Values dw_scale(static_cast<size_t>(dw.numel()),
                            static_cast<double>(os[0] * os[2] * os[3]));
      EXPECT_TRUE(close(Read(dw), Read(dw64), dw_scale));
    }
}

TEST(ConvOpsTest, NonContiguousOperandsAndOneByOneImages) {
  // A permuted (channels-last) input and weight; a 1x1 image with padding.
  const Tensor base = RandomTensor({2, 5, 6, 3}, DType::kF64, -1, 1, 7);
  const Tensor x = base.permute({0, 3, 1, 2});  // [2, 3, 5, 6], strided
  const Tensor w = RandomTensor({4, 3, 2, 2}, DType::kF64, -1, 1, 8);
  Dims os;
  Values scale;
  const Geometry g{2, 2, 1, 1, 1, 1, 1, 1, 1};
  const Values want = RefConv(Read(x), ShapeOf(x), Read(w), ShapeOf(w), nullptr,
                              g, &os, &scale);
  EXPECT_TRUE(ScaledClose(Read(conv2d(x, w, Tensor(), Options(g))), want, scale,
                          TolFor(DType::kF64)));
  const Tensor one = RandomTensor({1, 2, 1, 1}, DType::kF64, -1, 1, 9);
  const Tensor w1 = RandomTensor({3, 2, 3, 3}, DType::kF64, -1, 1, 10);
  const Geometry g1{3, 3, 1, 1, 1, 1, 1, 1, 1};
  const Values want1 = RefConv(Read(one), ShapeOf(one), Read(w1), ShapeOf(w1),
                               nullptr, g1, &os, &scale);
  EXPECT_TRUE(ScaledClose(Read(conv2d(one, w1, Tensor(), Options(g1))), want1,
                          scale, TolFor(DType::kF64)));
}

// Pooling references.
struct PoolGeometry {
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  bool ceil_mode, count_include_pad;
};

Pool2dOptions PoolOptions(const PoolGeometry& g) {
  return {.kernel_size = {g.kh, g.kw},
          .stride = std::array<int64_t, 2>{g.sh, g.sw},
          .padding = {g.ph, g.pw},
          .dilation = {g.dh, g.dw},
          .ceil_mode = g.ceil_mode,
          .count_include_pad = g.count_include_pad};
}

// max_pool2d's value and pick (flat input index) per output, PyTorch's rule.
void RefMaxPool(const Values& x, const Dims& xs, const PoolGeometry& g,
                Dims* os, Values* value, std::vector<int64_t>* pick) {
  const int64_t planes = xs[0] * xs[1], h = xs[2], w = xs[3];
  const int64_t oh = OutSize(h, g.kh, g.sh, g.ph, g.dh, g.ceil_mode),
                ow = OutSize(w, g.kw, g.sw, g.pw, g.dw, g.ceil_mode);
  *os = {xs[0], xs[1], oh, ow};
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t y = 0; y < oh; ++y)
      for (int64_t xx = 0; xx < ow; ++xx) {
        int64_t best = -1;
        double bv = 0;
        for (int64_t ky = 0; ky < g.kh; ++ky)
          for (int64_t kx = 0; kx < g.kw; ++kx) {
            const int64_t iy = y * g.sh - g.ph + ky * g.dh,
                          ix = xx * g.sw - g.pw + kx * g.dw;
            if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
            const int64_t at = (p * h + iy) * w + ix;
            if (best < 0 || x[at] > bv || std::isnan(x[at])) {
              best = at;
              bv = x[at];
            }
          }
        value->push_back(bv);
        pick->push_back(best);
      }
}

Values RefAvgPool(const Values& x, const Dims& xs, const PoolGeometry& g,
                  Dims* os, std::vector<double>* divisors) {
  const int64_t planes = xs[0] * xs[1], h = xs[2], w = xs[3];
  const int64_t oh = OutSize(h, g.kh, g.sh, g.ph, 1, g.ceil_mode),
                ow = OutSize(w, g.kw, g.sw, g.pw, 1, g.ceil_mode);
  *os = {xs[0], xs[1], oh, ow};
  Values out;
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t y = 0; y < oh; ++y)
      for (int64_t xx = 0; xx < ow; ++xx) {
        int64_t y0 = y * g.sh - g.ph, x0 = xx * g.sw - g.pw;
        int64_t y1 = std::min(y0 + g.kh, h + g.ph),
                x1 = std::min(x0 + g.kw, w + g.pw);
        const int64_t padded = (y1 - y0) * (x1 - x0);
        y0 = std::max<int64_t>(y0, 0);
        x0 = std::max<int64_t>(x0, 0);
        y1 = std::min(y1, h);
        x1 = std::min(x1, w);
        double sum = 0;
        for (int64_t iy = y0; iy < y1; ++iy)
          for (int64_t ix = x0; ix < x1; ++ix) sum += x[(p * h + iy) * w + ix];
        const double div = g.count_include_pad ? padded : (y1 - y0) * (x1 - x0);
        divisors->push_back(div);
        out.push_back(div > 0 ? sum / div : 0);
      }
  return out;
}

const PoolGeometry kPools[] = {{2, 2, 2, 2, 0, 0, 1, 1, false, true},
                               {3, 3, 2, 2, 1, 1, 1, 1, false, true},
                               {3, 3, 2, 2, 1, 1, 1, 1, true, false},
                               {3, 2, 1, 2, 1, 0, 1, 1, true, true},
                               {2, 3, 3, 2, 1, 1, 2, 1, true, false},
                               {3, 3, 3, 3, 0, 0, 1, 1, true, true}};

class PoolTest : public ::testing::TestWithParam<DType> {};

TEST_P(PoolTest, MaxAndAvgPoolAndTheirGradientsMatchTheReference) {
  const DType t = GetParam();
  int seed = 100;
  for (const PoolGeometry& g : kPools) {
    SCOPED_TRACE(::testing::Message()
                 << "k " << g.kh << "x" << g.kw << " s " << g.sh << "," << g.sw
                 << " p " << g.ph << "," << g.pw << " d " << g.dh << "," << g.dw
                 << " ceil " << g.ceil_mode << " include_pad "
                 << g.count_include_pad << " " << Name(t));
    const Dims xs{2, 3, 7, 8};
    const Tensor x = RandomTensor(xs, t, -2, 2, ++seed);
    const Values xv = Read(x);
    Dims os;
    Values mv;
    std::vector<int64_t> pick;
    RefMaxPool(xv, xs, g, &os, &mv, &pick);
    const Tensor m = max_pool2d(x, PoolOptions(g));
    ASSERT_EQ(ShapeOf(m), os);
    EXPECT_TRUE(AllClose(Read(m), mv, {0, 0}));  // a max is exact
    const Tensor gy = RandomTensor(os, t, -1, 1, ++seed);
    const Values gv = Read(gy);
    Values want(xv.size(), 0.0);
    for (size_t i = 0; i < pick.size(); ++i) want[pick[i]] += gv[i];
    EXPECT_TRUE(AllClose(Read(max_pool2d_backward(gy, x, PoolOptions(g))), want,
                         TolFor(t)));
    if (g.dh != 1 || g.dw != 1) continue;  // avg_pool2d has no dilation
    std::vector<double> div;
    const Values av = RefAvgPool(xv, xs, g, &os, &div);
    const Tensor a = avg_pool2d(x, PoolOptions(g));
    ASSERT_EQ(ShapeOf(a), os);
    EXPECT_TRUE(AllClose(Read(a), av, TolFor(t)));
    const Tensor ga = RandomTensor(os, t, -1, 1, ++seed);
    const Values gav = Read(ga);
    Values wantx(xv.size(), 0.0);
    const int64_t h = xs[2], w = xs[3];
    for (int64_t p = 0; p < xs[0] * xs[1]; ++p)
      for (int64_t y = 0; y < os[2]; ++y)
        for (int64_t xx = 0; xx < os[3]; ++xx) {
          const size_t o = (p * os[2] + y) * os[3] + xx;
          if (div[o] == 0) continue;
          for (int64_t iy = std::max<int64_t>(y * g.sh - g.ph, 0);
               iy < std::min(y * g.sh - g.ph + g.kh, h); ++iy)
            for (int64_t ix = std::max<int64_t>(xx * g.sw - g.pw, 0);
                 ix < std::min(xx * g.sw - g.pw + g.kw, w); ++ix)
              wantx[(p * h + iy) * w + ix] += gav[o] / div[o];
        }
    EXPECT_TRUE(
        AllClose(Read(avg_pool2d_backward(ga, x.shape(), PoolOptions(g))),
                 wantx, TolFor(t)));
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, PoolTest,
                         ::testing::Values(DType::kF32, DType::kF64,
                                           DType::kBF16, DType::kF16),
                         [](const auto& info) { return Name(info.param); });

// Rows long enough for whole vectors and a partial one, values with many
// ties, NaNs, and windows of -inf only: the picks follow PyTorch's rule
// (the first largest, the last NaN; a window of -inf picks its first tap).
TEST(PoolOpsTest, MaxPoolOnWideRowsWithTiesNaNAndInfinities) {
  for (const DType t : {DType::kF32, DType::kF64, DType::kBF16}) {
    for (const PoolGeometry& g : kPools) {
      SCOPED_TRACE(::testing::Message()
                   << "k " << g.kh << "x" << g.kw << " s " << g.sh << ","
                   << g.sw << " p " << g.ph << "," << g.pw << " d " << g.dh
                   << "," << g.dw << " " << Name(t));
      const Dims xs{2, 2, 9, 37};
      Values xv = Read(RandomTensor(xs, DType::kF64, -3, 3, 41));
      for (size_t i = 0; i < xv.size(); ++i) {
        xv[i] = std::round(xv[i]);  // ties
        if (i % 53 == 7) xv[i] = std::nan("");
        if (i % 5 == 0 || (i / 37) % 9 == 4) xv[i] = -INFINITY;
      }
      const Tensor x = Make(xv, xs, t);
      Dims os;
      Values mv;
      std::vector<int64_t> pick;
      RefMaxPool(xv, xs, g, &os, &mv, &pick);
      const Tensor m = max_pool2d(x, PoolOptions(g));
      ASSERT_EQ(ShapeOf(m), os);
      const Values got = Read(m);
      for (size_t i = 0; i < got.size(); ++i) {
        if (std::isnan(mv[i])) {
          EXPECT_TRUE(std::isnan(got[i])) << i;
        } else {
          EXPECT_EQ(got[i], mv[i]) << i;
        }
      }
      const Tensor gy = RandomTensor(os, t, -1, 1, 42);
      const Values gv = Read(gy);
      Values want(xv.size(), 0.0);
      for (size_t i = 0; i < pick.size(); ++i)
        if (pick[i] >= 0) want[pick[i]] += gv[i];
      EXPECT_TRUE(AllClose(Read(max_pool2d_backward(gy, x, PoolOptions(g))),
                           want, TolFor(t)));
    }
  }
}

TEST(PoolOpsTest, MaxPoolTiesPickTheFirstAndNaNWins) {
  // Two 2x2 windows: {1, 5 | 5, 3} ties, {2, NaN | 4, NaN} has two NaNs.
  const Tensor x =
      Make({1, 5, 2, kNaN, 5, 3, 4, kNaN}, {1, 1, 2, 4}, DType::kF32);
  const Tensor m = max_pool2d(x, {.kernel_size = {2, 2}});
  const Values got = Read(m);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], 5);
  EXPECT_TRUE(std::isnan(got[1]));
  const Tensor g = Make({1, 2}, {1, 1, 1, 2}, DType::kF32);
  // The first 5 (index 1) gets the first window's gradient; the last NaN
  // (index 7) the second's.
  EXPECT_EQ(Read(max_pool2d_backward(g, x, {.kernel_size = {2, 2}})),
            (Values{0, 1, 0, 0, 0, 0, 0, 2}));
}

TEST(ConvOpsTest, AdaptiveAvgPoolIsAGlobalMeanOrEqualWindows) {
  const Tensor x = RandomTensor({2, 3, 4, 6}, DType::kF64, -1, 1, 11);
  const Values xv = Read(x);
  const Tensor g = adaptive_avg_pool2d(x, {1, 1});
  ASSERT_EQ(ShapeOf(g), (Dims{2, 3, 1, 1}));
  for (int64_t p = 0; p < 6; ++p) {
    double s = 0;
    for (int64_t i = 0; i < 24; ++i) s += xv[p * 24 + i];
    EXPECT_NEAR(Read(g)[p], s / 24, 1e-14);
  }
  const Tensor h = adaptive_avg_pool2d(x, {2, 3});
  ASSERT_EQ(ShapeOf(h), (Dims{2, 3, 2, 3}));
  EXPECT_NEAR(Read(h)[0], (xv[0] + xv[1] + xv[6] + xv[7]) / 4, 1e-14);
  ExpectError(
      [&] {
        adaptive_avg_pool2d(x, {3, 4});
      },
      {"adaptive_avg_pool2d", "[3, 4]", "unequal"});
}

TEST(ConvOpsTest, BadShapesAndAttributesSayWhatWasExpected) {
  const Tensor x = RandomTensor({2, 4, 5, 5}, DType::kF32, -1, 1, 12);
  const Tensor w = RandomTensor({6, 2, 3, 3}, DType::kF32, -1, 1, 13);
  ExpectError([&] { conv2d(x, w); },
              {"conv2d", "expects 2 x 1 (groups) = 2 input channels", "has 4"});
  ExpectError(
      [&] {
        conv2d(x, RandomTensor({6, 1, 3, 3}, DType::kF32, -1, 1, 4), Tensor(),
               {.groups = 4});
      },
      {"conv2d", "6 output channels do not divide into 4 groups"});
  ExpectError(
      [&] {
        conv2d(x.reshape({2, 4, 25}), w, Tensor(), {.groups = 2});
      },
      {"conv2d", "must be 4-D [N, C, H, W]", "[2, 4, 25]"});
  ExpectError(
      [&] {
        conv2d(x, w, Tensor(), {.stride = {0, 1}, .groups = 2});
      },
      {"conv2d", "stride must be >= 1", "[0, 1]"});
  ExpectError(
      [&] {
        conv2d(x, w, RandomTensor({5}, DType::kF32, -1, 1, 1), {.groups = 2});
      },
      {"conv2d", "bias must be [6]", "[5]"});
  ExpectError([&] { conv2d(x, w.to(DType::kF64), Tensor(), {.groups = 2}); },
              {"conv2d", "one dtype"});
  ExpectError(
      [&] {
        conv2d(x, RandomTensor({1, 4, 9, 2}, DType::kF32, -1, 1, 2));
      },
      {"conv2d", "height 5", "no window fits"});
  ExpectError(
      [&] {
        max_pool2d(x, {.kernel_size = {2, 2}, .padding = {2, 0}});
      },
      {"max_pool2d", "at most half of the kernel"});
  ExpectError(
      [&] {
        avg_pool2d(x, {.kernel_size = {2, 2}, .dilation = {2, 2}});
      },
      {"avg_pool2d", "dilation must be [1, 1]"});
  // Values no image has (as IR text may carry) are refused, not overflowed.
  ExpectError(
      [&] { conv2d(x, w, Tensor(), {.groups = int64_t{1} << 62}); },
      {"conv2d", "expects 2 x 4611686018427387904 (groups) input channels"});
  ExpectError(
      [&] {
        conv2d(x, w, Tensor(), {.dilation = {int64_t{1} << 40, 1}});
      },
      {"conv2d", "dilation must be >= 1 and <= 1073741824"});
  ExpectError(
      [&] {
        max_pool2d(x, {.kernel_size = {6, 2}});
      },
      {"max_pool2d", "no window fits"});
  ExpectError(
      [&] {
        conv2d_backward_input(RandomTensor({2, 6, 2, 2}, DType::kF32, 0, 1, 3),
                              w, x.shape(), {.groups = 2});
      },
      {"conv2d_backward_input", "forward result's shape [2, 6, 3, 3]"});
}

}  // namespace
}  // namespace stepjit::op_test
