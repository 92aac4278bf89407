// DistributedSampler: one shared permutation, padded or cut, strided by rank.
#include "training/data/distributed_sampler.h"

#include <numeric>

#include "dist/dist.h"
#include "ir/status.h"
#include "training/data/permutation.h"

namespace stepjit::data {

DistributedSampler::DistributedSampler(int64_t dataset_size,
                                       DistributedSamplerOptions options)
    : dataset_size_(dataset_size),
      options_(options),
      num_replicas_(options.num_replicas.value_or(dist::world_size())),
      rank_(options.rank.value_or(dist::rank())) {
  SJ_REQUIRE(dataset_size_ >= 0,
             "DistributedSampler: expected a dataset size >= 0, got ",
             dataset_size_);
  SJ_REQUIRE(num_replicas_ > 0,
             "DistributedSampler: expected num_replicas > 0, got ",
             num_replicas_);
  SJ_REQUIRE(rank_ >= 0 && rank_ < num_replicas_,
             "DistributedSampler: expected a rank in [0, ", num_replicas_,
             "), got ", rank_);
  num_samples_ = options_.drop_last
                     ? dataset_size_ / num_replicas_
                     : (dataset_size_ + num_replicas_ - 1) / num_replicas_;
}

std::vector<int64_t> DistributedSampler::Indices(int64_t epoch) const {
  std::vector<int64_t> order;
  if (options_.shuffle) {
    order = EpochPermutation(dataset_size_, options_.seed, epoch);
  } else {
    order.resize(dataset_size_);
    std::iota(order.begin(), order.end(), int64_t{0});
  }
  // Pad by repeating the order from its start (more than once when there
  // are more ranks than samples), or cut its tail.
  const int64_t total = total_size();
  const int64_t n = static_cast<int64_t>(order.size());
  order.reserve(total);
  for (int64_t i = n; i < total; ++i) order.push_back(order[i % n]);
  order.resize(total);
  std::vector<int64_t> mine;
  mine.reserve(num_samples_);
  for (int64_t i = rank_; i < total; i += num_replicas_)
    mine.push_back(order[i]);
  return mine;
}

}  // namespace stepjit::data
