#include "devices/cuda/device_runtime.h"

#include "devices/cuda/backend.h"
#include "devices/cuda/kernels/copy.h"
#include "devices/cuda/memory/pinned_pool.h"
#include "devices/cuda/ops.h"
#include "devices/cuda/profile_timer.h"
#include "ir/status.h"

namespace stepjit::runtime::cuda {
namespace {

Backend& BackendFor(Device device, const char* what) {
  absl::StatusOr<Backend*> b = RequireBackend();
  SJ_REQUIRE(b.ok(), what, " on ", device.str(), ": ", b.status().message());
  SJ_REQUIRE(device.index >= 0 && device.index < (*b)->DeviceCount(), what,
             " on ", device.str(), ": there are ", (*b)->DeviceCount(),
             " CUDA device(s) (", (*b)->Describe(), ")");
  return **b;
}

void* Allocate(int64_t nbytes, Device device) {
  BackendFor(device, "tensor storage");
  absl::StatusOr<void*> p =
      DeviceAllocator().Allocate(static_cast<size_t>(nbytes), CurrentStream());
  SJ_REQUIRE(p.ok(), "allocating ", nbytes, " bytes on ", device.str(), ": ",
             p.status().message());
  return *p;
}

void Release(void* data, int64_t, Device) {
  // The block may still be in use by queued work on the stream it was
  // allocated on; the allocator reuses it in that stream's order.
  if (!HoldFree(data)) (void)DeviceAllocator().Free(data);
}

void* AllocatePinnedHost(int64_t nbytes) {
  BackendFor(Device::cuda(0), "pinned host memory");
  absl::StatusOr<void*> p = AllocatePinned(static_cast<size_t>(nbytes));
  SJ_REQUIRE(p.ok(), "allocating ", nbytes,
             " bytes of pinned host memory: ", p.status().message());
  return *p;
}

Tensor Transfer(const Tensor& t, Device to, bool non_blocking) {
  return ToDevice(t, to, non_blocking);
}

DeviceRuntime Make() {
  DeviceRuntime rt;
  rt.name = "cuda";
  // One entry point for every op: RunKernel chooses a generated, fixed or
  // library kernel, or a host round trip (devices/cuda/ops.h).
  rt.kernels.fill(&RunKernel);
  rt.copy_into = &CopyInto;
  rt.transfer = &Transfer;
  rt.allocate = &Allocate;
  rt.release = &Release;
  rt.allocate_pinned = &AllocatePinnedHost;
  rt.release_pinned = &FreePinned;
  rt.timer = &CudaTimer();
  return rt;
}

}  // namespace

const DeviceRuntime& Runtime() {
  static const DeviceRuntime rt = Make();
  return rt;
}

}  // namespace stepjit::runtime::cuda
