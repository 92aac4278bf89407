// Eager CPU kernels for conv2d, max_pool2d, avg_pool2d and their gradients
// (semantics: ir/ops.def; geometry: ir/conv.h).
//
// A convolution is a GEMM per sample and group over the input's windows
// laid out as columns (im2col): out[o, p] = sum_k weight[o, k] col[k, p],
// with k running over (channel, kh, kw) of the group and p over the output
// positions. Its input gradient is the transposed product scattered back
// (col2im), its weight gradient the product with the columns transposed,
// summed over the batch. f64 computes in f64; f32, f16 and bf16 in f32
// (half inputs converted once, the result rounded once).
//
// That is the reference path. f32 (and the halves, in f32) take oneDNN's
// convolution primitives instead where oneDNN has one (conv_dnnl.h).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "devices/cpu/conv_dnnl.h"
#include "devices/cpu/gemm.h"
#include "devices/cpu/kernels.h"
#include "devices/cpu/loops.h"
#include "ir/conv.h"
#include "ir/status.h"
#include "runtime/thread_pool.h"

namespace stepjit::runtime::cpu {

using ir::AttrKey;
using ir::DType;
using ir::OpId;
using ir::Window2d;

namespace {

// Planes of at least this many output elements are worth a thread each.
constexpr int64_t kPlaneGrain = 1;

DType ComputeDType(DType t) {
  return t == DType::kF64 ? DType::kF64 : DType::kF32;
}

// Calls fn with a value of the scalar type of compute dtype `ct`.
template <typename Fn>
void WithScalar(DType ct, Fn fn) {
  if (ct == DType::kF64) {
    fn(double{});
  } else {
    fn(float{});
  }
}

// `x` contiguous in dtype `ct` (a copy only when needed).
Tensor AsCompute(const Tensor& x, DType ct) {
  if (x.dtype() == ct) return ContiguousCopyIfNeeded(x);
  Tensor c = empty(x.shape(), {.dtype = ct});
  CopyInto(c, x);
  return c;
}

// Where a kernel writes: `out` itself when it is contiguous in `ct`, else a
// scratch tensor copied into `out` by Finish.
struct Result {
  Tensor out, dst;
  Result(const Tensor& o, DType ct) : out(o) {
    dst = o.dtype() == ct && o.is_contiguous()
              ? o
              : empty(o.shape(), {.dtype = ct});
  }
  void Finish() const {
    if (dst.impl() != out.impl()) CopyInto(out, dst);
  }
};

void ThrowIfError(const absl::Status& st) {
  if (!st.ok()) throw Error(std::string(st.message()));
}

// Runs `pass` through oneDNN on buffers of dtype `dt` (f32, or bf16 where
// oneDNN has bf16 kernels) when the backend allows it; false when another
// path must run instead.
bool TryOneDnn(ConvPass pass, DType dt, ir::ShapeRef input, ir::ShapeRef weight,
               ir::ShapeRef out, const Window2d& win, const Tensor& a,
               const Tensor& b, const Tensor* bias, const Tensor& dst) {
  const ConvBackend backend = ConvBackendInUse();
  if (backend == ConvBackend::kReference) return false;
  // (Empty batches and channels are the reference path's: oneDNN refuses
  // zero-sized memory in some primitives.)
  if (ir::NumElements(input) == 0 || ir::NumElements(weight) == 0 ||
      ir::NumElements(out) == 0) {
    return false;
  }
  // (f64 has no oneDNN convolution: always the reference path.)
  if (dt != DType::kF32 && dt != DType::kBF16) return false;
  const ConvShape shape{.n = input[0],
                        .c = input[1],
                        .h = input[2],
                        .w = input[3],
                        .o = weight[0],
                        .kh = weight[2],
                        .kw = weight[3],
                        .oh = out[2],
                        .ow = out[3],
                        .win = win};
  const absl::Status st =
      DnnlConv2d(pass, shape, dt, a.data_ptr(), b.data_ptr(),
                 bias != nullptr ? bias->data_ptr() : nullptr, dst.data_ptr());
  if (st.ok()) return true;
  // Without native bf16 kernels the caller computes in f32 instead.
  if (absl::IsUnimplemented(st) &&
      (backend == ConvBackend::kAuto || dt == DType::kBF16)) {
    return false;
  }
  ThrowIfError(st);
  return true;
}

// bf16 operands and result through oneDNN's bf16 kernels (f32 accumulation,
// rounded once, as the f32 path computes them); false when that cannot run.
// `input`, `weight` and `out` are the shapes TryOneDnn takes.
bool TryNativeBf16(ConvPass pass, const KernelArgs& k, ir::ShapeRef input,
                   ir::ShapeRef weight, ir::ShapeRef out, const Window2d& win) {
  if (k.out.dtype() != DType::kBF16) return false;
  for (const Tensor& t : k.inputs) {
    if (t.dtype() != DType::kBF16) return false;
  }
  const Tensor a = ContiguousCopyIfNeeded(k.inputs[0]);
  const Tensor b = ContiguousCopyIfNeeded(k.inputs[1]);
  Tensor bias;
  if (k.inputs.size() == 3) bias = ContiguousCopyIfNeeded(k.inputs[2]);
  const Result r(k.out, DType::kBF16);
  if (!TryOneDnn(pass, DType::kBF16, input, weight, out, win, a, b,
                 bias.defined() ? &bias : nullptr, r.dst)) {
    return false;
  }
  r.Finish();
  return true;
}

// The sizes of a convolution: input [N, C, H, W], weight [O, Cg, KH, KW],
// output [N, O, OH, OW].
struct ConvDims {
  int64_t n, c, h, w, o, cg, og, groups, oh, ow, k, p;
  Window2d win;
  ConvDims(ir::ShapeRef input, ir::ShapeRef weight, ir::ShapeRef out,
           const Window2d& window)
      : n(input[0]),
        c(input[1]),
        h(input[2]),
        w(input[3]),
        o(weight[0]),
        cg(weight[1]),
        og(weight[0] / window.groups),
        groups(window.groups),
        oh(out[2]),
        ow(out[3]),
        k(weight[1] * weight[2] * weight[3]),
        p(out[2] * out[3]),
        win(window) {}
};

// col[k, p] for sample `s` and group `g` (zero where the window is in the
// padding).
template <typename S>
void Im2Col(const S* x, S* col, const ConvDims& d, int64_t s, int64_t g) {
  const Window2d& win = d.win;
  const int64_t kh_n = win.kernel[0], kw_n = win.kernel[1];
  ParallelFor(d.cg * kh_n * kw_n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t c = row / (kh_n * kw_n), kh = row / kw_n % kh_n,
                    kw = row % kw_n;
      const S* plane = x + ((s * d.c) + g * d.cg + c) * d.h * d.w;
      S* dst = col + row * d.p;
      for (int64_t oy = 0; oy < d.oh; ++oy) {
        const int64_t iy =
            oy * win.stride[0] - win.padding[0] + kh * win.dilation[0];
        for (int64_t ox = 0; ox < d.ow; ++ox) {
          const int64_t ix =
              ox * win.stride[1] - win.padding[1] + kw * win.dilation[1];
          dst[oy * d.ow + ox] = iy >= 0 && iy < d.h && ix >= 0 && ix < d.w
                                    ? plane[iy * d.w + ix]
                                    : S(0);
        }
      }
    }
  });
}

