// The random ops on a CUDA device, drawing from the same counter-based
// Philox4x32-10 stream as the CPU kernels (runtime/generator.h): element i
// of a draw at offset o uses Philox word o + i under the generator's seed,
// so a CUDA draw equals the CPU draw of the same seed and offset (rand and
// dropout bit for bit; randn up to the device's log/cos rounding).
// rand/randn/dropout in f32, f64, f16 and bf16, randint into i64; other
// dtypes make a host round trip.
#ifndef STEPJIT_DEVICES_CUDA_KERNELS_RANDOM_OPS_H_
#define STEPJIT_DEVICES_CUDA_KERNELS_RANDOM_OPS_H_

#include <cstdint>

#include "devices/cuda/backend.h"
#include "devices/cuda/ops.h"
#include "runtime/dispatch.h"

namespace stepjit::runtime::cuda {

// Whether the random ops' device paths cover `op` with result dtype `out`.
bool RunsOnDeviceAsRandom(ir::OpId op, ir::DType out);

// Sets the device paths of the ops this module runs (rand, randn, randint and
// dropout).
void AddRandomPaths(DevicePaths& paths);

// The module's CUDA C, for tests that compile every kernel with NVRTC.
const char* RandomKernelSource();

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_DEVICES_CUDA_KERNELS_RANDOM_OPS_H_
