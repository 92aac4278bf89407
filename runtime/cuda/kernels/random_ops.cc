// Philox4x32-10 draws on the device: rand, randn and dropout.
#include "runtime/cuda/kernels/random_ops.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/status.h"
#include "runtime/cuda/kernels/kernel_helpers.h"
#include "runtime/cuda/ops.h"

namespace stepjit::runtime::cuda {
namespace {

using ir::AttrKey;
using ir::DType;
using ir::OpId;

// The constants and rounds of runtime/generator.cc's Philox, word by word.
constexpr char kRandomKernelBody[] = R"(
__device__ __forceinline__ unsigned sj_philox_word(unsigned long long seed,
                                                   unsigned long long index) {
  const unsigned long long counter = index / 4;
  unsigned c0 = (unsigned)counter, c1 = (unsigned)(counter >> 32), c2 = 0, c3 = 0;
  unsigned k0 = (unsigned)seed, k1 = (unsigned)(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const unsigned long long p0 = 0xD2511F53ull * c0;
    const unsigned long long p1 = 0xCD9E8D57ull * c2;
    const unsigned n0 = (unsigned)(p1 >> 32) ^ c1 ^ k0;
    const unsigned n1 = (unsigned)p1;
    const unsigned n2 = (unsigned)(p0 >> 32) ^ c3 ^ k1;
    const unsigned n3 = (unsigned)p0;
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  const unsigned w = (unsigned)(index % 4);
  return w == 0 ? c0 : w == 1 ? c1 : w == 2 ? c2 : c3;
}
__device__ __forceinline__ float sj_uniform(unsigned bits) {
  return (float)(bits >> 8) * (1.0f / 16777216.0f);
}
// rand in f16/bf16 draws only the bits the type holds, as the CPU does (a
// 24-bit uniform rounded to nearest could become 1.0).
__device__ __forceinline__ float sj_uniform_f16(unsigned bits) {
  return (float)(bits >> 21) * (1.0f / 2048.0f);
}
__device__ __forceinline__ float sj_uniform_bf16(unsigned bits) {
  return (float)(bits >> 24) * (1.0f / 256.0f);
}
// Seed and offset come from the arguments, or from two values in device
// memory when `philox` is set (a CUDA graph's draws, refreshed per replay).
#define SJ_PHILOX_PARAMS                                                       \
  const unsigned long long *philox, unsigned long long seed_arg,              \
      unsigned long long offset_arg
#define SJ_PHILOX_READ                                                         \
  const unsigned long long seed = philox ? philox[0] : seed_arg;              \
  const unsigned long long offset = philox ? philox[1] : offset_arg
#define SJ_LOOP(i, n) SJ_GRID_LOOP(i, n)
#define SJ_RANDOM_KERNELS(S, T, ACC, UNIFORM)                                  \
  extern "C" __global__ void sj_rand_##S(T* out, long long n,                  \
                                         SJ_PHILOX_PARAMS) {                   \
    SJ_PHILOX_READ;                                                            \
    SJ_LOOP(i, n) sj_put(&out[i], (ACC)UNIFORM(sj_philox_word(seed, offset + i))); \
  }                                                                            \
  extern "C" __global__ void sj_randn_##S(T* out, long long n,                 \
                                          SJ_PHILOX_PARAMS) {                  \
    SJ_PHILOX_READ;                                                            \
    SJ_LOOP(i, n) {                                                            \
      const double u1 = 1.0 - (double)sj_uniform(sj_philox_word(seed, offset + 2 * i)); \
      const double u2 = (double)sj_uniform(sj_philox_word(seed, offset + 2 * i + 1));   \
      sj_put(&out[i], (ACC)(sqrt(-2.0 * log(u1)) * cos(2.0 * 3.141592653589793 * u2))); \
    }                                                                          \
  }                                                                            \
  extern "C" __global__ void sj_dropout_##S(const T* x, T* out, long long n,   \
                                            SJ_PHILOX_PARAMS, double p,        \
                                            double scale) {                    \
    SJ_PHILOX_READ;                                                            \
    SJ_LOOP(i, n) {                                                            \
      const bool keep = sj_uniform(sj_philox_word(seed, offset + i)) >= p;      \
      sj_put(&out[i], keep ? sj_ld(x[i]) * (ACC)scale : (ACC)0);               \
    }                                                                          \
  }