// dx[s, group g] += the columns `col` put back where Im2Col took them;
// each channel of the group by one thread, its taps in order.
template <typename S>
void Col2ImAdd(const S* col, S* dx, const ConvDims& d, int64_t s, int64_t g) {
  const Window2d& win = d.win;
  const int64_t kh_n = win.kernel[0], kw_n = win.kernel[1];
  ParallelFor(d.cg, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      S* plane = dx + ((s * d.c) + g * d.cg + c) * d.h * d.w;
      for (int64_t kh = 0; kh < kh_n; ++kh) {
        for (int64_t kw = 0; kw < kw_n; ++kw) {
          const S* src = col + ((c * kh_n + kh) * kw_n + kw) * d.p;
          for (int64_t oy = 0; oy < d.oh; ++oy) {
            const int64_t iy =
                oy * win.stride[0] - win.padding[0] + kh * win.dilation[0];
            if (iy < 0 || iy >= d.h) continue;
            for (int64_t ox = 0; ox < d.ow; ++ox) {
              const int64_t ix =
                  ox * win.stride[1] - win.padding[1] + kw * win.dilation[1];
              if (ix >= 0 && ix < d.w)
                plane[iy * d.w + ix] += src[oy * d.ow + ox];
            }
          }
        }
      }
    }
  });
}

