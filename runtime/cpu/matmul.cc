// Eager CPU matmul: maps strided (batched) operands, and an absorbed bias and
// activation, onto one GEMM library call.
#include "ir/infer.h"
#include "ir/status.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/kernels.h"
#include "runtime/matmul_plan.h"

namespace stepjit::runtime::cpu {

using ir::AttrKey;
using ir::OpId;

namespace {

void MatmulKernel(const KernelArgs& k) {
  MatmulPlan plan = PlanMatmul(k, &CopyInto);
  if (plan.empty) return;
  for (int64_t i = 0; i < plan.outer; ++i) ThrowIfError(Gemm(plan.Call(i)));
}

}  // namespace

void RegisterMatmulKernels(KernelTable& table) {
  table[static_cast<int>(OpId::kMatmul)] = &MatmulKernel;
}

}  // namespace stepjit::runtime::cpu
