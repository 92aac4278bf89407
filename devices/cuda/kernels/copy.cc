// Layout copies and fills of CUDA tensors (one kernel per element size, any
// strides and broadcasts), and copies between the host and the device.
#include "devices/cuda/kernels/copy.h"

#include <algorithm>
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

constexpr int kMaxRank = CopyLayout::kMaxRank;

// Layout copies and fills for any element size: element i of the
// destination's shape sits at offset sum q_d * stride_d, q its digits over
// the (coalesced) sizes, found once for both layouts. The *32 kernels do
// that index arithmetic in 32 bits (a 64-bit division is a long
// instruction sequence on a GPU), for launches whose elements and offsets
// all fit (CopyIndexBits).
constexpr char kFixedKernels[] = R"(struct SjLayout {
  long long size[8];
  long long stride[8];
  int rank;
};
template <typename I>
__device__ __forceinline__ void sj_offsets(const SjLayout& a, const SjLayout* b,
                                           I i, I& oa, I& ob) {
  oa = 0;
  ob = 0;
  for (int d = a.rank - 1; d >= 0; --d) {
    const I s = (I)a.size[d];
    const I q = i % s;
    i /= s;
    oa += q * (I)a.stride[d];
    if (b) ob += q * (I)b->stride[d];
  }
}
#define SJ_COPY_FILL_AS(N, T, SUFFIX, I)                                      \
  extern "C" __global__ void sj_copy##SUFFIX##_##N(                           \
      const T* src, SjLayout ls, T* dst, SjLayout ld, long long n) {          \
    const I m = (I)n;                                                         \
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < m;               \
         i += (I)gridDim.x * blockDim.x) {                                    \
      I od, os;                                                               \
      sj_offsets<I>(ld, &ls, i, od, os);                                      \
      dst[od] = src[os];                                                      \
    }                                                                         \
  }                                                                           \
  extern "C" __global__ void sj_fill##SUFFIX##_##N(T* dst, SjLayout ld, T v, \
                                                   long long n) {             \
    const I m = (I)n;                                                         \
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < m;               \
         i += (I)gridDim.x * blockDim.x) {                                    \
      I od, unused;                                                           \
      sj_offsets<I>(ld, (const SjLayout*)0, i, od, unused);                   \
      dst[od] = v;                                                            \
    }                                                                         \
  }
#define SJ_COPY_FILL(N, T)                  \
  SJ_COPY_FILL_AS(N, T, , long long)        \
  SJ_COPY_FILL_AS(N, T, 32, unsigned int)
SJ_COPY_FILL(1, unsigned char)
SJ_COPY_FILL(2, unsigned short)
SJ_COPY_FILL(4, unsigned int)
SJ_COPY_FILL(8, unsigned long long)
)";

void Check(const absl::Status& s, absl::string_view what) {
  SJ_REQUIRE(s.ok(), what, ": ", s.message());
}

const FixedModule& CopyModule() {
  static const FixedModule* m = [] {
    auto* module = new FixedModule{
        .name = "sj_fixed", .source = kFixedKernels, .kernels = {}};
    for (const char* kind : {"copy", "fill", "copy32", "fill32"}) {
      for (int n : {1, 2, 4, 8})
        module->kernels.push_back(absl::StrCat("sj_", kind, "_", n));
    }
    return module;
  }();
  return *m;
}

// `t`'s layout over `shape` (broadcast dims get stride 0).
CopyLayout LayoutOf(const Tensor& t, ShapeRef shape) {
  SJ_REQUIRE(static_cast<int>(shape.size()) <= kMaxRank, "CUDA copy of a ",
             shape.size(), "-d tensor: at most ", kMaxRank, " dims are supported");
  CopyLayout l{};
  l.rank = static_cast<int>(shape.size());
  Shape strides = cpu::BroadcastByteStrides(t, shape);
  for (int d = 0; d < l.rank; ++d) {
    l.size[d] = shape[d];
    l.stride[d] = strides[d] / t.element_size();
  }
  return l;
}

// The copy or fill kernel (`kind`) for `bytes`-byte elements, its 32-bit
// variant where CopyIndexBits allows.
std::string KernelFor(const char* kind, int64_t bytes, int64_t n,
                      absl::Span<const CopyLayout* const> layouts) {
  return absl::StrCat("sj_", kind, CopyIndexBits(n, layouts) == 32 ? "32" : "",
                      "_", bytes);
}

}  // namespace

// Merges neighbouring dims that are one run of elements in every layout
// (and drops dims of size 1), so that fewer digits are divided out per
// element: a permuted copy keeps its permuted dims, a contiguous stretch
// becomes one dim.
void CoalesceCopyLayouts(absl::Span<CopyLayout* const> layouts) {
  CopyLayout& first = *layouts[0];
  int out = 0;
  for (int d = 0; d < first.rank; ++d) {
    if (first.size[d] == 1 && first.rank > 1) continue;
    bool merge = out > 0;
    for (const CopyLayout* l : layouts)
      merge = merge && l->stride[out - 1] == l->stride[d] * l->size[d];
    for (CopyLayout* l : layouts) {
      if (merge) {
        l->size[out - 1] *= l->size[d];
        l->stride[out - 1] = l->stride[d];
      } else {
        l->size[out] = l->size[d];
        l->stride[out] = l->stride[d];
      }
    }
    if (!merge) ++out;
  }
  for (CopyLayout* l : layouts) l->rank = std::max(out, 1);
  if (out == 0) {
    for (CopyLayout* l : layouts) l->size[0] = 1, l->stride[0] = 0;
  }
}

int CopyIndexBits(int64_t n, absl::Span<const CopyLayout* const> layouts) {
  constexpr int64_t kLimit = int64_t{1} << 31;
  if (n >= kLimit) return 64;
  for (const CopyLayout* l : layouts) {
    int64_t reach = 0;  // the largest offset
    for (int d = 0; d < l->rank; ++d) {
      if (l->stride[d] < 0) return 64;
      reach += (l->size[d] - 1) * l->stride[d];
      if (reach >= kLimit) return 64;
    }
  }
  return 32;
}

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
  CopyLayout ls = LayoutOf(src, dst.shape()), ld = LayoutOf(dst, dst.shape());
  CoalesceCopyLayouts({&ld, &ls});
  long long count = n;
  void* args[] = {&sp, &ls, &dp, &ld, &count};
  LaunchFixed(b, CopyModule(),
              KernelFor("copy", dst.element_size(), n, {&ls, &ld}), n, args);
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
  CopyLayout ld = LayoutOf(dst, dst.shape());
  CoalesceCopyLayouts({&ld});
  long long count = n;
  void* args[] = {&dp, &ld, &bits, &count};
  LaunchFixed(b, CopyModule(), KernelFor("fill", dst.element_size(), n, {&ld}),
              n, args);
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