GemmArgs Product(DType ct, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                 const void* a, int64_t lda, const void* b, int64_t ldb,
                 void* c, int64_t ldc, bool accumulate = false) {
  GemmArgs args{.dtype = ct};
  args.trans_a = ta;
  args.trans_b = tb;
  args.m = m;
  args.n = n;
  args.k = k;
  args.a = a;
  args.lda = lda;
  args.b = b;
  args.ldb = ldb;
  args.c = c;
  args.ldc = ldc;
  args.accumulate = accumulate;
  return args;
}

template <typename S>
void Conv2dForward(const Tensor& input, const Tensor& weight,
                   const Tensor* bias, const Tensor& out, const ConvDims& d,
                   DType ct) {
  const S* x = input.data<S>();
  const S* wt = weight.data<S>();
  S* y = out.data<S>();
  std::vector<S> col(static_cast<size_t>(d.k * d.p));
  for (int64_t s = 0; s < d.n; ++s) {
    for (int64_t g = 0; g < d.groups; ++g) {
      Im2Col(x, col.data(), d, s, g);
      ThrowIfError(Gemm(Product(ct, false, false, d.og, d.p, d.k,
                                wt + g * d.og * d.k, d.k, col.data(), d.p,
                                y + (s * d.o + g * d.og) * d.p, d.p)));
    }
  }
  if (bias == nullptr) return;
  const S* b = bias->data<S>();
  ParallelFor(d.n * d.o, kPlaneGrain, [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      S* row = y + plane * d.p;
      const S v = b[plane % d.o];
      for (int64_t i = 0; i < d.p; ++i) row[i] += v;
    }
  });
}

void Conv2dKernel(const KernelArgs& k) {
  {
    const Window2d win =
        ValueOrThrow(ir::WindowOf(k.op, k.attrs, k.inputs[1].shape()));
    if (TryNativeBf16(ConvPass::kForward, k, k.inputs[0].shape(),
                      k.inputs[1].shape(), k.out.shape(), win)) {
      return;
    }
  }
  const DType ct = ComputeDType(k.out.dtype());
  const Tensor x = AsCompute(k.inputs[0], ct), w = AsCompute(k.inputs[1], ct);
  const Window2d win = ValueOrThrow(ir::WindowOf(k.op, k.attrs, w.shape()));
  const ConvDims d(x.shape(), w.shape(), k.out.shape(), win);
  Tensor b;
  if (k.inputs.size() == 3) b = AsCompute(k.inputs[2], ct);
  const Result r(k.out, ct);
  const Tensor* bias = b.defined() ? &b : nullptr;
  if (!TryOneDnn(ConvPass::kForward, ct, x.shape(), w.shape(), k.out.shape(),
                 win, x, w, bias, r.dst)) {
    WithScalar(ct, [&](auto s) {
      Conv2dForward<decltype(s)>(x, w, bias, r.dst, d, ct);
    });
  }
  r.Finish();
}

template <typename S>
void Conv2dInputGrad(const Tensor& grad, const Tensor& weight, const Tensor& dx,
                     const ConvDims& d, DType ct) {
  const S* gy = grad.data<S>();
  const S* wt = weight.data<S>();
  S* out = dx.data<S>();
  std::fill(out, out + dx.numel(), S(0));
  std::vector<S> col(static_cast<size_t>(d.k * d.p));
  for (int64_t s = 0; s < d.n; ++s) {
    for (int64_t g = 0; g < d.groups; ++g) {
      ThrowIfError(Gemm(
          Product(ct, true, false, d.k, d.p, d.og, wt + g * d.og * d.k, d.k,
                  gy + (s * d.o + g * d.og) * d.p, d.p, col.data(), d.p)));
      Col2ImAdd(col.data(), out, d, s, g);
    }
  }
}

void Conv2dBackwardInputKernel(const KernelArgs& k) {
  {
    const Window2d win =
        ValueOrThrow(ir::WindowOf(k.op, k.attrs, k.inputs[1].shape()));
    if (TryNativeBf16(ConvPass::kBackwardInput, k, k.out.shape(),
                      k.inputs[1].shape(), k.inputs[0].shape(), win)) {
      return;
    }
  }
  const DType ct = ComputeDType(k.out.dtype());
  const Tensor gy = AsCompute(k.inputs[0], ct), w = AsCompute(k.inputs[1], ct);
  const Window2d win = ValueOrThrow(ir::WindowOf(k.op, k.attrs, w.shape()));
  const ConvDims d(k.out.shape(), w.shape(), gy.shape(), win);
  const Result r(k.out, ct);
  if (!TryOneDnn(ConvPass::kBackwardInput, ct, k.out.shape(), w.shape(),
                 gy.shape(), win, gy, w, nullptr, r.dst)) {
    WithScalar(
        ct, [&](auto s) { Conv2dInputGrad<decltype(s)>(gy, w, r.dst, d, ct); });
  }
  r.Finish();
}

