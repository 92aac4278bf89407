#include "runtime/cpu/device_runtime.h"

#include <cstdlib>
#include <new>

#include "runtime/cpu/kernels.h"
#include "runtime/storage.h"

namespace stepjit::runtime::cpu {
namespace {

constexpr int64_t kAlignment = 64;

int64_t Rounded(int64_t nbytes) {
  const int64_t rounded = ((nbytes + kAlignment - 1) / kAlignment) * kAlignment;
  return rounded == 0 ? kAlignment : rounded;
}

void* Allocate(int64_t nbytes, Device) {
  void* p =
      std::aligned_alloc(kAlignment, static_cast<size_t>(Rounded(nbytes)));
  if (p == nullptr) throw std::bad_alloc();
  CountHostBytes(nbytes);
  return p;
}

void Release(void* data, int64_t nbytes, Device) {
  std::free(data);
  CountHostBytes(-nbytes);
}

DeviceRuntime Make() {
  DeviceRuntime rt;
  rt.name = "cpu";
  KernelTable table = {};
  RegisterElementwiseKernels(table);
  RegisterReductionKernels(table);
  RegisterNnKernels(table);
  RegisterMatmulKernels(table);
  RegisterMiscKernels(table);
  RegisterSamplingKernels(table);
  for (int i = 0; i < ir::kNumOps; ++i) rt.kernels[i] = table[i];
  rt.copy_into = &CopyInto;
  rt.allocate = &Allocate;
  rt.release = &Release;
  return rt;
}

}  // namespace

const DeviceRuntime& Runtime() {
  static const DeviceRuntime rt = Make();
  return rt;
}

}  // namespace stepjit::runtime::cpu
