// Image augmentation a DataLoader applies to each sample as it assembles a
// batch (in its worker threads when it has them): a random crop from the
// image padded with zeros, then a random horizontal flip, as torchvision's
// RandomCrop(size, padding) followed by RandomHorizontalFlip().
#ifndef STEPJIT_TRAINING_DATA_AUGMENT_H_
#define STEPJIT_TRAINING_DATA_AUGMENT_H_

#include <cstdint>

#include "absl/types/span.h"
#include "runtime/tensor.h"

namespace stepjit::data {

struct ImageAugment {
  // Each sample's layout: channels x height x width, row-major, stored as
  // [C, H, W] or flat (C * H * W values, as Fashion-MNIST's rows of 784).
  int64_t channels = 1;
  int64_t height = 0;
  int64_t width = 0;
  // > 0: crop a height x width window at a uniformly random offset from the
  // image padded by this many zeros on every side.
  int64_t padding = 0;
  // Mirror the sample left to right with probability 1/2.
  bool horizontal_flip = false;

  bool enabled() const { return padding > 0 || horizontal_flip; }
};

// Throws stepjit::Error naming what is wrong when `a` is enabled and does
// not fit samples of `sample_numel` values (what was expected and found).
void CheckAugment(const ImageAugment& a, int64_t sample_numel);

// Augments the rows of `x` (a fresh contiguous CPU batch, dim 0 the
// samples) in place. Sample i's crop offset and flip come from (seed,
// epoch, indices[i]) alone: the same whatever the batch size, worker count
// or machine, and different from epoch to epoch.
void AugmentBatch(Tensor& x, absl::Span<const int64_t> indices,
                  const ImageAugment& a, uint64_t seed, int64_t epoch);

// The draw for one sample: crop offsets in [0, 2 * padding] and the flip.
struct AugmentDraw {
  int64_t dy = 0, dx = 0;
  bool flip = false;
};
AugmentDraw DrawAugment(const ImageAugment& a, uint64_t seed, int64_t epoch,
                        int64_t index);

}  // namespace stepjit::data

#endif  // STEPJIT_TRAINING_DATA_AUGMENT_H_
