// RoutineTensors: the tensors a library routine reads or writes, as a
// recording observer sees them (runtime/dispatch.h), listed by reference.
#ifndef STEPJIT_RUNTIME_ROUTINE_TENSORS_H_
#define STEPJIT_RUNTIME_ROUTINE_TENSORS_H_

#include <deque>
#include <memory>
#include <vector>

#include "runtime/tensor.h"

namespace stepjit::runtime {

// The tensors a library routine reads or writes (DispatchObserver::
// BeginRoutine), listed without a reference count each: a recording call
// lists every parameter, gradient and optimizer state tensor of the step,
// on every call, and each count update is an atomic operation. A tensor
// added as an lvalue must stay alive, held by its owner, until the routine
// has begun (the list is cleared before it ends); one added as an rvalue (a
// temporary) is held by the list.
class RoutineTensors {
 public:
  void Add(const Tensor& t) { refs_.push_back(&t.impl_ptr()); }
  void Add(const std::shared_ptr<TensorImpl>& t) { refs_.push_back(&t); }
  void Add(Tensor&& t) {
    held_.push_back(std::move(t));  // (a deque: the others stay in place)
    refs_.push_back(&held_.back().impl_ptr());
  }
  size_t size() const { return refs_.size(); }
  TensorImpl* impl(size_t i) const { return refs_[i]->get(); }
  const std::shared_ptr<TensorImpl>& ptr(size_t i) const { return *refs_[i]; }
  // Each, held.
  std::vector<Tensor> Tensors() const;
  void clear() {
    refs_.clear();
    held_.clear();
  }

 private:
  std::vector<const std::shared_ptr<TensorImpl>*> refs_;
  std::deque<Tensor> held_;
};

}  // namespace stepjit::runtime

#endif  // STEPJIT_RUNTIME_ROUTINE_TENSORS_H_
