// torch.cuda-style helpers over the process's CUDA backend.
#include "devices/cuda/api.h"

#include "devices/cuda/backend.h"
#include "devices/cuda/ops.h"
#include "ir/status.h"

namespace stepjit::cuda {
namespace {
runtime::cuda::Backend& Require(const char* what) {
  absl::StatusOr<runtime::cuda::Backend*> b = runtime::cuda::RequireBackend();
  SJ_REQUIRE(b.ok(), "cuda::", what, ": ", b.status().message());
  return **b;
}
}  // namespace

bool is_available() { return runtime::cuda::GetBackend() != nullptr; }

std::string unavailable_reason() {
  absl::StatusOr<runtime::cuda::Backend*> b = runtime::cuda::RequireBackend();
  return b.ok() ? "" : std::string(b.status().message());
}

std::string device_name() { return Require("device_name").Describe(); }

int device_count() {
  runtime::cuda::Backend* b = runtime::cuda::GetBackend();
  return b == nullptr ? 0 : b->DeviceCount();
}

void synchronize() {
  const absl::Status st = Require("synchronize").SynchronizeDevice();
  SJ_REQUIRE(st.ok(), "cuda::synchronize: ", st.message());
}

runtime::cuda::MemoryStats memory_stats() {
  Require("memory_stats");
  return runtime::cuda::DeviceAllocator().memory_stats();
}

void reset_peak_memory_stats() {
  Require("reset_peak_memory_stats");
  runtime::cuda::DeviceAllocator().ResetPeakStats();
}

void empty_cache() {
  synchronize();
  const absl::Status st = runtime::cuda::DeviceAllocator().EmptyCache();
  SJ_REQUIRE(st.ok(), "cuda::empty_cache: ", st.message());
}

void set_allow_tf32(bool allow) { runtime::cuda::SetAllowTf32(allow); }

}  // namespace stepjit::cuda
