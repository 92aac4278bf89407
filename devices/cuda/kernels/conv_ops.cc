// conv2d, max_pool2d, avg_pool2d and their gradients written by hand: one
// thread per element of the result, which gathers every term that reaches
// it (a gradient thread walks the windows that contain its element) instead
// of scattering with atomics, so a result is the same on every run. The
// window comes from ir::WindowOf (ir/conv.h) and the output sizes from the
// result types, as on the CPU (devices/cpu/conv_kernels.cc). f64 accumulates
// in f64; f32, f16 and bf16 in f32. Tested against float64 loops in
// tests/cuda/conv_ops_cuda_test.cc.
#include "devices/cuda/kernels/conv_ops.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "devices/cuda/kernels/kernel_helpers.h"
#include "devices/cuda/ops.h"
#include "ir/conv.h"
#include "ir/status.h"

namespace stepjit::runtime::cuda {
namespace {

using ir::DType;
using ir::OpId;

// The kernels are templates over the storage type T and the accumulator A;
// SJ_CONV_KERNELS only names their f32, f64, f16 and bf16 entry points.
constexpr char kConvKernelBody[] = R"(
// One launch's sizes: the input [n, c, h, w], the output's channels o and
// [oh, ow], and the window (ir::Window2d). All long long: the host passes
// the same layout (WindowArgs).
struct sj_window_t {
  long long n, c, h, w, o, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, groups;
  long long count_include_pad;
};
// Output (oy, ox)'s tap i of a window's row (column): the input row
// (column) it reads, outside [0, h) ([0, w)) in the padding.
__device__ __forceinline__ long long sj_tap_y(const sj_window_t& s, long long oy, long long i) {
  return oy * s.sh - s.ph + i * s.dh;
}
__device__ __forceinline__ long long sj_tap_x(const sj_window_t& s, long long ox, long long j) {
  return ox * s.sw - s.pw + j * s.dw;
}
// The output row (column) whose tap i reads input row y (column x), or -1:
// the inverse of sj_tap_y (sj_tap_x).
__device__ __forceinline__ long long sj_out_y(const sj_window_t& s, long long y, long long i) {
  const long long t = y + s.ph - i * s.dh;
  return t >= 0 && t % s.sh == 0 && t / s.sh < s.oh ? t / s.sh : -1;
}
__device__ __forceinline__ long long sj_out_x(const sj_window_t& s, long long x, long long j) {
  const long long t = x + s.pw - j * s.dw;
  return t >= 0 && t % s.sw == 0 && t / s.sw < s.ow ? t / s.sw : -1;
}
// ir::AvgPoolDivisor for the window starting at (y0, x0), restated here: a
// table of the host function's values would be a host-to-device copy per
// call, which a CUDA graph cannot capture.
__device__ long long sj_avg_divisor(const sj_window_t& s, long long y0, long long x0) {
  long long y1 = y0 + s.kh < s.h + s.ph ? y0 + s.kh : s.h + s.ph;
  long long x1 = x0 + s.kw < s.w + s.pw ? x0 + s.kw : s.w + s.pw;
  const long long padded = (y1 - y0) * (x1 - x0);
  y0 = y0 > 0 ? y0 : 0;
  x0 = x0 > 0 ? x0 : 0;
  y1 = y1 < s.h ? y1 : s.h;
  x1 = x1 < s.w ? x1 : s.w;
  if (y0 >= y1 || x0 >= x1) return 0;
  return s.count_include_pad ? padded : (y1 - y0) * (x1 - x0);
}
// The element (y * w + x) of `plane` max_pool2d's window at (oy, ox) picks:
// the first largest in window order, or the last NaN; -1 when the whole
// window is padding (possible with dilation: kernel 2, padding 1, dilation
// 3 over h = 2 reads rows -1 and 2).
template <typename T>
__device__ long long sj_max_pick(const T* plane, const sj_window_t& s, long long oy,
                                 long long ox) {
  long long at = -1;
  decltype(sj_ld(plane[0])) best = 0;
  for (long long i = 0; i < s.kh; ++i) {
    const long long y = sj_tap_y(s, oy, i);
    if (y < 0 || y >= s.h) continue;
    for (long long j = 0; j < s.kw; ++j) {
      const long long x = sj_tap_x(s, ox, j);
      if (x < 0 || x >= s.w) continue;
      const auto v = sj_ld(plane[y * s.w + x]);
      if (at < 0 || v > best || v != v) best = v, at = y * s.w + x;
    }
  }
  return at;
}
// out[n, o, oy, ox] = bias[o] + the window's products with o's filter over
// the channels of o's group.
template <typename T, typename A>
__device__ void sj_conv2d(const T* x, const T* wt, const T* bias, T* out,
                          const sj_window_t& s) {
  const long long cg = s.c / s.groups, og = s.o / s.groups;
  SJ_GRID_LOOP(e, s.n * s.o * s.oh * s.ow) {
    const long long ox = e % s.ow, oy = e / s.ow % s.oh, o = e / (s.ow * s.oh) % s.o,
                    n = e / (s.ow * s.oh * s.o);
    A acc = bias ? (A)sj_ld(bias[o]) : (A)0;
    for (long long c = 0; c < cg; ++c) {
      const T* plane = x + (n * s.c + o / og * cg + c) * s.h * s.w;
      const T* taps = wt + (o * cg + c) * s.kh * s.kw;
      for (long long i = 0; i < s.kh; ++i) {
        const long long y = sj_tap_y(s, oy, i);
        if (y < 0 || y >= s.h) continue;
        for (long long j = 0; j < s.kw; ++j) {
          const long long xx = sj_tap_x(s, ox, j);
          if (xx < 0 || xx >= s.w) continue;
          acc += (A)sj_ld(plane[y * s.w + xx]) * (A)sj_ld(taps[i * s.kw + j]);
        }
      }
    }
    sj_put(&out[e], acc);
  }
}
// dx[n, c, y, x]: the gradient of every output of c's group whose window
// reads (y, x), times the tap that reads it.
template <typename T, typename A>
__device__ void sj_conv2d_backward_input(const T* grad, const T* wt, T* dx,
                                         const sj_window_t& s) {
  const long long cg = s.c / s.groups, og = s.o / s.groups;
  SJ_GRID_LOOP(e, s.n * s.c * s.h * s.w) {
    const long long x = e % s.w, y = e / s.w % s.h, c = e / (s.w * s.h) % s.c,
                    n = e / (s.w * s.h * s.c);
    A acc = 0;
    for (long long o = c / cg * og; o < (c / cg + 1) * og; ++o) {
      const T* g = grad + (n * s.o + o) * s.oh * s.ow;
      const T* taps = wt + (o * cg + c % cg) * s.kh * s.kw;
      for (long long i = 0; i < s.kh; ++i) {
        const long long oy = sj_out_y(s, y, i);
        if (oy < 0) continue;
        for (long long j = 0; j < s.kw; ++j) {
          const long long ox = sj_out_x(s, x, j);
          if (ox < 0) continue;
          acc += (A)sj_ld(g[oy * s.ow + ox]) * (A)sj_ld(taps[i * s.kw + j]);
        }
      }
    }
    sj_put(&dx[e], acc);
  }
}
// dw[o, c, i, j]: over the batch and the outputs, each output's gradient
// times the input element tap (i, j) of its window reads.
template <typename T, typename A>
__device__ void sj_conv2d_backward_weight(const T* grad, const T* x, T* dw,
                                          const sj_window_t& s) {
  const long long cg = s.c / s.groups, og = s.o / s.groups;
  SJ_GRID_LOOP(e, s.o * cg * s.kh * s.kw) {
    const long long j = e % s.kw, i = e / s.kw % s.kh, c = e / (s.kw * s.kh) % cg,
                    o = e / (s.kw * s.kh * cg);
    A acc = 0;
    for (long long n = 0; n < s.n; ++n) {
      const T* g = grad + (n * s.o + o) * s.oh * s.ow;
      const T* plane = x + (n * s.c + o / og * cg + c) * s.h * s.w;
      for (long long oy = 0; oy < s.oh; ++oy) {
        const long long y = sj_tap_y(s, oy, i);
        if (y < 0 || y >= s.h) continue;
        for (long long ox = 0; ox < s.ow; ++ox) {
          const long long xx = sj_tap_x(s, ox, j);
          if (xx < 0 || xx >= s.w) continue;
          acc += (A)sj_ld(g[oy * s.ow + ox]) * (A)sj_ld(plane[y * s.w + xx]);
        }
      }
    }
    sj_put(&dw[e], acc);
  }
}
// The picked element itself (-inf for a window wholly in the padding, as
// the CPU writes).
template <typename T, typename A>
__device__ void sj_max_pool2d(const T* x, T* out, const sj_window_t& s) {
  SJ_GRID_LOOP(e, s.n * s.c * s.oh * s.ow) {
    const T* plane = x + e / (s.ow * s.oh) * s.h * s.w;
    const long long at = sj_max_pick(plane, s, e / s.ow % s.oh, e % s.ow);
    if (at >= 0) out[e] = plane[at];
    else sj_put(&out[e], (A)__longlong_as_double(-4503599627370496LL));
  }
}
// dx[n, c, y, x]: the gradient of every window that contains (y, x) and
// picks it, the windows in output order (taps from the last) as the CPU's
// scatter over the outputs adds them.
template <typename T, typename A>
__device__ void sj_max_pool2d_backward(const T* grad, const T* x, T* dx,
                                       const sj_window_t& s) {
  SJ_GRID_LOOP(e, s.n * s.c * s.h * s.w) {
    const long long at = e % (s.h * s.w), p = e / (s.h * s.w);
    const T* plane = x + p * s.h * s.w;
    const T* g = grad + p * s.oh * s.ow;
    A acc = 0;
    for (long long i = s.kh - 1; i >= 0; --i) {
      const long long oy = sj_out_y(s, at / s.w, i);
      if (oy < 0) continue;
      for (long long j = s.kw - 1; j >= 0; --j) {
        const long long ox = sj_out_x(s, at % s.w, j);
        if (ox >= 0 && sj_max_pick(plane, s, oy, ox) == at) acc += sj_ld(g[oy * s.ow + ox]);
      }
    }
    sj_put(&dx[e], acc);
  }
}
// The window's sum over the input (no dilation) by its divisor.
template <typename T, typename A>
__device__ void sj_avg_pool2d(const T* in, T* out, const sj_window_t& s) {
  SJ_GRID_LOOP(e, s.n * s.c * s.oh * s.ow) {
    const T* plane = in + e / (s.ow * s.oh) * s.h * s.w;
    const long long y0 = sj_tap_y(s, e / s.ow % s.oh, 0), x0 = sj_tap_x(s, e % s.ow, 0);
    A sum = 0;
    for (long long y = y0 > 0 ? y0 : 0; y < y0 + s.kh && y < s.h; ++y) {
      for (long long x = x0 > 0 ? x0 : 0; x < x0 + s.kw && x < s.w; ++x)
        sum += sj_ld(plane[y * s.w + x]);
    }
    const long long d = sj_avg_divisor(s, y0, x0);
    sj_put(&out[e], d > 0 ? sum / (A)d : (A)0);
  }
}
// dx[n, c, y, x]: each containing window's gradient by its divisor, in
// output order.
template <typename T, typename A>
__device__ void sj_avg_pool2d_backward(const T* grad, T* dx, const sj_window_t& s) {
  SJ_GRID_LOOP(e, s.n * s.c * s.h * s.w) {
    const long long x = e % s.w, y = e / s.w % s.h;
    const T* g = grad + e / (s.w * s.h) * s.oh * s.ow;
    A acc = 0;
    for (long long i = s.kh - 1; i >= 0; --i) {
      const long long oy = sj_out_y(s, y, i);
      if (oy < 0) continue;
      for (long long j = s.kw - 1; j >= 0; --j) {
        const long long ox = sj_out_x(s, x, j);
        if (ox < 0) continue;
        const long long d = sj_avg_divisor(s, sj_tap_y(s, oy, 0), sj_tap_x(s, ox, 0));
        if (d > 0) acc += (A)sj_ld(g[oy * s.ow + ox]) / (A)d;
      }
    }
    sj_put(&dx[e], acc);
  }
}
#define SJ_CONV_KERNELS(S, T, ACC)                                             \
  extern "C" __global__ void sj_conv2d_##S(const T* x, const T* wt,            \
                                           const T* bias, T* out,              \
                                           const sj_window_t s) {              \
    sj_conv2d<T, ACC>(x, wt, bias, out, s);                                    \
  }                                                                            \
  extern "C" __global__ void sj_conv2d_backward_input_##S(                     \
      const T* grad, const T* wt, T* dx, const sj_window_t s) {                \
    sj_conv2d_backward_input<T, ACC>(grad, wt, dx, s);                         \
  }                                                                            \
  extern "C" __global__ void sj_conv2d_backward_weight_##S(                    \
      const T* grad, const T* x, T* dw, const sj_window_t s) {                 \
    sj_conv2d_backward_weight<T, ACC>(grad, x, dw, s);                         \
  }                                                                            \
  extern "C" __global__ void sj_max_pool2d_##S(const T* x, T* out,             \
                                               const sj_window_t s) {          \
    sj_max_pool2d<T, ACC>(x, out, s);                                          \
  }                                                                            \
  extern "C" __global__ void sj_max_pool2d_backward_##S(                       \
      const T* grad, const T* x, T* dx, const sj_window_t s) {                 \
    sj_max_pool2d_backward<T, ACC>(grad, x, dx, s);                            \
  }                                                                            \
  extern "C" __global__ void sj_avg_pool2d_##S(const T* in, T* out,            \
                                               const sj_window_t s) {          \
    sj_avg_pool2d<T, ACC>(in, out, s);                                         \
  }                                                                            \
  extern "C" __global__ void sj_avg_pool2d_backward_##S(                       \
      const T* grad, T* dx, const sj_window_t s) {                             \
    sj_avg_pool2d_backward<T, ACC>(grad, dx, s);                               \
  }