template <typename S>
void Conv2dWeightGrad(const Tensor& grad, const Tensor& input, const Tensor& dw,
                      const ConvDims& d, DType ct) {
  const S* gy = grad.data<S>();
  const S* x = input.data<S>();
  S* out = dw.data<S>();
  std::fill(out, out + dw.numel(), S(0));
  std::vector<S> col(static_cast<size_t>(d.k * d.p));
  for (int64_t s = 0; s < d.n; ++s) {
    for (int64_t g = 0; g < d.groups; ++g) {
      Im2Col(x, col.data(), d, s, g);
      ThrowIfError(Gemm(Product(ct, false, true, d.og, d.k, d.p,
                                gy + (s * d.o + g * d.og) * d.p, d.p,
                                col.data(), d.p, out + g * d.og * d.k, d.k,
                                /*accumulate=*/true)));
    }
  }
}

void Conv2dBackwardWeightKernel(const KernelArgs& k) {
  {
    const Window2d win =
        ValueOrThrow(ir::WindowOf(k.op, k.attrs, k.out.shape()));
    if (TryNativeBf16(ConvPass::kBackwardWeight, k, k.inputs[1].shape(),
                      k.out.shape(), k.inputs[0].shape(), win)) {
      return;
    }
  }
  const DType ct = ComputeDType(k.out.dtype());
  const Tensor gy = AsCompute(k.inputs[0], ct), x = AsCompute(k.inputs[1], ct);
  const Window2d win = ValueOrThrow(ir::WindowOf(k.op, k.attrs, k.out.shape()));
  const ConvDims d(x.shape(), k.out.shape(), gy.shape(), win);
  const Result r(k.out, ct);
  if (!TryOneDnn(ConvPass::kBackwardWeight, ct, x.shape(), k.out.shape(),
                 gy.shape(), win, gy, x, nullptr, r.dst)) {
    WithScalar(ct, [&](auto s) {
      Conv2dWeightGrad<decltype(s)>(gy, x, r.dst, d, ct);
    });
  }
  r.Finish();
}

// The output positions o in [0, n_out) whose input position o * stride +
// offset lies in [0, n_in), as [*lo, *hi).
void ValidOutputs(int64_t n_out, int64_t n_in, int64_t stride, int64_t offset,
                  int64_t* lo, int64_t* hi) {
  *lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  *hi = n_in - 1 - offset < 0 ? 0 : (n_in - 1 - offset) / stride + 1;
  *lo = std::min(*lo, n_out);
  *hi = std::clamp(*hi, *lo, n_out);
}

// The exact comparison type of a stored float type: every f32, f16 and bf16
// value is exact in float.
template <typename T>
using CompareOf = std::conditional_t<std::is_same_v<T, double>, double, float>;

// One tap of max_pool2d over a run of n outputs: src[i * stride] (stride
// a compile-time constant where it is 1 or 2, so that the loop vectorizes)
// against best[i], and with kPick, its position pos0 + i * stride against
// pick[i]. Written as plain selects so that the loop vectorizes (compare
// and blend): on real data the comparison is a coin flip, and a branch per
// tap, mispredicted half the time, cost more than the load.
template <bool kPick, int kStride, typename T, typename C, typename P>
void MaxTap(const T* __restrict src, int64_t runtime_stride, int64_t n,
            C* __restrict best, P* __restrict pick, int64_t pos0) {
  const int64_t stride = kStride > 0 ? kStride : runtime_stride;
  for (int64_t i = 0; i < n; ++i) {
    const C v = Convert<C>(src[i * stride]), b = best[i];
    if constexpr (kPick) {
      // (A window whose values are all -inf keeps pick -1 here;
      // MaxPoolRow picks its first tap afterwards.)
      const P pos = static_cast<P>(pos0 + i * stride);
      const bool larger = v > b;
      const C b1 = larger ? v : b;
      const P p1 = larger ? pos : pick[i];
      const bool nan = v != v;
      best[i] = nan ? v : b1;
      pick[i] = nan ? pos : p1;
    } else {
      // Two plain selects, which vectorize (compare and blend).
      const C larger = v > b ? v : b;
      best[i] = v != v ? v : larger;
    }
  }
}

