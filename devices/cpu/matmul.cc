// Eager CPU matmul: maps strided (batched) operands, and an absorbed bias and
// activation, onto one GEMM library call.
#include "devices/cpu/gemm.h"
#include "devices/cpu/kernels.h"
#include "devices/matmul_plan.h"
#include "ir/infer.h"
#include "ir/status.h"
#include "runtime/thread_pool.h"

namespace stepjit::runtime::cpu {

using ir::AttrKey;
using ir::OpId;

namespace {

void MatmulKernel(const KernelArgs& k) {
  MatmulPlan plan = PlanMatmul(k, &CopyInto);
  if (plan.empty) return;
  if (plan.outer == 1) {
    ThrowIfError(Gemm(plan.Call(0)));
    return;
  }
  // Attention's per-batch products are small: the calls split across the
  // threads, each GEMM on its caller's thread (the library does not fan
  // out inside a parallel region), not every call split across the threads.
  ParallelFor(plan.outer, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) ThrowIfError(Gemm(plan.Call(i)));
  });
}

}  // namespace

void RegisterMatmulKernels(KernelTable& table) {
  table[static_cast<int>(OpId::kMatmul)] = &MatmulKernel;
}

}  // namespace stepjit::runtime::cpu