SJ_RANDOM_KERNELS(f32, float, float, sj_uniform)
SJ_RANDOM_KERNELS(f64, double, double, sj_uniform)
SJ_RANDOM_KERNELS(f16, __half, float, sj_uniform_f16)
SJ_RANDOM_KERNELS(bf16, __nv_bfloat16, float, sj_uniform_bf16)
// Two words, the second under a second key, make 64 random bits.
extern "C" __global__ void sj_randint_i64(long long* out, long long n, SJ_PHILOX_PARAMS,
                                          long long low, unsigned long long range) {
  SJ_PHILOX_READ;
  SJ_LOOP(i, n) {
    const unsigned long long word =
        ((unsigned long long)sj_philox_word(seed, offset + i) << 32) |
        sj_philox_word(seed ^ 0x9E3779B97F4A7C15ull, offset + i);
    out[i] = low + (long long)(word % range);
  }
}
)";

const FixedModule& Module() {
  static const FixedModule* m = new FixedModule(FloatKernelModule(
      "sj_random", kRandomKernelBody, {"rand", "randn", "dropout"}, {"sj_randint_i64"}));
  return *m;
}

void Launch(Backend& b, const std::string& kernel, int64_t threads, void** args) {
  LaunchFixed(b, Module(), kernel, threads, args);
}

thread_local const uint64_t* t_philox_slot = nullptr;

}  // namespace

PhiloxSlotGuard::PhiloxSlotGuard(const uint64_t* device_slot) : previous_(t_philox_slot) {
  t_philox_slot = device_slot;
}
PhiloxSlotGuard::~PhiloxSlotGuard() { t_philox_slot = previous_; }

bool RunsOnDeviceAsRandom(ir::OpId op, DType out) {
  if (op == OpId::kRandint) return out == DType::kI64;
  return (op == OpId::kRand || op == OpId::kRandn || op == OpId::kDropout) &&
         ir::IsFloating(out);
}

const char* RandomKernelSource() { return Module().source.c_str(); }

namespace {

bool RunRandomOp(Backend& b, const KernelArgs& k) {
  const DType t = k.out.dtype();
  if (k.op == OpId::kRandint && t == DType::kI64) {
    long long n = k.out.numel();
    if (n == 0) return true;
    unsigned long long seed = static_cast<uint64_t>(k.attrs.GetInt(AttrKey::kSeed));
    unsigned long long offset = static_cast<uint64_t>(k.attrs.GetInt(AttrKey::kOffset));
    long long low = k.attrs.GetInt(AttrKey::kLow);
    unsigned long long range = static_cast<uint64_t>(k.attrs.GetInt(AttrKey::kHigh) - low);
    void* out = k.out.data_ptr();
    const void* slot = t_philox_slot;
    void* args[] = {&out, &n, &slot, &seed, &offset, &low, &range};
    Launch(b, "sj_randint_i64", n, args);
    return true;
  }
  if (!ir::IsFloating(t)) return false;
  if (k.op != OpId::kRand && k.op != OpId::kRandn && k.op != OpId::kDropout) return false;
  if (k.op == OpId::kDropout && k.inputs[0].dtype() != t) return false;
  long long n = k.out.numel();
  if (n == 0) return true;
  unsigned long long seed = static_cast<uint64_t>(k.attrs.GetInt(AttrKey::kSeed));
  unsigned long long offset = static_cast<uint64_t>(k.attrs.GetInt(AttrKey::kOffset));
  void* out = k.out.data_ptr();
  const void* slot = t_philox_slot;
  Tensor x;
  const void* xp = nullptr;
  double p = 0, scale = 1;
  std::vector<void*> args;
  if (k.op == OpId::kDropout) {
    x = ContiguousOnDevice(k.inputs[0]);
    xp = x.data_ptr();
    p = k.attrs.GetDouble(AttrKey::kP);
    scale = 1.0 / (1.0 - p);
    args = {&xp, &out, &n, &slot, &seed, &offset, &p, &scale};
  } else {
    args = {&out, &n, &slot, &seed, &offset};
  }
  const std::string name = absl::StrCat("sj_", ir::OpName(k.op), "_", ir::DTypeName(t));
  Launch(b, name, n, args.data());
  return true;
}

}  // namespace

void AddRandomPaths(DevicePaths& paths) {
  for (OpId op : {OpId::kRand, OpId::kRandn, OpId::kRandint, OpId::kDropout})
    paths[static_cast<int>(op)] = &RunRandomOp;
}

}  // namespace stepjit::runtime::cuda
