// The CUDA C spelling of stepjit's dtypes: register and memory types, loads,
// stores and conversions with the eager kernels' rounding, and the helper
// functions generated kernels call.
#ifndef STEPJIT_CODEGEN_CUDA_CUDA_C_H_
#define STEPJIT_CODEGEN_CUDA_CUDA_C_H_

#include <cstdint>
#include <string>

#include "ir/dtype.h"

namespace stepjit::codegen::cuda {

// The type a value computes in: float (also for f16/bf16), double or bool.
const char* RegType(ir::DType t);
// The type of one element in memory: float, double, __half, __nv_bfloat16,
// or unsigned char for bool.
const char* MemType(ir::DType t);

// `e` (a float) rounded to the precision of `t`, as storing and reloading an
// eager tensor of that dtype rounds it; unchanged for other dtypes.
std::string Round(const std::string& e, ir::DType t);
// `e` converted as the eager Convert<To>(From) converts; halves travel as
// float.
std::string Convert(const std::string& e, ir::DType from, ir::DType to);
// A 0-d constant of dtype `t`, rounded as the eager `full` rounds it.
std::string Constant(double v, ir::DType t);
// `ptr[index]` as a register value, and the statement storing `v` there.
std::string Load(ir::DType t, const std::string& ptr, const std::string& index);
std::string Store(ir::DType t, const std::string& ptr, const std::string& index,
                  const std::string& v);

// Helper code a region's kernels need ahead of them; regions emitted into one
// translation unit share one copy (see CombineSources).
enum Helpers : uint32_t {
  kHelperF16 = 1u << 0,     // cuda_fp16.h and sj_round_f16
  kHelperBF16 = 1u << 1,    // cuda_bf16.h and sj_round_bf16
  kHelperReduce = 1u << 2,  // sj_amax and the warp/block reductions
  kHelperVector = 1u << 3,  // sj_vec, N elements loaded and stored as one
  // sj_amax and the warp and block all-reductions whose result every thread
  // gets, bit for bit the same (row plans: every thread computes the row
  // values).
  kHelperRowReduce = 1u << 4,
  // sj_dims_t, a shape-generic region's run-time sizes (32 long longs).
  kHelperDims = 1u << 5,
};
std::string Preamble(uint32_t helpers);
// The helpers values of dtype `t` need (kHelperF16 / kHelperBF16, or none).
uint32_t DTypeHelpers(ir::DType t);

}  // namespace stepjit::codegen::cuda

#endif  // STEPJIT_CODEGEN_CUDA_CUDA_C_H_
