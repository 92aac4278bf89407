// The CUDA backend on a real GPU: every Backend call goes to the dlopen'ed
// driver (devices/cuda/driver/device.h), kernels compile with NVRTC for the
// device's architecture, and GEMMs run in cuBLASLt
// (devices/cuda/cublaslt/cublaslt.h).
#ifndef STEPJIT_DEVICES_CUDA_DRIVER_DRIVER_BACKEND_H_
#define STEPJIT_DEVICES_CUDA_DRIVER_DRIVER_BACKEND_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "devices/cuda/backend.h"

namespace stepjit::runtime::cuda {

// The backend on device `ordinal`, using its primary context. Unavailable,
// with Availability().reason, when there is no driver or no device;
// InvalidArgument when there is no such ordinal; FailedPrecondition when
// this NVRTC cannot compile for the device's architecture.
//
// Streams are created non-blocking (they do not synchronize with stream 0),
// events time. Graph capture is thread-local: calls that would break it are
// only refused on the capturing thread, and device and pinned allocations
// made during a capture (by the caching allocator, say) are allowed and not
// recorded. Stream 0, the legacy default stream, cannot be captured. Copies with pageable host memory follow the driver's
// cuMemcpy*Async rules, which are backend.h's: the call returns once the
// host buffer may be reused.
absl::StatusOr<std::unique_ptr<Backend>> MakeDriverBackend(int ordinal = 0);

// The architecture kernels are built for on a device of compute capability
// `device_arch` ("sm_86") when NVRTC compiles for `supported`: the device's
// own when listed, else the newest listed one of the same major version
// that is not newer (a cubin runs on later minor versions). Empty when none
// fits.
std::string PickKernelArch(const std::string& device_arch,
                           const std::vector<std::string>& supported);

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_DEVICES_CUDA_DRIVER_DRIVER_BACKEND_H_
