// Eager CUDA ops, queued on the current stream of the process's backend.
// Each op has a device path (DevicePaths), chosen from the op table:
// elementwise ops, in-place updates, fused reductions (sum, mean, amax) and
// row reductions (softmax, log_softmax, layer_norm, cross_entropy,
// mse_loss) run as single-op kernels from the CUDA C emitter (the scalar
// definitions and row expansions the compiled regions use); layout copies
// and fills as fixed kernels; matmul through the backend's GEMM (cuBLASLt
// on a GPU); and the ops the kernel modules register (one_hot in
// kernels/row_ops.h; rand/randn/randint/dropout in kernels/random_ops.h;
// embedding, its backward, slice_backward, arange, argmax and var in
// kernels/index_ops.h; conv2d, max_pool2d, avg_pool2d and their gradients
// in kernels/conv_ops.h) as hand-written kernels. What a path declines
// (half-precision inputs to the index and random kernels, argmax of an
// integer tensor, integer arithmetic) and the ops with no path run on the
// host: operands are copied to the CPU, the CPU kernel runs, and the result
// is copied back; EagerStats counts these host round trips.
#ifndef STEPJIT_DEVICES_CUDA_OPS_H_
#define STEPJIT_DEVICES_CUDA_OPS_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "codegen/cuda/cuda_emitter.h"
#include "devices/cuda/backend.h"
#include "devices/cuda/kernels/copy.h"
#include "devices/cuda/kernels/kernel_helpers.h"
#include "runtime/dispatch.h"

namespace stepjit::runtime::cuda {

// A device path of one op: queues `k` on the device and returns true, or
// returns false when these operand dtypes or forms are not covered (the op
// then makes a host round trip).
using DevicePath = bool (*)(Backend& b, const KernelArgs& k);
// The device path of each op; null where the op always runs on the host.
using DevicePaths = std::array<DevicePath, ir::kNumOps>;
// The paths of this process, built once from the op table and the kernel
// modules' registrations.
const DevicePaths& GetDevicePaths();

// Whether `op` runs on the device: a view, or an op with a device path
// (false: it makes a host round trip, which a CUDA graph cannot capture).
bool RunsOnDevice(ir::OpId op);

// Whether f32 matmuls on CUDA may use TF32 tensor cores (10-bit mantissa
// products, f32 accumulation), like torch.backends.cuda.matmul.allow_tf32.
// Off by default: f32 results then match the CPU within f32 rounding.
void SetAllowTf32(bool allow);
bool AllowTf32();

// Runs `k.op` on CUDA tensors: `k.inputs` already in the op's compute dtype,
// `k.out` allocated on the same device (inputs[0] for in-place ops).
void RunKernel(const KernelArgs& k);

// dst (any strides) = src converted to dst's dtype and broadcast to dst's
// shape; both on the CUDA device.
void CopyInto(const Tensor& dst, const Tensor& src);

// A compiled region (or single op) loaded on the backend, with its kernels
// resolved in launch order.
struct LoadedRegion {
  codegen::cuda::RegionSource source;
  std::shared_ptr<LoadedModule> module;
  std::vector<KernelHandle> kernels;
};
// Compiles and loads `source` once per backend (memoized by its text).
absl::StatusOr<std::shared_ptr<const LoadedRegion>> LoadRegion(
    const codegen::cuda::RegionSource& source);
// Queues the region's kernels over `ptrs` (one device pointer per body
// param, then per return), adding its scratch and accumulator buffers.
absl::Status LaunchRegion(const LoadedRegion& region,
                          absl::Span<void* const> ptrs, Stream stream);
// Queues the phase kernels of a multi-region module (`combined`, loaded by
// LoadRegion from MultiRegionSource::combined) over each member's pointers
// (as for LaunchRegion), adding each member's scratch and accumulators.
absl::Status LaunchMultiRegion(const LoadedRegion& combined,
                               absl::Span<const codegen::cuda::RegionSource> members,
                               absl::Span<const std::vector<void*>> ptrs, Stream stream);

// Queues `kernel` of `module` on the current stream with enough blocks of
// the backend's preferred size to give each of `threads` grid-stride
// indices a thread (up to its grid limit); counted as a hand-written
// launch. Throws stepjit::Error when it cannot.
void LaunchFixed(Backend& b, const FixedModule& module, absl::string_view kernel,
                 int64_t threads, void** args);

struct EagerStats {
  int64_t generated_launches = 0;  // single-op kernels queued
  int64_t copy_launches = 0;       // hand-written kernels: copies, fills, row ops
  int64_t gemms = 0;
  int64_t host_fallbacks = 0;      // ops run on the host (see above)
  int64_t modules_loaded = 0;
};
EagerStats GetEagerStats();
// The ops that ran on the host, with counts, for people ("softmax x3, ...").
std::string HostFallbackSummary();

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_DEVICES_CUDA_OPS_H_