// MaxTap for f32 with int32 picks in AVX2 lanes (compare and blend; the
// compilers kept a branch per tap for the picks), the last partial vector
// masked: image rows are short.
__attribute__((target("avx2"))) void MaxTapAvx2(const float* src,
                                                int64_t stride, int64_t n,
                                                float* best, int32_t* pick,
                                                int64_t pos0) {
  // (The forward, without picks, is left to the compiler, which vectorizes
  // it better than these gathers.)
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i offsets =
      _mm256_mullo_epi32(lanes, _mm256_set1_epi32(static_cast<int>(stride)));
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i mask = _mm256_cmpgt_epi32(
        _mm256_set1_epi32(static_cast<int>(std::min<int64_t>(n - i, 8))),
        lanes);
    const __m256 v = stride == 1 ? _mm256_maskload_ps(src + i, mask)
                                 : _mm256_mask_i32gather_ps(
                                       _mm256_setzero_ps(), src + i * stride,
                                       offsets, _mm256_castsi256_ps(mask), 4);
    const __m256 b = _mm256_maskload_ps(best + i, mask);
    const __m256 larger = _mm256_cmp_ps(v, b, _CMP_GT_OQ);
    const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    const __m256 take = _mm256_or_ps(larger, nan);
    _mm256_maskstore_ps(best + i, mask, _mm256_blendv_ps(b, v, take));
    {
      const __m256i pos = _mm256_add_epi32(
          _mm256_set1_epi32(static_cast<int>(pos0 + i * stride)), offsets);
      const __m256 old = _mm256_castsi256_ps(
          _mm256_maskload_epi32(reinterpret_cast<const int*>(pick + i), mask));
      const __m256 chosen =
          _mm256_blendv_ps(old, _mm256_castsi256_ps(pos), take);
      _mm256_maskstore_epi32(reinterpret_cast<int*>(pick + i), mask,
                             _mm256_castps_si256(chosen));
    }
  }
}

bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}

// Output row `oy` of max_pool2d over one plane: best[ox] is the window's
// largest value (NaN when it holds one; -inf when the window is wholly in
// the padding, which dilation allows). With kPick, pick[ox] is the input
// position (y * W + x) it came from: the first largest in window order, or
// the last NaN, -1 when none of the window is inside the input. The taps
// run in window order, each over the whole row.
template <bool kPick, typename T, typename P = int64_t>
void MaxPoolRow(const T* plane, const Window2d& win, int64_t h, int64_t w,
                int64_t oy, int64_t ow, CompareOf<T>* best, P* pick) {
  using C = CompareOf<T>;
  std::fill(best, best + ow, -std::numeric_limits<C>::infinity());
  if constexpr (kPick) std::fill(pick, pick + ow, P{-1});
  const int64_t sx = win.stride[1];
  for (int64_t kh = 0; kh < win.kernel[0]; ++kh) {
    const int64_t iy =
        oy * win.stride[0] - win.padding[0] + kh * win.dilation[0];
    if (iy < 0 || iy >= h) continue;
    const T* row = plane + iy * w;
    for (int64_t kw = 0; kw < win.kernel[1]; ++kw) {
      const int64_t offset = kw * win.dilation[1] - win.padding[1];
      int64_t lo, hi;
      ValidOutputs(ow, w, sx, offset, &lo, &hi);
      const int64_t ix0 = lo * sx + offset;
      P* pk = kPick ? pick + lo : nullptr;
      if constexpr (kPick && std::is_same_v<T, float> &&
                    std::is_same_v<P, int32_t>) {
        if (HasAvx2() && hi > lo) {
          MaxTapAvx2(row + ix0, sx, hi - lo, best + lo, pk, iy * w + ix0);
          continue;
        }
      }
      const int64_t ix0_rest = lo * sx + offset;
      const T* src_rest = row + ix0_rest;
      if (sx == 1) {
        MaxTap<kPick, 1>(src_rest, sx, hi - lo, best + lo, pk,
                         iy * w + ix0_rest);
      } else if (sx == 2) {
        MaxTap<kPick, 2>(src_rest, sx, hi - lo, best + lo, pk,
                         iy * w + ix0_rest);
      } else {
        MaxTap<kPick, 0>(src_rest, sx, hi - lo, best + lo, pk,
                         iy * w + ix0_rest);
      }
    }
  }
  if constexpr (kPick) {
    // Windows of -inf only (or wholly in the padding): the first tap inside
    // the input, if any.
    for (int64_t ox = 0; ox < ow; ++ox) {
      if (pick[ox] >= 0) continue;
      for (int64_t kh = 0; kh < win.kernel[0] && pick[ox] < 0; ++kh) {
        const int64_t iy =
            oy * win.stride[0] - win.padding[0] + kh * win.dilation[0];
        if (iy < 0 || iy >= h) continue;
        for (int64_t kw = 0; kw < win.kernel[1]; ++kw) {
          const int64_t ix = ox * sx - win.padding[1] + kw * win.dilation[1];
          if (ix >= 0 && ix < w) {
            pick[ox] = static_cast<P>(iy * w + ix);
            break;
          }
        }
      }
    }
  }
}

