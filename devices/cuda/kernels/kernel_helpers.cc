// The helper text the hand-written CUDA modules start with.
#include "devices/cuda/kernels/kernel_helpers.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "codegen/cuda/cuda_c.h"

namespace stepjit::runtime::cuda {

const std::string& KernelHelpers() {
  static const std::string text =
      codegen::cuda::Preamble(codegen::cuda::kHelperF16 |
                              codegen::cuda::kHelperBF16) +
      R"(
__device__ __forceinline__ float sj_exp(float x) { return expf(x); }
__device__ __forceinline__ double sj_exp(double x) { return exp(x); }
__device__ __forceinline__ float sj_ld(float x) { return x; }
__device__ __forceinline__ double sj_ld(double x) { return x; }
__device__ __forceinline__ float sj_ld(__half x) { return __half2float(x); }
__device__ __forceinline__ float sj_ld(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void sj_put(float* p, float v) { *p = v; }
__device__ __forceinline__ void sj_put(double* p, double v) { *p = v; }
__device__ __forceinline__ void sj_put(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void sj_put(__nv_bfloat16* p, float v) {
  *p = __float2bfloat16_rn(v);
}
#define SJ_GRID_LOOP(i, n)                                                    \
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
       i += (long long)gridDim.x * blockDim.x)
/* A grid-stride loop over e < n with (i, j) = (e / dim, e % dim) kept up  */
/* to date by additions: two divisions per thread, not two per element    */
/* (a 64-bit division is a long instruction sequence). dim > 0.           */
#define SJ_GRID_LOOP_ROWS(e, i, j, n, dim)                                    \
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x,        \
                 sj_step = (long long)gridDim.x * blockDim.x,                 \
                 i = e / (dim), j = e - i * (dim), sj_di = sj_step / (dim),   \
                 sj_dj = sj_step - sj_di * (dim);                             \
       e < (n); e += sj_step, i += sj_di, j += sj_dj,                         \
                 i += j >= (dim) ? 1 : 0, j -= j >= (dim) ? (dim) : 0)
)";
  return text;
}

FixedModule FloatKernelModule(std::string name, const char* body,
                              std::initializer_list<const char*> bases,
                              std::initializer_list<const char*> extra) {
  FixedModule m{
      .name = std::move(name), .source = KernelHelpers() + body, .kernels = {}};
  for (const char* base : bases) {
    for (const char* dtype : {"f32", "f64", "f16", "bf16"}) {
      m.kernels.push_back(absl::StrCat("sj_", base, "_", dtype));
    }
  }
  for (const char* k : extra) m.kernels.push_back(k);
  return m;
}

}  // namespace stepjit::runtime::cuda