SJ_CONV_KERNELS(f32, float, float)
SJ_CONV_KERNELS(f64, double, double)
SJ_CONV_KERNELS(f16, __half, float)
SJ_CONV_KERNELS(bf16, __nv_bfloat16, float)
)";

const FixedModule& Module() {
  static const FixedModule* m = new FixedModule(FloatKernelModule(
      "sj_conv", kConvKernelBody,
      {"conv2d", "conv2d_backward_input", "conv2d_backward_weight",
       "max_pool2d", "max_pool2d_backward", "avg_pool2d",
       "avg_pool2d_backward"}));
  return *m;
}

// sj_window_t, field for field.
struct WindowArgs {
  long long n, c, h, w, o, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, groups;
  long long count_include_pad;
};

// The sizes of `k`: its window (a convolution's kernel from `weight`), the
// [N, C, H, W] `input` and the [N, O, OH, OW] `output`.
WindowArgs Sizes(const KernelArgs& k, ShapeRef weight, ShapeRef input,
                 ShapeRef output) {
  const ir::Window2d win = ValueOrThrow(ir::WindowOf(k.op, k.attrs, weight));
  return {.n = input[0],
          .c = input[1],
          .h = input[2],
          .w = input[3],
          .o = output[1],
          .oh = output[2],
          .ow = output[3],
          .kh = win.kernel[0],
          .kw = win.kernel[1],
          .sh = win.stride[0],
          .sw = win.stride[1],
          .ph = win.padding[0],
          .pw = win.padding[1],
          .dh = win.dilation[0],
          .dw = win.dilation[1],
          .groups = win.groups,
          .count_include_pad = win.count_include_pad ? 1 : 0};
}