// The sizes of a pool: input planes [N * C] of [H, W], output [OH, OW].
struct PoolDims {
  int64_t planes, h, w, oh, ow;
  PoolDims(ir::ShapeRef input, ir::ShapeRef out)
      : planes(input[0] * input[1]),
        h(input[2]),
        w(input[3]),
        oh(out[2]),
        ow(out[3]) {}
};

// MaxPool2d(2): 2x2 windows, stride 2, no padding or dilation, every window
// inside the input (the last row or column of an odd size is in none).
bool IsPairPool(const Window2d& win, const PoolDims& d) {
  return win.kernel == std::array<int64_t, 2>{2, 2} &&
         win.stride == std::array<int64_t, 2>{2, 2} &&
         win.padding == std::array<int64_t, 2>{0, 0} &&
         win.dilation == std::array<int64_t, 2>{1, 1} && 2 * d.oh <= d.h &&
         2 * d.ow <= d.w;
}

// The tap (0..3, row-major) a 2x2 window picks: the first largest, or the
// last NaN.
template <typename C>
int PairPick(C a, C b, C c, C e, C* best) {
  int k = 0;
  C m = a;
  const bool tb = (b > m) | (b != b);
  m = tb ? b : m;
  k = tb ? 1 : k;
  const bool tc = (c > m) | (c != c);
  m = tc ? c : m;
  k = tc ? 2 : k;
  const bool te = (e > m) | (e != e);
  m = te ? e : m;
  k = te ? 3 : k;
  *best = m;
  return k;
}

template <typename T>
void MaxPool2x2Plane(const T* plane, int64_t h, int64_t w, int64_t oh,
                     int64_t ow, T* out) {
  using C = CompareOf<T>;
  (void)h;
  for (int64_t oy = 0; oy < oh; ++oy) {
    const T* r0 = plane + 2 * oy * w;
    const T* r1 = r0 + w;
    for (int64_t ox = 0; ox < ow; ++ox) {
      // Compare-and-select in window order: vectorizes across ox.
      C m = Convert<C>(r0[2 * ox]);
      for (const C v : {Convert<C>(r0[2 * ox + 1]), Convert<C>(r1[2 * ox]),
                        Convert<C>(r1[2 * ox + 1])}) {
        const C larger = v > m ? v : m;
        m = v != v ? v : larger;
      }
      out[oy * ow + ox] = Convert<T>(m);
    }
  }
}

// Each input element is in at most one window: the picked one gets the
// window's gradient, every other element 0.
template <typename T>
void MaxPool2x2BackwardPlane(const T* plane, const T* g, int64_t h, int64_t w,
                             int64_t oh, int64_t ow, T* dx) {
  using C = CompareOf<T>;
  std::fill(dx, dx + h * w, Convert<T>(0.0));
  for (int64_t oy = 0; oy < oh; ++oy) {
    const T* r0 = plane + 2 * oy * w;
    const T* r1 = r0 + w;
    T* d0 = dx + 2 * oy * w;
    T* d1 = d0 + w;
    for (int64_t ox = 0; ox < ow; ++ox) {
      C m;
      const int k =
          PairPick(Convert<C>(r0[2 * ox]), Convert<C>(r0[2 * ox + 1]),
                   Convert<C>(r1[2 * ox]), Convert<C>(r1[2 * ox + 1]), &m);
      T* row = k < 2 ? d0 : d1;
      row[2 * ox + (k & 1)] = g[oy * ow + ox];
    }
  }
}

