// Philox4x32-10 draws on the device: rand, randn, randint, dropout and
// multinomial.
#include "devices/cuda/kernels/random_ops.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "devices/cuda/kernels/kernel_helpers.h"
#include "devices/cuda/ops.h"
#include "ir/status.h"

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
// multinomial, as devices/cpu/sampling.h draws: a row is drawn from when
// its weights are finite and >= 0 with enough positive ones; the key of a
// category is its arrival time -log(U) / w in an exponential race.
template <typename T>
__device__ bool sj_multinomial_row_ok(const T* p, long long n, long long samples,
                                      int replacement) {
  long long positive = 0;
  for (long long i = 0; i < n; ++i) {
    const double v = (double)sj_ld(p[i]);
    if (!(v >= 0) || v - v != 0) return false;
    positive += v > 0;
  }
  return positive > 0 && (replacement || positive >= samples);
}
__device__ __forceinline__ double sj_multinomial_key(double w, unsigned bits) {
  if (!(w > 0)) return __longlong_as_double(0x7ff0000000000000LL);
  return -log(1.0 - (double)sj_uniform(bits)) / w;
}
// Seed and offset come from the arguments, or, when `philox` is set (the
// graph's random state operand, in device memory: a compiled step's run binds
// it, and a captured CUDA graph reads it from its static input), the seed
// from it and the offset shifted by it.
#define SJ_PHILOX_PARAMS                                                       \
  const unsigned long long *philox, unsigned long long seed_arg,              \
      unsigned long long offset_arg
#define SJ_PHILOX_READ                                                         \
  const unsigned long long seed = philox ? philox[0] : seed_arg;              \
  const unsigned long long offset = philox ? offset_arg + philox[1] : offset_arg
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
  }                                                                            \
  extern "C" __global__ void sj_multinomial_##S(                               \
      const T* w, long long* out, long long rows, long long n,                 \
      long long samples, int replacement, SJ_PHILOX_PARAMS) {                  \
    SJ_PHILOX_READ;                                                            \
    SJ_LOOP(r, rows) {                                                         \
      const T* p = w + r * n;                                                  \
      long long* o = out + r * samples;                                        \
      if (!sj_multinomial_row_ok(p, n, samples, replacement)) {                \
        for (long long s = 0; s < samples; ++s) o[s] = -1;                     \
        continue;                                                              \
      }                                                                        \
      if (replacement) {                                                       \
        double total = 0;                                                      \
        for (long long i = 0; i < n; ++i) total += (double)sj_ld(p[i]);        \
        for (long long s = 0; s < samples; ++s) {                              \
          const double u = (double)sj_uniform(                                 \
              sj_philox_word(seed, offset + r * samples + s)) * total;         \
          double c = 0;                                                        \
          long long at = n - 1;                                                \
          for (long long i = 0; i < n; ++i) {                                  \
            c += (double)sj_ld(p[i]);                                          \
            if (c > u) { at = i; break; }                                      \
          }                                                                    \
          o[s] = at;                                                           \
        }                                                                      \
      } else {                                                                 \
        double pk = 0;                                                         \
        long long pi = -1;                                                     \
        for (long long s = 0; s < samples; ++s) {                              \
          double bk = 0;                                                       \
          long long bi = -1;                                                   \
          for (long long i = 0; i < n; ++i) {                                  \
            const double key = sj_multinomial_key(                             \
                (double)sj_ld(p[i]), sj_philox_word(seed, offset + r * n + i));\
            if (pi >= 0 && !(key > pk || (key == pk && i > pi))) continue;     \
            if (bi < 0 || key < bk) bk = key, bi = i;                          \
          }                                                                    \
          o[s] = bi;                                                           \
          pk = bk;                                                             \
          pi = bi;                                                             \
        }                                                                      \
      }                                                                        \
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
      "sj_random", kRandomKernelBody,
      {"rand", "randn", "dropout", "multinomial"}, {"sj_randint_i64"}));
  return *m;
}

void Launch(Backend& b, const std::string& kernel, int64_t threads, void** args) {
  LaunchFixed(b, Module(), kernel, threads, args);
}

// The graph's random state operand (ops.def), in device memory, or null.
const void* RandomState(const KernelArgs& k) {
  if (!ir::TakesRandomState(k.op, k.inputs.size())) return nullptr;
  const Tensor& state = k.inputs.back();
  SJ_CHECK(state.dtype() == DType::kI64 && state.numel() == 2 &&
               !state.device().is_cpu(),
           "a CUDA random op's state operand must be a device i64[2]");
  return state.data_ptr();
}

}  // namespace

bool RunsOnDeviceAsRandom(ir::OpId op, DType out) {
  if (op == OpId::kRandint || op == OpId::kMultinomial)
    return out == DType::kI64;
  return (op == OpId::kRand || op == OpId::kRandn || op == OpId::kDropout) &&
         ir::IsFloating(out);
}

const char* RandomKernelSource() { return Module().source.c_str(); }

namespace {

// multinomial on rows of the last dim (the weights in any float dtype); a
// row the CPU would refuse gets -1 in every sample.
bool Multinomial(Backend& b, const KernelArgs& k) {
  const Tensor w = ContiguousOnDevice(k.inputs[0]);
  if (!ir::IsFloating(w.dtype())) return false;
  long long n = w.shape().back(), rows = w.numel() / n;
  long long samples = k.attrs.GetInt(AttrKey::kNumSamples);
  int replacement = k.attrs.GetBool(AttrKey::kReplacement) ? 1 : 0;
  if (rows == 0) return true;
  unsigned long long seed =
      static_cast<uint64_t>(k.attrs.GetInt(AttrKey::kSeed));
  unsigned long long offset =
      static_cast<uint64_t>(k.attrs.GetInt(AttrKey::kOffset));
  const void* wp = w.data_ptr();
  void* out = k.out.data_ptr();
  const void* slot = RandomState(k);
  void* args[] = {&wp,          &out,  &rows, &n,     &samples,
                  &replacement, &slot, &seed, &offset};
  Launch(b, absl::StrCat("sj_multinomial_", ir::DTypeName(w.dtype())), rows,
         args);
  return true;
}

bool RunRandomOp(Backend& b, const KernelArgs& k) {
  const DType t = k.out.dtype();
  if (k.op == OpId::kMultinomial) return Multinomial(b, k);
  if (k.op == OpId::kRandint && t == DType::kI64) {
    long long n = k.out.numel();
    if (n == 0) return true;
    unsigned long long seed = static_cast<uint64_t>(k.attrs.GetInt(AttrKey::kSeed));
    unsigned long long offset = static_cast<uint64_t>(k.attrs.GetInt(AttrKey::kOffset));
    long long low = k.attrs.GetInt(AttrKey::kLow);
    unsigned long long range = static_cast<uint64_t>(k.attrs.GetInt(AttrKey::kHigh) - low);
    void* out = k.out.data_ptr();
    const void* slot = RandomState(k);
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
  const void* slot = RandomState(k);
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
  for (OpId op : {OpId::kRand, OpId::kRandn, OpId::kRandint, OpId::kDropout,
                  OpId::kMultinomial})
    paths[static_cast<int>(op)] = &RunRandomOp;
}

}  // namespace stepjit::runtime::cuda
