// The seeded sample orders of data::DataLoader and data::DistributedSampler.
#ifndef STEPJIT_TRAINING_DATA_PERMUTATION_H_
#define STEPJIT_TRAINING_DATA_PERMUTATION_H_

#include <cstdint>
#include <vector>

namespace stepjit::data {

// A permutation of [0, n) drawn from (seed, epoch) alone: the same on every
// machine, standard library and process (all ranks of a distributed run
// draw the same one), different from epoch to epoch.
std::vector<int64_t> EpochPermutation(int64_t n, uint64_t seed, int64_t epoch);

// SplitMix64's step: a well-mixed 64-bit value from any input (also the
// per-sample draws of augment.h).
uint64_t SplitMix64(uint64_t x);

}  // namespace stepjit::data

#endif  // STEPJIT_TRAINING_DATA_PERMUTATION_H_
