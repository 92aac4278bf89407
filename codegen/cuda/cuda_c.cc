// CUDA C spellings of loads, stores, conversions and the helper preamble.
#include "codegen/cuda/cuda_c.h"

#include <cstdint>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "codegen/cuda/cuda_math.h"
#include "codegen/ir_names.h"

namespace stepjit::codegen::cuda {

const char* MemType(DType t) {
  // In DType's order: f32, f64, f16, bf16, i64, i32, bool.
  static constexpr const char* kTypes[] = {
      "float",     "double", "__half",       "__nv_bfloat16",
      "long long", "int",    "unsigned char"};
  static_assert(std::size(kTypes) == ir::kNumDTypes);
  return kTypes[static_cast<int>(t)];
}

const char* RegType(DType t) {
  if (t == DType::kBool) return "bool";
  // Halves compute in float; the others in their own type.
  return t == DType::kF16 || t == DType::kBF16 ? "float" : MemType(t);
}

std::string Round(const std::string& e, DType t) {
  if (t == DType::kF16) return absl::StrCat("sj_round_f16(", e, ")");
  if (t == DType::kBF16) return absl::StrCat("sj_round_bf16(", e, ")");
  return e;
}

std::string Convert(const std::string& e, DType from, DType to) {
  if (from == to) return e;
  if (to == DType::kBool) return absl::StrCat("(", e, " != 0)");
  if (from == DType::kBool) {
    if (ir::IsIntegral(to)) return absl::StrCat("(", RegType(to), ")(", e, " ? 1 : 0)");
    return to == DType::kF64 ? absl::StrCat("(", e, " ? 1.0 : 0.0)")
                             : absl::StrCat("(", e, " ? 1.0f : 0.0f)");
  }
  std::string v = e;
  // Integers convert with C's casts, as the eager Convert does (a float
  // truncates toward zero; NaN and values out of range saturate on a GPU).
  if (ir::IsIntegral(from) || ir::IsIntegral(to) ||
      (from == DType::kF64) != (to == DType::kF64))
    v = absl::StrCat("(", RegType(to), ")", e);
  return Round(v, to);
}

std::string Constant(double v, DType t) {
  if (t == DType::kBool) return v != 0 ? "true" : "false";
  if (t == DType::kI64) {
    const int64_t i = static_cast<int64_t>(v);
    // -2^63 has no literal: 2^63 does not fit the type the minus applies to.
    return i == INT64_MIN ? "(-9223372036854775807LL - 1)" : absl::StrCat(i, "LL");
  }
  if (t == DType::kI32) return absl::StrCat("(int)", static_cast<int32_t>(v));
  return Round(CudaLiteral(v, t == DType::kF64), t);
}

std::string Load(DType t, const std::string& ptr, const std::string& index) {
  const std::string x = absl::StrCat(ptr, "[", index, "]");
  switch (t) {
    case DType::kF16:
      return absl::StrCat("__half2float(", x, ")");
    case DType::kBF16:
      return absl::StrCat("__bfloat162float(", x, ")");
    case DType::kBool:
      return absl::StrCat("(", x, " != 0)");
    default:
      return x;
  }
}

std::string Store(DType t, const std::string& ptr, const std::string& index,
                  const std::string& v) {
  std::string x = v;
  if (t == DType::kF16) x = absl::StrCat("__float2half_rn(", v, ")");
  if (t == DType::kBF16) x = absl::StrCat("__float2bfloat16_rn(", v, ")");
  if (t == DType::kBool) x = absl::StrCat("(unsigned char)", v);
  return absl::StrCat(ptr, "[", index, "] = ", x, ";");
}

uint32_t DTypeHelpers(DType t) {
  return t == DType::kF16 ? kHelperF16 : t == DType::kBF16 ? kHelperBF16 : 0u;
}

std::string Preamble(uint32_t helpers) {
  std::string s;
  if (helpers & kHelperF16) {
    s += "#include <cuda_fp16.h>\n"
         "static __device__ __forceinline__ float sj_round_f16(float x) {\n"
         "  return __half2float(__float2half_rn(x));\n}\n";
  }
  if (helpers & kHelperBF16) {
    s += "#include <cuda_bf16.h>\n"
         "static __device__ __forceinline__ float sj_round_bf16(float x) {\n"
         "  return __bfloat162float(__float2bfloat16_rn(x));\n}\n";
  }
  if (helpers & kHelperDims) s += "struct sj_dims_t { long long d[32]; };\n";
  if (helpers & kHelperVector) {
    s += "template <class T, int N>\n"
         "struct alignas(sizeof(T) * N) sj_vec {\n  T v[N];\n};\n";
  }
  if (helpers & (kHelperReduce | kHelperRowReduce)) {
    s += R"(// NaN-propagating max, as the CPU kernels accumulate amax.
static __device__ __forceinline__ double sj_amax(double acc, double x) {
  return (x != x || x > acc) ? x : acc;
}
)";
  }
  if (helpers & kHelperReduce) {
    s += R"(static __device__ __forceinline__ double sj_warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}
static __device__ __forceinline__ double sj_warp_amax(double v) {
  for (int o = 16; o > 0; o >>= 1) v = sj_amax(v, __shfl_down_sync(0xffffffffu, v, o));
  return v;
}
// Block reductions (blockDim.x a multiple of 32); the result is thread 0's.
// Every thread of the block must call them: they synchronize.
static __device__ __forceinline__ double sj_block_sum(double v) {
  __shared__ double part[32];
  v = sj_warp_sum(v);
  __syncthreads();  // a previous call's reads of part[] are done
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x < 32) v = sj_warp_sum(threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.0);
  return v;
}
static __device__ __forceinline__ double sj_block_amax(double v) {
  __shared__ double part[32];
  v = sj_warp_amax(v);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    const double inf = __longlong_as_double(0x7ff0000000000000LL);
    v = sj_warp_amax(threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : -inf);
  }
  return v;
}
)";
  }
  if (helpers & kHelperRowReduce) {
    s +=
        R"(// All-reductions: every lane (thread) returns the same bits. The xor
// butterfly adds the same two values on both lanes of a pair; amax takes
// lane 0's result, since sj_amax(+0, -0) differs from sj_amax(-0, +0).
static __device__ __forceinline__ double sj_warp_allsum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
static __device__ __forceinline__ double sj_warp_allamax(double v) {
  for (int o = 16; o > 0; o >>= 1) v = sj_amax(v, __shfl_xor_sync(0xffffffffu, v, o));
  return __shfl_sync(0xffffffffu, v, 0);
}
// Every thread of the block must call these (they synchronize); each folds
// the warps' results in warp order.
static __device__ __forceinline__ double sj_block_allsum(double v) {
  __shared__ double part[32];
  v = sj_warp_allsum(v);
  __syncthreads();  // a previous call's reads of part[] are done
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  double t = part[0];
  for (unsigned w = 1; w < (blockDim.x >> 5); ++w) t += part[w];
  return t;
}
static __device__ __forceinline__ double sj_block_allamax(double v) {
  __shared__ double part[32];
  v = sj_warp_allamax(v);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  double t = part[0];
  for (unsigned w = 1; w < (blockDim.x >> 5); ++w) t = sj_amax(t, part[w]);
  return t;
}
)";
  }
  return s;
}

}  // namespace stepjit::codegen::cuda