// The kernels read and write one floating dtype.
bool OneFloatDType(const KernelArgs& k) {
  if (!ir::IsFloating(k.out.dtype())) return false;
  for (const Tensor& t : k.inputs) {
    if (t.dtype() != k.out.dtype()) return false;
  }
  return true;
}

// sj_<base>_<dtype> over `inputs` (device pointers), then k.out, then the
// sizes: one thread per element of k.out.
void Launch(Backend& b, const KernelArgs& k, const char* base,
            std::vector<const void*> inputs, WindowArgs sizes) {
  if (k.out.numel() == 0) return;
  void* out = k.out.data_ptr();
  std::vector<void*> args;
  for (const void*& p : inputs) args.push_back(&p);
  args.push_back(&out);
  args.push_back(&sizes);
  LaunchFixed(b, Module(),
              absl::StrCat("sj_", base, "_", ir::DTypeName(k.out.dtype())),
              k.out.numel(), args.data());
}

bool Conv2d(Backend& b, const KernelArgs& k) {
  if (!OneFloatDType(k)) return false;
  const Tensor x = ContiguousOnDevice(k.inputs[0]),
               w = ContiguousOnDevice(k.inputs[1]);
  const Tensor bias =
      k.inputs.size() == 3 ? ContiguousOnDevice(k.inputs[2]) : Tensor();
  Launch(
      b, k, "conv2d",
      {x.data_ptr(), w.data_ptr(), bias.defined() ? bias.data_ptr() : nullptr},
      Sizes(k, w.shape(), x.shape(), k.out.shape()));
  return true;
}

