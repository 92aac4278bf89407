// Guards: what a replay assumes about its inputs, state and modes, and how a miss is described.
#ifndef STEPJIT_FRONTEND_GUARDS_H_
#define STEPJIT_FRONTEND_GUARDS_H_

#include <string>
#include <utility>
#include <vector>

#include "frontend/tracer.h"
#include "runtime/tensor.h"

namespace stepjit::frontend {

struct TensorSpec {
  DType dtype;
  Shape shape;
  Device device;
  bool requires_grad;
  bool operator==(const TensorSpec&) const = default;
};

// The part of a call that selects a specialization.
struct Signature {
  std::vector<TensorSpec> inputs;
  // For each argument, the first argument sharing its storage (itself when
  // none): a graph traced with distinct arguments reads each from its own
  // param, one traced with x passed twice reads x for both, and in-place
  // writes through one alias are seen by the other only when they share.
  std::vector<int> storage_of;
  bool grad_mode = true;
  // amp::Autocast around the call: the traced casts depend on it.
  bool autocast = false;
  DType autocast_dtype = DType::kBF16;
  // dist::world_size() at the call: the grad-scaler pass all-reduces its
  // inf check across ranks only when traced in a world of more than one.
  int world_size = 1;
  bool operator==(const Signature&) const = default;
};

Signature MakeSignature(const std::vector<Tensor>& inputs);
std::string DescribeSignature(const Signature& s);
// The first difference between a cached signature and a new one.
std::string DescribeSignatureDiff(const Signature& cached, const Signature& now);

// The input dims in which `now` differs from `cached` when that is the only
// difference (argument dtypes, devices, ranks, requires_grad, aliasing and
// modes all equal), each as {argument, dim}; empty otherwise. A dim counts
// only when it is neither 0 nor 1 on either side (those stay specialized:
// they change broadcasting and emptiness) and, when `allowed` is not empty,
// it is one of `allowed`.
std::vector<std::pair<int, int>> DimsOnlyDiff(
    const Signature& cached, const Signature& now,
    const std::vector<std::pair<int, int>>& allowed);

// Layout of each state tensor when traced. CheckStateGuards also refuses a
// state tensor its module replaced since (TensorImpl::replaced): only the
// steps that read the replaced parameter are affected.
struct StateGuards {
  struct Meta {
    DType dtype;
    Shape shape, strides;
    int64_t offset;
    const Storage* storage;
  };
  std::vector<Meta> state;
};
StateGuards MakeStateGuards(const Trace& trace);
// "" when every state guard holds, else what changed.
std::string CheckStateGuards(const Trace& trace, const StateGuards& guards);
// "" when every host flag the trace read (module training flags) still has
// its traced value, else which one changed.
std::string CheckFlagGuards(const Trace& trace);
// Descriptions of the state tensors no guard can see rebound: tensors the
// step captured that are neither owned state (TensorImpl::owned_state: module
// parameters, optimizer and scaler state) nor a .grad whose binding a grad
// guard checks. C++ cannot see a lambda's captures, so only a re-trace of the
// call notices that the user assigned such a variable a new tensor.
std::vector<std::string> UnguardedState(const Trace& trace);

}  // namespace stepjit::frontend

#endif  // STEPJIT_FRONTEND_GUARDS_H_
