// The text of the header host-compiled modules are built against: the CUDA
// built-ins emulated on the host, around the C interface to the scheduler.
#include "testing/cuda_emulator/host_emulation_header.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "testing/cuda_emulator/host_emulation.h"

#define SJ_TEXT(...) #__VA_ARGS__
#define SJ_EXPANDED_TEXT(x) SJ_TEXT(x)

namespace stepjit::codegen::cuda {
namespace {

constexpr char kHeaderStart[] =
    R"(// stepjit host emulation of the CUDA built-ins.
#pragma once
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <new>
#include <tuple>
#include <type_traits>
#include <utility>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __shared__ static  // blocks run one after another
#define __constant__ static
#define SJ_EXPORT extern "C" __attribute__((visibility("default")))
)";

constexpr char kHeaderEnd[] = R"(
struct sj_dim3 { unsigned x, y, z; };
static sj_dim3 threadIdx{0, 0, 0}, blockIdx{0, 0, 0};
static sj_dim3 blockDim{1, 1, 1}, gridDim{1, 1, 1};
static const int warpSize = 32;
static const sj_host_api* sj_api;
// exp, log, tanh and f32 erf are the CPU kernels' (ir/poly_math.h), called
// in the host process, so that emulated results match the CPU's bit for
// bit; the macros at the end route the kernels' calls here. The other math
// functions are the host's libm, as the CPU kernels' are.
static inline float sj_host_exp(float x) { return sj_api->math->expf(x); }
static inline double sj_host_exp(double x) { return sj_api->math->exp(x); }
static inline float sj_host_log(float x) { return sj_api->math->logf(x); }
static inline double sj_host_log(double x) { return sj_api->math->log(x); }
static inline float sj_host_tanh(float x) { return sj_api->math->tanhf(x); }
static inline double sj_host_tanh(double x) { return sj_api->math->tanh(x); }
static inline float sj_host_erff(float x) { return sj_api->math->erff(x); }
// The other threads of the block run while this one waits: restore its index.
static inline void __syncthreads() {
  const unsigned t = threadIdx.x;
  sj_api->sync_block(sj_api->team);
  threadIdx.x = t;
}
static inline unsigned long long sj_exchange(unsigned long long v, int src_lane) {
  const unsigned t = threadIdx.x;
  v = sj_api->exchange(sj_api->team, v, src_lane);
  threadIdx.x = t;
  return v;
}
static inline void __syncwarp(unsigned = 0xffffffffu) { sj_exchange(0, -1); }
static inline unsigned __activemask() { return 0xffffffffu; }
// Lane `src` of this warp's value, or this lane's own for src < 0.
template <class T>
static inline T sj_shfl(T v, int src) {
  static_assert(sizeof(T) <= 8, "shuffles move at most 8 bytes");
  unsigned long long bits = 0;
  memcpy(&bits, &v, sizeof v);
  bits = sj_exchange(bits, src);
  T r;
  memcpy(&r, &bits, sizeof r);
  return r;
}
static inline int sj_lane() { return (int)(threadIdx.x & 31u); }
template <class T>
static inline T __shfl_sync(unsigned, T v, int src, int width = 32) {
  return sj_shfl(v, (sj_lane() & ~(width - 1)) + (src & (width - 1)));
}
template <class T>
static inline T __shfl_down_sync(unsigned, T v, unsigned delta, int width = 32) {
  const int lane = sj_lane();
  return sj_shfl(v, (lane & (width - 1)) + (int)delta < width ? lane + (int)delta : -1);
}
template <class T>
static inline T __shfl_up_sync(unsigned, T v, unsigned delta, int width = 32) {
  const int lane = sj_lane();
  return sj_shfl(v, (lane & (width - 1)) >= (int)delta ? lane - (int)delta : -1);
}
template <class T>
static inline T __shfl_xor_sync(unsigned, T v, int mask, int width = 32) {
  const int lane = sj_lane(), src = lane ^ mask;
  return sj_shfl(v, (src & ~(width - 1)) == (lane & ~(width - 1)) ? src : -1);
}
// Threads of a block never run at the same time: plain updates are atomic.
template <class T>
static inline T atomicAdd(T* p, std::type_identity_t<T> v) { T old = *p; *p = old + v; return old; }
template <class T>
static inline T atomicSub(T* p, std::type_identity_t<T> v) { T old = *p; *p = old - v; return old; }
template <class T>
static inline T atomicExch(T* p, std::type_identity_t<T> v) { T old = *p; *p = v; return old; }
template <class T>
static inline T atomicMax(T* p, std::type_identity_t<T> v) { T old = *p; if (v > old) *p = v; return old; }
template <class T>
static inline T atomicMin(T* p, std::type_identity_t<T> v) { T old = *p; if (v < old) *p = v; return old; }
template <class T>
static inline T atomicCAS(T* p, std::type_identity_t<T> cmp, std::type_identity_t<T> v) {
  T old = *p; if (old == cmp) *p = v; return old;
}
static inline void __threadfence() {}
static inline void __threadfence_block() {}
template <class T>
static inline T __ldg(const T* p) { return *p; }
static inline float sj_fmin(float a, float b) { return fminf(a, b); }
static inline double sj_fmin(double a, double b) { return fmin(a, b); }
static inline float sj_fmax(float a, float b) { return fmaxf(a, b); }
static inline double sj_fmax(double a, double b) { return fmax(a, b); }
template <class A, class B>
static inline std::common_type_t<A, B> min(A a, B b) {
  using R = std::common_type_t<A, B>;
  if constexpr (std::is_floating_point_v<R>) return sj_fmin((R)a, (R)b);
  else return (R)b < (R)a ? (R)b : (R)a;
}
template <class A, class B>
static inline std::common_type_t<A, B> max(A a, B b) {
  using R = std::common_type_t<A, B>;
  if constexpr (std::is_floating_point_v<R>) return sj_fmax((R)a, (R)b);
  else return (R)a < (R)b ? (R)b : (R)a;
}
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
static inline double __longlong_as_double(long long x) { double d; memcpy(&d, &x, 8); return d; }
static inline long long __double_as_longlong(double x) { long long d; memcpy(&d, &x, 8); return d; }
static inline float __int_as_float(int x) { float f; memcpy(&f, &x, 4); return f; }
static inline int __float_as_int(float x) { int f; memcpy(&f, &x, 4); return f; }
static inline float __uint_as_float(unsigned x) { float f; memcpy(&f, &x, 4); return f; }
static inline unsigned __float_as_uint(float x) { unsigned f; memcpy(&f, &x, 4); return f; }
struct __half { _Float16 v; };
static inline float __half2float(__half h) { return (float)h.v; }
static inline __half __float2half_rn(float f) { return __half{(_Float16)f}; }
static inline __half __float2half(float f) { return __float2half_rn(f); }
struct __nv_bfloat16 { uint16_t bits; };
static inline float __bfloat162float(__nv_bfloat16 b) {
  uint32_t u = (uint32_t)b.bits << 16; float f; memcpy(&f, &u, 4); return f;
}
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t u; memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return __nv_bfloat16{(uint16_t)((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return __nv_bfloat16{(uint16_t)(u >> 16)};
}
static inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
// A kernel's launch entry points: its argument values packed into one
// buffer, and one CUDA thread run on the packed values.
template <class F> struct sj_signature;
template <class... A> struct sj_signature<void (*)(A...)> {
  using args = std::tuple<std::decay_t<A>...>;
};
template <auto F> struct sj_kernel {
  using Args = typename sj_signature<decltype(F)>::args;
  template <size_t... I>
  static void pack_each(void* const* a, void* out, std::index_sequence<I...>) {
    ::new (out) Args(*static_cast<const std::tuple_element_t<I, Args>*>(a[I])...);
  }
  static void pack(void* const* a, void* out) {
    pack_each(a, out, std::make_index_sequence<std::tuple_size_v<Args>>());
  }
  static void run(const void* packed, const sj_thread_ctx* t, const sj_host_api* api) {
    sj_api = api;
    threadIdx = {t->thread, 0, 0};
    blockIdx = {t->block, 0, 0};
    blockDim = {t->block_dim, 1, 1};
    gridDim = {t->grid_dim, 1, 1};
    std::apply(F, *static_cast<const Args*>(packed));
  }
  static void describe(sj_kernel_desc* d) {
    d->arg_bytes = sizeof(Args);
    d->arg_align = alignof(Args);
    d->pack = &pack;
    d->run = &run;
  }
};
#define expf sj_host_exp
#define exp sj_host_exp
#define logf sj_host_log
#define log sj_host_log
#define tanhf sj_host_tanh
#define tanh sj_host_tanh
#define erff sj_host_erff
)";

}  // namespace

const std::string& HostEmulationHeader() {
  static const std::string* header = new std::string(absl::StrCat(
      kHeaderStart, SJ_EXPANDED_TEXT(SJ_EMULATION_ABI), "\n", kHeaderEnd));
  return *header;
}

}  // namespace stepjit::codegen::cuda