bool Conv2dBackwardInput(Backend& b, const KernelArgs& k) {
  if (!OneFloatDType(k)) return false;
  const Tensor g = ContiguousOnDevice(k.inputs[0]),
               w = ContiguousOnDevice(k.inputs[1]);
  Launch(b, k, "conv2d_backward_input", {g.data_ptr(), w.data_ptr()},
         Sizes(k, w.shape(), k.out.shape(), g.shape()));
  return true;
}

bool Conv2dBackwardWeight(Backend& b, const KernelArgs& k) {
  if (!OneFloatDType(k)) return false;
  const Tensor g = ContiguousOnDevice(k.inputs[0]),
               x = ContiguousOnDevice(k.inputs[1]);
  Launch(b, k, "conv2d_backward_weight", {g.data_ptr(), x.data_ptr()},
         Sizes(k, k.out.shape(), x.shape(), g.shape()));
  return true;
}

bool MaxPool2d(Backend& b, const KernelArgs& k) {
  if (!OneFloatDType(k)) return false;
  const Tensor x = ContiguousOnDevice(k.inputs[0]);
  Launch(b, k, "max_pool2d", {x.data_ptr()},
         Sizes(k, {}, x.shape(), k.out.shape()));
  return true;
}

bool MaxPool2dBackward(Backend& b, const KernelArgs& k) {
  if (!OneFloatDType(k)) return false;
  const Tensor g = ContiguousOnDevice(k.inputs[0]),
               x = ContiguousOnDevice(k.inputs[1]);
  Launch(b, k, "max_pool2d_backward", {g.data_ptr(), x.data_ptr()},
         Sizes(k, {}, x.shape(), g.shape()));
  return true;
}

