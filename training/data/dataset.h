// Dataset: paired input and target tensors indexed along dim 0 (a
// TensorDataset).
#ifndef STEPJIT_TRAINING_DATA_DATASET_H_
#define STEPJIT_TRAINING_DATA_DATASET_H_

#include <cstdint>

#include "absl/types/span.h"
#include "runtime/tensor.h"

namespace stepjit::data {

// One mini-batch: rows of the inputs and the matching targets.
struct Batch {
  Tensor x;
  Tensor y;
};

class Dataset {
 public:
  Dataset() = default;
  // Both tensors must live on the CPU and have the same (non-zero rank) size
  // along dim 0; non-contiguous tensors are copied to contiguous ones.
  // Throws stepjit::Error otherwise.
  Dataset(Tensor inputs, Tensor targets);

  int64_t size() const { return size_; }
  const Tensor& inputs() const { return inputs_; }
  const Tensor& targets() const { return targets_; }

  // Gathers the given rows into fresh contiguous tensors of shape
  // [indices.size(), ...]. Safe to call from several threads at once.
  // Throws stepjit::Error for an index outside [0, size()).
  Batch Get(absl::Span<const int64_t> indices) const;

  // The first `n` samples (views that share storage); n must be in [0, size()].
  Dataset Subset(int64_t n) const;

 private:
  Tensor inputs_;
  Tensor targets_;
  int64_t size_ = 0;
};

}  // namespace stepjit::data

#endif  // STEPJIT_TRAINING_DATA_DATASET_H_
