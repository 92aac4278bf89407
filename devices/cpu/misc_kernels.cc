// Eager CPU kernels for factories, random numbers and copies, plus kernel-internal helpers.
#include <cmath>
#include <numbers>
#include <type_traits>

#include "devices/cpu/kernels.h"
#include "devices/cpu/loops.h"
#include "ir/host_math.h"
#include "ir/op_attrs.h"
#include "runtime/generator.h"

namespace stepjit::runtime::cpu {

using ir::AttrKey;
using ir::OpId;

Tensor PermutedView(const Tensor& x, absl::Span<const int64_t> perm) {
  Shape shape, strides;
  for (int64_t d : perm) {
    shape.push_back(x.shape()[d]);
    strides.push_back(x.strides()[d]);
  }
  return MakeTensor(x.storage(), shape, strides, x.offset(), x.dtype());
}

std::vector<int64_t> DimLastPermutation(int64_t rank, int64_t d) {
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < rank; ++i) {
    if (i != d) perm.push_back(i);
  }
  perm.push_back(d);
  return perm;
}

Tensor ContiguousCopyIfNeeded(const Tensor& x) {
  if (x.is_contiguous()) return x;
  Tensor c = empty(x.shape(), {.dtype = x.dtype()});
  CopyInto(c, x);
  return c;
}

void FillWith(const Tensor& dst, double value) {
  SJ_DISPATCH_ALL(dst.dtype(), "fill", {
    const T v = Convert<T>(value);
    std::array<Shape, 1> st = {BroadcastByteStrides(dst, dst.shape())};
    ForEach<1>(dst.shape(), st, {static_cast<char*>(dst.data_ptr())},
               [&](std::array<char*, 1> p, std::array<int64_t, 1> s, int64_t n) {
                 if (s[0] == sizeof(T)) {
                   T* o = reinterpret_cast<T*>(p[0]);
                   for (int64_t i = 0; i < n; ++i) o[i] = v;
                 } else {
                   for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p[0] + i * s[0]) = v;
                 }
               });
  });
}

namespace {

void FullKernel(const KernelArgs& k) { FillWith(k.out, k.attrs.GetDouble(AttrKey::kValue)); }

void FillInplaceKernel(const KernelArgs& k) {
  FillWith(k.out, k.attrs.GetDouble(AttrKey::kValue));
}

void ArangeKernel(const KernelArgs& k) {
  const double start = k.attrs.GetDouble(AttrKey::kStart);
  const double step = ir::AttrFloat(k.op, k.attrs, ir::AttrKey::kStep);
  SJ_DISPATCH_ALL(k.out.dtype(), "arange", {
    T* o = k.out.data<T>();
    for (int64_t i = 0; i < k.out.numel(); ++i) o[i] = Convert<T>(start + i * step);
  });
}

// A uniform [0, 1) value that T holds exactly: f16 and bf16 draw only as many
// bits as they have significand (as PyTorch does), because rounding a 24-bit
// uniform to nearest would turn values just below 1 into 1.0.
template <typename T>
float UniformFor(uint32_t bits) {
  if constexpr (std::is_same_v<T, ir::Half>) {
    return static_cast<float>(bits >> 21) * (1.0f / 2048.0f);
  } else if constexpr (std::is_same_v<T, ir::BFloat16>) {
    return static_cast<float>(bits >> 24) * (1.0f / 256.0f);
  } else {
    return UniformFromBits(bits);
  }
}

// Element i of a draw uses Philox word (offset + i): threads need no coordination.
template <OpId op>
void RandomKernel(const KernelArgs& k) {
  const auto [seed, offset] = RandomStart(k);
  const int64_t low = k.attrs.GetInt(AttrKey::kLow), high = k.attrs.GetInt(AttrKey::kHigh);
  SJ_DISPATCH_ALL(k.out.dtype(), ir::OpName(op), {
    T* o = k.out.data<T>();
    ParallelFor(k.out.numel(), kParallelGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        if constexpr (op == OpId::kRand) {
          o[i] = Convert<T>(UniformFor<T>(PhiloxWord(seed, offset + i)));
        } else if constexpr (op == OpId::kRandn) {
          // Box-Muller on the pair of words (2i, 2i+1); u1 in (0, 1]. The
          // log is HostMath's, as every CPU kernel's (and the CUDA host
          // emulator's) is.
          const double u1 = 1.0 - UniformFromBits(PhiloxWord(seed, offset + 2 * i));
          const double u2 = UniformFromBits(PhiloxWord(seed, offset + 2 * i + 1));
          o[i] = Convert<T>(std::sqrt(-2.0 * ir::HostMath<double>::Log(u1)) *
                            std::cos(2.0 * std::numbers::pi * u2));
        } else {
          const uint64_t range = static_cast<uint64_t>(high - low);
          const uint64_t word = (static_cast<uint64_t>(PhiloxWord(seed, offset + i)) << 32) |
                                PhiloxWord(seed ^ 0x9E3779B97F4A7C15ull, offset + i);
          o[i] = Convert<T>(low + static_cast<int64_t>(word % range));
        }
      }
    });
  });
}

void ContiguousKernel(const KernelArgs& k) { CopyInto(k.out, k.inputs[0]); }

}  // namespace

void RegisterMiscKernels(KernelTable& table) {
  table[static_cast<int>(OpId::kFull)] = &FullKernel;
  table[static_cast<int>(OpId::kFillInplace)] = &FillInplaceKernel;
  table[static_cast<int>(OpId::kArange)] = &ArangeKernel;
  table[static_cast<int>(OpId::kRand)] = &RandomKernel<OpId::kRand>;
  table[static_cast<int>(OpId::kRandn)] = &RandomKernel<OpId::kRandn>;
  table[static_cast<int>(OpId::kRandint)] = &RandomKernel<OpId::kRandint>;
  table[static_cast<int>(OpId::kContiguous)] = &ContiguousKernel;
}

}  // namespace stepjit::runtime::cpu
