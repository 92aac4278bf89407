// Runs code specialized for a GEMM-epilogue activation: the ops the table
// marks kGemmActivation (ir/ops.def), each with its own scalar definition
// (ir/scalar_def.h). The GEMM libraries of both devices apply an activation
// through this, so marking an op in the table is all it takes.
#ifndef STEPJIT_IR_GEMM_ACTIVATION_H_
#define STEPJIT_IR_GEMM_ACTIVATION_H_

#include "ir/op.h"

namespace stepjit::ir {

// Calls `f.template operator()<op>()` when `op` is marked kGemmActivation
// and returns true; false (nothing called) otherwise. `f` is a generic
// lambda: [&]<ir::OpId op>() { ... ScalarDef<op>::Apply(m, x) ... }.
template <typename F>
bool VisitGemmActivation(OpId op, F&& f) {
  switch (op) {
#define OP(e, text, lo, hi, kind, amp, flags)       \
  case OpId::k##e:                                  \
    if constexpr (((flags)&kGemmActivation) != 0) { \
      f.template operator()<OpId::k##e>();          \
      return true;                                  \
    } else {                                        \
      return false;                                 \
    }
#include "ir/ops.def"
  }
  return false;
}

}  // namespace stepjit::ir

#endif  // STEPJIT_IR_GEMM_ACTIVATION_H_
