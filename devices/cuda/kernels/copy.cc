// Layout copies and fills of CUDA tensors (one kernel per element size, any
// strides and broadcasts), and copies between the host and the device.
#include "devices/cuda/kernels/copy.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "devices/cpu/kernels.h"
#include "devices/cpu/loops.h"
#include "devices/cuda/memory/pinned_pool.h"
#include "devices/cuda/ops.h"
#include "ir/status.h"

namespace stepjit::runtime::cuda {
namespace {

constexpr int kMaxRank = 8;

// Layout copies and fills for any element size: element i of the
// destination's shape sits at sj_offset(layout, i).
constexpr char kFixedKernels[] = R"(struct SjLayout {
  long long size[8];
  long long stride[8];
  int rank;
};
__device__ __forceinline__ long long sj_offset(const SjLayout& l, long long i) {
  long long off = 0;
  for (int d = l.rank - 1; d >= 0; --d) {
    const long long q = i % l.size[d];
    i /= l.size[d];
    off += q * l.stride[d];
  }
  return off;
}
#define SJ_COPY_FILL(N, T)                                                   \
  extern "C" __global__ void sj_copy_##N(const T* src, SjLayout ls, T* dst, \
                                         SjLayout ld, long long n) {         \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;     \
         i < n; i += (long long)gridDim.x * blockDim.x) {                    \
      dst[sj_offset(ld, i)] = src[sj_offset(ls, i)];                         \
    }                                                                        \
  }                                                                          \
  extern "C" __global__ void sj_fill_##N(T* dst, SjLayout ld, T v,          \
                                         long long n) {                      \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;     \
         i < n; i += (long long)gridDim.x * blockDim.x) {                    \
      dst[sj_offset(ld, i)] = v;                                             \
    }                                                                        \
  }
SJ_COPY_FILL(1, unsigned char)
SJ_COPY_FILL(2, unsigned short)
SJ_COPY_FILL(4, unsigned int)
SJ_COPY_FILL(8, unsigned long long)
)";

struct SjLayout {
  long long size[kMaxRank];
  long long stride[kMaxRank];
  int rank;
};

void Check(const absl::Status& s, absl::string_view what) {
  SJ_REQUIRE(s.ok(), what, ": ", s.message());
}

const FixedModule& CopyModule() {
  static const FixedModule* m = [] {
    auto* module = new FixedModule{
        .name = "sj_fixed", .source = kFixedKernels, .kernels = {}};
    for (const char* kind : {"copy", "fill"}) {
      for (int n : {1, 2, 4, 8})
        module->kernels.push_back(absl::StrCat("sj_", kind, "_", n));
    }
    return module;
  }();
  return *m;
}

// `t`'s layout over `shape` (broadcast dims get stride 0).
SjLayout LayoutOf(const Tensor& t, ShapeRef shape) {
  SJ_REQUIRE(static_cast<int>(shape.size()) <= kMaxRank, "CUDA copy of a ",
             shape.size(), "-d tensor: at most ", kMaxRank, " dims are supported");
  SjLayout l{};
  l.rank = static_cast<int>(shape.size());
  Shape strides = cpu::BroadcastByteStrides(t, shape);
  for (int d = 0; d < l.rank; ++d) {
    l.size[d] = shape[d];
    l.stride[d] = strides[d] / t.element_size();
  }
  return l;
}

}  // namespace

void CopySameDType(const Tensor& dst, const Tensor& src) {
  Backend& b = BackendOrThrow();
  const int64_t n = dst.numel();
  if (n == 0) return;
  if (dst.is_contiguous() && src.is_contiguous() && src.shape() == dst.shape()) {
    Check(b.Copy(dst.data_ptr(), src.data_ptr(), n * dst.element_size(),
                 CopyKind::kDeviceToDevice, CurrentStream()),
          "CUDA device-to-device copy");
    return;
  }
  const void* sp = src.data_ptr();
  void* dp = dst.data_ptr();
  SjLayout ls = LayoutOf(src, dst.shape()), ld = LayoutOf(dst, dst.shape());
  long long count = n;
  void* args[] = {&sp, &ls, &dp, &ld, &count};
  LaunchFixed(b, CopyModule(), absl::StrCat("sj_copy_", dst.element_size()), n, args);
}

void Fill(const Tensor& dst, double value) {
  Backend& b = BackendOrThrow();
  const int64_t n = dst.numel();
  if (n == 0) return;
  // The element as the CPU kernel writes it, as raw bits.
  Tensor one = empty({}, {.dtype = dst.dtype()});
  cpu::FillWith(one, value);
  uint64_t bits = 0;
  std::memcpy(&bits, one.data_ptr(), dst.element_size());
  void* dp = dst.data_ptr();
  SjLayout ld = LayoutOf(dst, dst.shape());
  long long count = n;
  void* args[] = {&dp, &ld, &bits, &count};
  LaunchFixed(b, CopyModule(), absl::StrCat("sj_fill_", dst.element_size()), n, args);
}

Tensor ContiguousOnDevice(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor c = empty(t.shape(), {.dtype = t.dtype(), .device = t.device()});
  CopySameDType(c, t);
  return c;
}

Tensor ToDevice(const Tensor& t, Device device, bool non_blocking) {
  if (t.device() == device) return t;
  SJ_REQUIRE(t.device().is_cpu() || device.is_cpu(), "copy from ", t.device().str(),
             " to ", device.str(), ": copies between CUDA devices are not supported");
  Backend& b = BackendOrThrow();
  const size_t bytes = static_cast<size_t>(t.numel() * t.element_size());
  const Stream stream = CurrentStream();
  if (device.is_cuda()) {
    Tensor src = cpu::ContiguousCopyIfNeeded(t);
    Tensor dst = empty(t.shape(), {.dtype = t.dtype(), .device = device});
    if (bytes > 0) {
      Check(b.Copy(dst.data_ptr(), src.data_ptr(), bytes, CopyKind::kHostToDevice, stream),
            absl::StrCat("copy of ", bytes, " bytes to ", device.str()));
      // A pinned source is read asynchronously: unless asked not to, wait,
      // so that the caller may overwrite it. Its block is not reused before
      // the copy is done either way.
      if (src.storage()->pinned()) {
        RecordPinnedUse(src.storage()->data(), stream);
        if (!non_blocking) Check(b.SynchronizeStream(stream), "synchronizing the copy");
      }
    }
    return dst;
  }
  Tensor src = ContiguousOnDevice(t);
  auto storage = std::make_shared<Storage>(static_cast<int64_t>(bytes), Device::cpu(),
                                           /*pinned=*/non_blocking);
  Tensor dst = MakeTensor(storage, t.shape(), ir::ContiguousStrides(t.shape()), 0, t.dtype());
  if (bytes > 0) {
    Check(b.Copy(dst.data_ptr(), src.data_ptr(), bytes, CopyKind::kDeviceToHost, stream),
          absl::StrCat("copy of ", bytes, " bytes from ", t.device().str()));
    if (non_blocking) RecordPinnedUse(storage->data(), stream);
  }
  return dst;
}

const char* CopyKernelSource() { return kFixedKernels; }

}  // namespace stepjit::runtime::cuda