bool AvgPool2d(Backend& b, const KernelArgs& k) {
  if (!OneFloatDType(k)) return false;
  const Tensor x = ContiguousOnDevice(k.inputs[0]);
  Launch(b, k, "avg_pool2d", {x.data_ptr()},
         Sizes(k, {}, x.shape(), k.out.shape()));
  return true;
}

bool AvgPool2dBackward(Backend& b, const KernelArgs& k) {
  if (!OneFloatDType(k)) return false;
  const Tensor g = ContiguousOnDevice(k.inputs[0]);
  Launch(b, k, "avg_pool2d_backward", {g.data_ptr()},
         Sizes(k, {}, k.out.shape(), g.shape()));
  return true;
}

}  // namespace

const char* ConvKernelSource() { return Module().source.c_str(); }

void AddConvPaths(DevicePaths& paths) {
  paths[static_cast<int>(OpId::kConv2d)] = &Conv2d;
  paths[static_cast<int>(OpId::kConv2dBackwardInput)] = &Conv2dBackwardInput;
  paths[static_cast<int>(OpId::kConv2dBackwardWeight)] = &Conv2dBackwardWeight;
  paths[static_cast<int>(OpId::kMaxPool2d)] = &MaxPool2d;
  paths[static_cast<int>(OpId::kMaxPool2dBackward)] = &MaxPool2dBackward;
  paths[static_cast<int>(OpId::kAvgPool2d)] = &AvgPool2d;
  paths[static_cast<int>(OpId::kAvgPool2dBackward)] = &AvgPool2dBackward;
}

}  // namespace stepjit::runtime::cuda