// The plane max-pooling reads: itself for f32 and f64; for f16 and bf16 its
// values widened (exactly) to float in `wide`, so that the pools run the
// float loops (vectorized, AVX2 for the gradient's picks).
template <typename T>
const CompareOf<T>* WidePlane(const T* plane, int64_t n,
                              std::vector<CompareOf<T>>& wide) {
  if constexpr (std::is_same_v<T, CompareOf<T>>) {
    return plane;
  } else {
    wide.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) wide[i] = Convert<CompareOf<T>>(plane[i]);
    return wide.data();
  }
}

void MaxPool2dKernel(const KernelArgs& k) {
  const Tensor x = ContiguousCopyIfNeeded(k.inputs[0]);
  const Window2d win = ValueOrThrow(ir::WindowOf(k.op, k.attrs));
  const PoolDims d(x.shape(), k.out.shape());
  const bool pairs = IsPairPool(win, d);
  SJ_DISPATCH_FLOAT(x.dtype(), "max_pool2d", {
    const T* xp = x.data<T>();
    T* yp = k.out.data<T>();
    ParallelFor(d.planes, kPlaneGrain, [&](int64_t begin, int64_t end) {
      std::vector<CompareOf<T>> best(static_cast<size_t>(d.ow));
      for (int64_t pl = begin; pl < end; ++pl) {
        const T* plane = xp + pl * d.h * d.w;
        T* out = yp + pl * d.oh * d.ow;
        if (pairs) {
          MaxPool2x2Plane(plane, d.h, d.w, d.oh, d.ow, out);
          continue;
        }
        for (int64_t oy = 0; oy < d.oh; ++oy) {
          MaxPoolRow<false>(plane, win, d.h, d.w, oy, d.ow, best.data(),
                            static_cast<int64_t*>(nullptr));
          for (int64_t ox = 0; ox < d.ow; ++ox)
            out[oy * d.ow + ox] = Convert<T>(best[ox]);
        }
      }
    });
  });
}

void MaxPool2dBackwardKernel(const KernelArgs& k) {
  const Tensor gy = ContiguousCopyIfNeeded(k.inputs[0]);
  const Tensor x = ContiguousCopyIfNeeded(k.inputs[1]);
  const Window2d win = ValueOrThrow(ir::WindowOf(k.op, k.attrs));
  const PoolDims d(x.shape(), gy.shape());
  const bool pairs = IsPairPool(win, d);
  SJ_DISPATCH_FLOAT(x.dtype(), "max_pool2d_backward", {
    const T* xp = x.data<T>();
    const T* gp = gy.data<T>();
    T* dx = k.out.data<T>();
    if (pairs) {
      ParallelFor(d.planes, kPlaneGrain, [&](int64_t begin, int64_t end) {
        for (int64_t pl = begin; pl < end; ++pl) {
          MaxPool2x2BackwardPlane(xp + pl * d.h * d.w, gp + pl * d.oh * d.ow,
                                  d.h, d.w, d.oh, d.ow, dx + pl * d.h * d.w);
        }
      });
      return;
    }
    // Positions as int32 where a plane allows (the common case), so that
    // the picks share the comparisons' vector lanes.
    auto run = [&](auto position) {
      using P = decltype(position);
      ParallelFor(d.planes, kPlaneGrain, [&](int64_t begin, int64_t end) {
        std::vector<Acc> acc(static_cast<size_t>(d.h * d.w));
        std::vector<CompareOf<T>> best(static_cast<size_t>(d.ow));
        std::vector<P> pick(static_cast<size_t>(d.ow));
        std::vector<CompareOf<T>> wide;
        for (int64_t pl = begin; pl < end; ++pl) {
          std::fill(acc.begin(), acc.end(), Acc(0));
          const auto plane = WidePlane(xp + pl * d.h * d.w, d.h * d.w, wide);
          const T* g = gp + pl * d.oh * d.ow;
          for (int64_t oy = 0; oy < d.oh; ++oy) {
            MaxPoolRow<true>(plane, win, d.h, d.w, oy, d.ow, best.data(),
                             pick.data());
            for (int64_t ox = 0; ox < d.ow; ++ox) {
              if (pick[ox] >= 0)
                acc[pick[ox]] += Convert<Acc>(g[oy * d.ow + ox]);
            }
          }
          T* out = dx + pl * d.h * d.w;
          for (int64_t i = 0; i < d.h * d.w; ++i) out[i] = Convert<T>(acc[i]);
        }
      });
    };
    if (d.h * d.w <= std::numeric_limits<int32_t>::max()) {
      run(int32_t{});
    } else {
      run(int64_t{});
    }
  });
}

