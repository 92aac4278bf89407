// oneDNN convolution primitives for conv2d and its two gradients (f32), in
// the layout oneDNN prefers, cached per shape and thread count.
#ifndef STEPJIT_DEVICES_CPU_CONV_DNNL_H_
#define STEPJIT_DEVICES_CPU_CONV_DNNL_H_

#include <cstdint>

#include "absl/status/status.h"
#include "ir/conv.h"
#include "ir/dtype.h"

namespace stepjit::runtime::cpu {

// Which path the eager conv2d kernels take for f32, f16 and bf16 (computed
// in f32); f64 always takes the im2col + GEMM reference. kAuto: oneDNN
// where it has a primitive, the reference otherwise; kOneDnn: an error where
// it has none. Process-wide; tests set it to compare the two paths.
enum class ConvBackend { kAuto, kOneDnn, kReference };
ConvBackend ConvBackendInUse();
// Returns the previous setting.
ConvBackend SetConvBackend(ConvBackend backend);

enum class ConvPass { kForward, kBackwardInput, kBackwardWeight };

// The sizes of one convolution: input [n, c, h, w], weight [o, c / groups,
// kh, kw] (win.groups), output [n, o, oh, ow].
struct ConvShape {
  int64_t n, c, h, w, o, kh, kw, oh, ow;
  ir::Window2d win;
};

// One pass over contiguous buffers of `dtype` (f32, or bf16 where oneDNN has
// bf16 kernels: f32 accumulation, each result rounded once) in PyTorch's
// layouts (NCHW, OIHW):
//   kForward:        a = input,  b = weight, bias (may be null), out = output
//   kBackwardInput:  a = grad of the output, b = weight, out = grad of input
//   kBackwardWeight: a = grad of the output, b = input,  out = grad of weight
// `out` is overwritten. UnimplementedError when oneDNN has no primitive for
// this geometry on this CPU (the answer is cached too).
absl::Status DnnlConv2d(ConvPass pass, const ConvShape& s, ir::DType dtype,
                        const void* a, const void* b, const void* bias,
                        void* out);

}  // namespace stepjit::runtime::cpu

#endif  // STEPJIT_DEVICES_CPU_CONV_DNNL_H_
