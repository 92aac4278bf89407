// Autocast state (thread-local) and the per-input cast policy.
#include "runtime/amp/autocast.h"

#include "absl/strings/str_cat.h"
#include "ir/status.h"

namespace stepjit::amp {
namespace {
thread_local bool t_enabled = false;
thread_local ir::DType t_dtype = ir::DType::kBF16;
}  // namespace

Autocast::Autocast(ir::DType dtype, bool enabled) : prev_enabled_(t_enabled), prev_dtype_(t_dtype) {
  SJ_REQUIRE(dtype == ir::DType::kF16 || dtype == ir::DType::kBF16,
             "amp::Autocast: the low-precision dtype must be f16 or bf16, got ",
             ir::DTypeName(dtype));
  t_enabled = enabled;
  if (enabled) t_dtype = dtype;
}

Autocast::~Autocast() {
  t_enabled = prev_enabled_;
  t_dtype = prev_dtype_;
}

bool IsAutocastEnabled() { return t_enabled; }
ir::DType AutocastDType() { return t_dtype; }

ir::DType AutocastInputDType(ir::OpId op, ir::DType t) {
  if (!t_enabled || !ir::IsFloating(t) || t == ir::DType::kF64) return t;
  switch (ir::GetOpInfo(op).amp) {
    case ir::AmpPolicy::kLower: return t_dtype;
    case ir::AmpPolicy::kFp32: return ir::DType::kF32;
    default: return t;
  }
}

}  // namespace stepjit::amp