void AvgPool2dKernel(const KernelArgs& k) {
  const Tensor x = ContiguousCopyIfNeeded(k.inputs[0]);
  const Window2d win = ValueOrThrow(ir::WindowOf(k.op, k.attrs));
  const PoolDims d(x.shape(), k.out.shape());
  SJ_DISPATCH_FLOAT(x.dtype(), "avg_pool2d", {
    const T* xp = x.data<T>();
    T* yp = k.out.data<T>();
    ParallelFor(d.planes, kPlaneGrain, [&](int64_t begin, int64_t end) {
      for (int64_t pl = begin; pl < end; ++pl) {
        const T* plane = xp + pl * d.h * d.w;
        T* out = yp + pl * d.oh * d.ow;
        for (int64_t oy = 0; oy < d.oh; ++oy) {
          const int64_t y0 = oy * win.stride[0] - win.padding[0];
          for (int64_t ox = 0; ox < d.ow; ++ox) {
            const int64_t x0 = ox * win.stride[1] - win.padding[1];
            const int64_t div = ir::AvgPoolDivisor(win, y0, x0, d.h, d.w);
            Acc sum = 0;
            for (int64_t iy = std::max<int64_t>(y0, 0);
                 iy < std::min(y0 + win.kernel[0], d.h); ++iy) {
              for (int64_t ix = std::max<int64_t>(x0, 0);
                   ix < std::min(x0 + win.kernel[1], d.w); ++ix)
                sum += Convert<Acc>(plane[iy * d.w + ix]);
            }
            out[oy * d.ow + ox] =
                Convert<T>(div > 0 ? sum / static_cast<Acc>(div) : Acc(0));
          }
        }
      }
    });
  });
}

void AvgPool2dBackwardKernel(const KernelArgs& k) {
  const Tensor gy = ContiguousCopyIfNeeded(k.inputs[0]);
  const Window2d win = ValueOrThrow(ir::WindowOf(k.op, k.attrs));
  const PoolDims d(k.out.shape(), gy.shape());
  SJ_DISPATCH_FLOAT(gy.dtype(), "avg_pool2d_backward", {
    const T* gp = gy.data<T>();
    T* dx = k.out.data<T>();
    ParallelFor(d.planes, kPlaneGrain, [&](int64_t begin, int64_t end) {
      std::vector<Acc> acc(static_cast<size_t>(d.h * d.w));
      for (int64_t pl = begin; pl < end; ++pl) {
        std::fill(acc.begin(), acc.end(), Acc(0));
        const T* g = gp + pl * d.oh * d.ow;
        for (int64_t oy = 0; oy < d.oh; ++oy) {
          const int64_t y0 = oy * win.stride[0] - win.padding[0];
          for (int64_t ox = 0; ox < d.ow; ++ox) {
            const int64_t x0 = ox * win.stride[1] - win.padding[1];
            const int64_t div = ir::AvgPoolDivisor(win, y0, x0, d.h, d.w);
            if (div == 0) continue;
            const Acc share =
                Convert<Acc>(g[oy * d.ow + ox]) / static_cast<Acc>(div);
            for (int64_t iy = std::max<int64_t>(y0, 0);
                 iy < std::min(y0 + win.kernel[0], d.h); ++iy) {
              for (int64_t ix = std::max<int64_t>(x0, 0);
                   ix < std::min(x0 + win.kernel[1], d.w); ++ix)
                acc[iy * d.w + ix] += share;
            }
          }
        }
        T* out = dx + pl * d.h * d.w;
        for (int64_t i = 0; i < d.h * d.w; ++i) out[i] = Convert<T>(acc[i]);
      }
    });
  });
}

}  // namespace

void RegisterConvKernels(KernelTable& table) {
  table[static_cast<int>(OpId::kConv2d)] = &Conv2dKernel;
  table[static_cast<int>(OpId::kConv2dBackwardInput)] =
      &Conv2dBackwardInputKernel;
  table[static_cast<int>(OpId::kConv2dBackwardWeight)] =
      &Conv2dBackwardWeightKernel;
  table[static_cast<int>(OpId::kMaxPool2d)] = &MaxPool2dKernel;
  table[static_cast<int>(OpId::kMaxPool2dBackward)] = &MaxPool2dBackwardKernel;
  table[static_cast<int>(OpId::kAvgPool2d)] = &AvgPool2dKernel;
  table[static_cast<int>(OpId::kAvgPool2dBackward)] = &AvgPool2dBackwardKernel;
}

}  // namespace stepjit::runtime::cpu
