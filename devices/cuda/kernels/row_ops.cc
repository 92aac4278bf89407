// one_hot written by hand, in f32, f64, f16 and bf16. It stays: it is a
// scatter of an integer index, not a row reduction the region emitter
// lowers. softmax, log_softmax and cross_entropy (with layer_norm and
// mse_loss) run as generated single-op kernels (devices/cuda/ops.cc,
// codegen/cuda/single_op.h) from the same row plan fused regions use.
#include "devices/cuda/kernels/row_ops.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "devices/cuda/kernels/kernel_helpers.h"
#include "devices/cuda/ops.h"
#include "ir/status.h"

namespace stepjit::runtime::cuda {
namespace {

using ir::AttrKey;
using ir::DType;
using ir::OpId;

// T is the storage type, ACC the type an index is written in; sj_put
// (kernel_helpers.h) converts as the CPU's Convert does.
constexpr char kRowKernelBody[] = R"(
#define SJ_ROW_KERNELS(S, T, ACC)                                            \
  extern "C" __global__ void sj_one_hot_##S(const long long* idx, T* out,    \
                                            long long n, long long c) {      \
    SJ_GRID_LOOP(i, n) {                                                     \
      const long long k = idx[i];                                            \
      if (k >= 0 && k < c) sj_put(&out[i * c + k], (ACC)1);                  \
    }                                                                        \
  }
SJ_ROW_KERNELS(f32, float, float)
SJ_ROW_KERNELS(f64, double, double)
SJ_ROW_KERNELS(f16, __half, float)
SJ_ROW_KERNELS(bf16, __nv_bfloat16, float)
)";

const FixedModule& Module() {
  static const FixedModule* m = new FixedModule(
      FloatKernelModule("sj_rows", kRowKernelBody, {"one_hot"}));
  return *m;
}

void Launch(Backend& b, const std::string& kernel, int64_t threads, void** args) {
  LaunchFixed(b, Module(), kernel, threads, args);
}

std::string Suffix(DType t) { return std::string(ir::DTypeName(t)); }

bool OneHot(Backend& b, const KernelArgs& k) {
  if (!ir::IsFloating(k.out.dtype()) || k.inputs[0].dtype() != DType::kI64)
    return false;
  const Tensor idx = ContiguousOnDevice(k.inputs[0]);
  ThrowIfError(b.Memset(k.out.data_ptr(), 0, k.out.numel() * k.out.element_size(),
                        CurrentStream()));
  long long n = idx.numel(), c = k.attrs.GetInt(AttrKey::kNumClasses);
  const void* ip = idx.data_ptr();
  void* op = k.out.data_ptr();
  void* args[] = {&ip, &op, &n, &c};
  if (n > 0) Launch(b, absl::StrCat("sj_one_hot_", Suffix(k.out.dtype())), n, args);
  return true;
}

}  // namespace

const char* RowKernelSource() { return Module().source.c_str(); }

void AddRowPaths(DevicePaths& paths) {
  paths[static_cast<int>(OpId::kOneHot)] = &OneHot;
}

}  // namespace stepjit::runtime::cuda
