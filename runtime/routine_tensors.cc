// RoutineTensors (runtime/routine_tensors.h).
#include "runtime/routine_tensors.h"

namespace stepjit::runtime {

std::vector<Tensor> RoutineTensors::Tensors() const {
  std::vector<Tensor> out;
  out.reserve(refs_.size());
  for (const std::shared_ptr<TensorImpl>* t : refs_) out.emplace_back(*t);
  return out;
}

}  // namespace stepjit::runtime
