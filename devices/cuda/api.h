// The user-facing CUDA helpers, in the spirit of torch.cuda: whether a device
// (or the host emulator, STEPJIT_CUDA_BACKEND=emulator) is there, waiting for
// queued work, and the caching allocator's statistics.
#ifndef STEPJIT_DEVICES_CUDA_API_H_
#define STEPJIT_DEVICES_CUDA_API_H_

#include <string>

#include "devices/cuda/memory/caching_allocator.h"

namespace stepjit::cuda {

bool is_available();
// Why not, for people (empty when available).
std::string unavailable_reason();
// "NVIDIA H200 (sm_90), driver 13.0" or "host emulator (...)".
std::string device_name();
int device_count();
// Waits for all work queued on the device. Throws stepjit::Error when CUDA
// is not available or queued work failed.
void synchronize();
// Live/reserved/peak bytes of the device's caching allocator.
runtime::cuda::MemoryStats memory_stats();
void reset_peak_memory_stats();
// Returns cached, unused device memory to the driver.
void empty_cache();
// TF32 for f32 matmuls (off by default).
void set_allow_tf32(bool allow);

}  // namespace stepjit::cuda

#endif  // STEPJIT_DEVICES_CUDA_API_H_
