// DistributedSampler: splits each epoch's samples into disjoint, equally
// long shards, one per data-parallel rank (torch.utils.data's
// DistributedSampler).
//
//   data::DistributedSampler sampler(dataset.size());  // dist::rank() of
//   dist::world_size() sampler.set_epoch(epoch); for (int64_t i :
//   sampler.indices()) ...            // this rank's samples
//
// Every rank draws the same permutation from (seed, epoch); without drop_last
// it is padded by repeating its first samples until its length divides by
// num_replicas, with drop_last its tail is cut instead. Rank r then takes
// positions r, r + R, r + 2R, ... Equal shard lengths give every rank the
// same number of batches, so no rank waits in a collective another never
// calls. Use it through DataLoaderOptions::sampler.
#ifndef STEPJIT_TRAINING_DATA_DISTRIBUTED_SAMPLER_H_
#define STEPJIT_TRAINING_DATA_DISTRIBUTED_SAMPLER_H_

#include <cstdint>
#include <optional>
#include <vector>

namespace stepjit::data {

struct DistributedSamplerOptions {
  // Ranks sharing the data and this one; unset takes dist::world_size() and
  // dist::rank() (1 and 0 before dist::init()).
  std::optional<int> num_replicas = std::nullopt;
  std::optional<int> rank = std::nullopt;
  bool shuffle = true;
  // Must be the same on every rank.
  uint64_t seed = 0;
  // Cut the permutation to a multiple of num_replicas instead of padding it.
  bool drop_last = false;
};

class DistributedSampler {
 public:
  // Throws stepjit::Error for num_replicas <= 0, a rank outside
  // [0, num_replicas) or a negative dataset_size. (With drop_last and fewer
  // samples than ranks every shard is empty, on every rank alike.)
  explicit DistributedSampler(int64_t dataset_size,
                              DistributedSamplerOptions options = {});

  // The epoch indices() draws; call it before each epoch, with the same
  // value on every rank, or the shards of different epochs are equal.
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

  // This rank's dataset indices for the current epoch, num_samples() of them.
  std::vector<int64_t> indices() const { return Indices(epoch_); }
  // The same for any epoch.
  std::vector<int64_t> Indices(int64_t epoch) const;

  // Samples per rank and epoch, and all ranks' together.
  int64_t num_samples() const { return num_samples_; }
  int64_t total_size() const { return num_samples_ * num_replicas_; }
  int64_t dataset_size() const { return dataset_size_; }
  int num_replicas() const { return num_replicas_; }
  int rank() const { return rank_; }
  const DistributedSamplerOptions& options() const { return options_; }

 private:
  int64_t dataset_size_;
  DistributedSamplerOptions options_;
  int num_replicas_;
  int rank_;
  int64_t num_samples_;
  int64_t epoch_ = 0;
};

}  // namespace stepjit::data

#endif  // STEPJIT_TRAINING_DATA_DISTRIBUTED_SAMPLER_H_
