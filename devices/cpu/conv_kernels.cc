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
#include <algorithm>
#include <cmath>
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

// Runs `pass` through oneDNN when the backend allows it for compute dtype
// `ct`; false when the reference path must run instead.
bool TryOneDnn(ConvPass pass, DType ct, ir::ShapeRef input, ir::ShapeRef weight,
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
  if (ct != DType::kF32) return false;
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
  const absl::Status st = DnnlConv2d(
      pass, shape, a.data<float>(), b.data<float>(),
      bias != nullptr ? bias->data<float>() : nullptr, dst.data<float>());
  if (st.ok()) return true;
  if (absl::IsUnimplemented(st) && backend == ConvBackend::kAuto) return false;
  ThrowIfError(st);
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

// The input position (y * W + x) max_pool2d's window at output (oy, ox)
// picks, -1 when none of it is inside the input: the first largest in
// window order, or the last NaN. (Compared in double: exact for every float
// dtype.)
template <typename T>
int64_t MaxPickExact(const T* plane, const Window2d& win, int64_t h, int64_t w,
                     int64_t oy, int64_t ox) {
  int64_t best = -1;
  double best_v = 0;
  for (int64_t kh = 0; kh < win.kernel[0]; ++kh) {
    const int64_t iy =
        oy * win.stride[0] - win.padding[0] + kh * win.dilation[0];
    if (iy < 0 || iy >= h) continue;
    for (int64_t kw = 0; kw < win.kernel[1]; ++kw) {
      const int64_t ix =
          ox * win.stride[1] - win.padding[1] + kw * win.dilation[1];
      if (ix < 0 || ix >= w) continue;
      const double v = Convert<double>(plane[iy * w + ix]);
      if (best < 0 || v > best_v || std::isnan(v)) {
        best = iy * w + ix;
        best_v = v;
      }
    }
  }
  return best;
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

void MaxPool2dKernel(const KernelArgs& k) {
  const Tensor x = ContiguousCopyIfNeeded(k.inputs[0]);
  const Window2d win = ValueOrThrow(ir::WindowOf(k.op, k.attrs));
  const PoolDims d(x.shape(), k.out.shape());
  SJ_DISPATCH_FLOAT(x.dtype(), "max_pool2d", {
    const T* xp = x.data<T>();
    T* yp = k.out.data<T>();
    ParallelFor(d.planes, kPlaneGrain, [&](int64_t begin, int64_t end) {
      for (int64_t pl = begin; pl < end; ++pl) {
        const T* plane = xp + pl * d.h * d.w;
        T* out = yp + pl * d.oh * d.ow;
        for (int64_t oy = 0; oy < d.oh; ++oy) {
          for (int64_t ox = 0; ox < d.ow; ++ox) {
            const int64_t at = MaxPickExact(plane, win, d.h, d.w, oy, ox);
            // (A window wholly in the padding, which dilation allows,
            // gives -inf.)
            out[oy * d.ow + ox] = at >= 0 ? plane[at] : Convert<T>(-INFINITY);
          }
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
  SJ_DISPATCH_FLOAT(x.dtype(), "max_pool2d_backward", {
    const T* xp = x.data<T>();
    const T* gp = gy.data<T>();
    T* dx = k.out.data<T>();
    ParallelFor(d.planes, kPlaneGrain, [&](int64_t begin, int64_t end) {
      std::vector<Acc> acc(static_cast<size_t>(d.h * d.w));
      for (int64_t pl = begin; pl < end; ++pl) {
        std::fill(acc.begin(), acc.end(), Acc(0));
        const T* plane = xp + pl * d.h * d.w;
        const T* g = gp + pl * d.oh * d.ow;
        for (int64_t oy = 0; oy < d.oh; ++oy) {
          for (int64_t ox = 0; ox < d.ow; ++ox) {
            const int64_t at = MaxPickExact(plane, win, d.h, d.w, oy, ox);
            if (at >= 0) acc[at] += Convert<Acc>(g[oy * d.ow + ox]);
          }
        }
        T* out = dx + pl * d.h * d.w;
        for (int64_t i = 0; i < d.h * d.w; ++i) out[i] = Convert<T>(acc[i]);
      }
    });
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
