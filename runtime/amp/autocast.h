// Autocast: per-thread mixed-precision regions for eager (and traced) steps.
//
//   {
//     amp::Autocast guard(DType::kBF16);
//     Tensor loss = cross_entropy(model(x), y);   // matmuls in bf16, loss in f32
//   }
//   loss.backward();                              // grads reach f32 params as f32
//
// Dispatch consults the op table's AmpPolicy column (PyTorch's autocast
// lists): kLower ops (matmul) cast their f32 inputs to the autocast dtype;
// kFp32 ops (exp, log, pow, softmax, log_softmax, sums/means, norms, losses)
// cast f16/bf16 inputs up to f32; kPromote ops widen to the widest input
// (the normal promotion rules); f64 and integer tensors are never cast. The
// casts are ordinary ops: autograd differentiates through them (so gradients
// of f32 parameters are f32) and the tracer records them.
#ifndef STEPJIT_RUNTIME_AMP_AUTOCAST_H_
#define STEPJIT_RUNTIME_AMP_AUTOCAST_H_

#include "ir/dtype.h"
#include "ir/op.h"

namespace stepjit::amp {

// RAII, nestable: the previous state returns when the guard ends. The low
// dtype must be kF16 or kBF16. `enabled = false` turns autocast off inside.
class Autocast {
 public:
  explicit Autocast(ir::DType dtype, bool enabled = true);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  bool prev_enabled_;
  ir::DType prev_dtype_;
};

// The calling thread's state.
bool IsAutocastEnabled();
ir::DType AutocastDType();

// The dtype autocast wants an input of dtype `t` in for `op`, or `t` itself
// when it leaves the input alone (policy kNone/kPromote, non-float or f64
// inputs, autocast off).
ir::DType AutocastInputDType(ir::OpId op, ir::DType t);

}  // namespace stepjit::amp

#endif  // STEPJIT_RUNTIME_AMP_AUTOCAST_H_
