// DataLoader: shuffled, batched, optionally multi-threaded epochs over a
// Dataset.
//
//   data::DataLoader loader(train, {.batch_size = 128, .shuffle = true});
//   for (int epoch = 0; epoch < 2; ++epoch)
//     for (data::Batch& b : loader) step(b.x, b.y);
//
// Each begin() starts a new epoch. With shuffle the order is a permutation
// drawn from (seed, epoch), so epochs differ from each other but every run
// with the same seed sees the same batches, whatever num_workers is.
//
// Data-parallel training gives each rank its own shard through a sampler:
//
//   auto sampler = std::make_shared<data::DistributedSampler>(train.size());
//   data::DataLoader loader(train, {.batch_size = 64, .sampler = sampler});
//
// Then batches hold only this rank's samples, and every rank gets the same
// number of batches per epoch (so all ranks run the same steps).
#ifndef STEPJIT_TRAINING_DATA_DATALOADER_H_
#define STEPJIT_TRAINING_DATA_DATALOADER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "training/data/augment.h"
#include "training/data/dataset.h"
#include "training/data/distributed_sampler.h"

namespace stepjit::data {

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;
  uint64_t seed = 0;
  // Drop the last batch when it would be smaller than batch_size.
  bool drop_last = false;
  // Threads assembling batches ahead of the consumer; 0 assembles each batch
  // on the calling thread when the iterator advances.
  int num_workers = 0;
  // Most batches assembled or being assembled ahead of the consumer (all
  // workers together); ignored when num_workers is 0.
  int prefetch = 2;
  // Assemble batches in page-locked host memory, so that their copies to a
  // GPU can run asynchronously. Without a CUDA device the loader warns once
  // and delivers ordinary batches, as PyTorch does (options() then says
  // false).
  bool pin_memory = false;
  // Where delivered batches live. On a CUDA device the loader copies each
  // batch itself, on its own stream, one batch ahead: batch k+1's copy runs
  // while the caller computes with batch k (with pin_memory the copy is
  // truly asynchronous), and the caller's stream waits for a batch's copy
  // before its first use.
  Device device = Device::cpu();
  // Where the samples of an epoch come from instead of the whole dataset:
  // this rank's shard (its size must be the dataset's; shuffle must be off
  // here, the sampler shuffles). The loader drives its epoch: begin() and
  // set_epoch() set the sampler's epoch to the loader's.
  std::shared_ptr<DistributedSampler> sampler = nullptr;
  // Random crop and flip of each sample's inputs (augment.h), drawn from
  // (seed, epoch, sample index), done where the batch is assembled (in the
  // workers when there are any). Off by default.
  ImageAugment augment = {};
};

namespace internal {
class Epoch;
class DeviceStager;
}  // namespace internal

class DataLoader {
 public:
  // Copies `dataset` (tensor handles only; the data is shared). Throws
  // stepjit::Error for invalid options, naming the bad value.
  explicit DataLoader(const Dataset& dataset, DataLoaderOptions options = {});

  // An input iterator over one epoch. Destroying it (e.g. by `break` out of a
  // range-for) stops and joins that epoch's workers.
  class Iterator {
   public:
    Iterator();  // the end of any epoch
    Iterator(Iterator&&) noexcept;
    Iterator& operator=(Iterator&&) noexcept;
    ~Iterator();

    Batch& operator*() { return current_; }
    Batch* operator->() { return &current_; }
    // Rethrows (in order) an exception thrown while assembling the batch.
    Iterator& operator++();
    // Only comparison against end() is meaningful.
    bool operator==(const Iterator& other) const {
      return done() == other.done();
    }

   private:
    friend class DataLoader;
    bool done() const { return epoch_ == nullptr; }

    std::unique_ptr<internal::Epoch> epoch_;
    std::unique_ptr<internal::DeviceStager> stager_;  // device != cpu
    Batch current_;
  };

  // Starts the next epoch (and its workers).
  Iterator begin();
  Iterator end() { return Iterator(); }

  // Batches per epoch (of this rank's shard with a sampler).
  int64_t num_batches() const;
  // The epoch the next begin() starts (0 for the first); set it to replay or
  // resume a given epoch's order.
  int64_t epoch() const { return epoch_; }
  void set_epoch(int64_t epoch);
  const DataLoaderOptions& options() const { return options_; }
  const Dataset& dataset() const { return dataset_; }

  // The sample order of `epoch` (identity without shuffle; the sampler's
  // shard with one).
  std::vector<int64_t> EpochOrder(int64_t epoch) const;

 private:
  Dataset dataset_;
  DataLoaderOptions options_;
  int64_t epoch_ = 0;
};

}  // namespace stepjit::data

#endif  // STEPJIT_TRAINING_DATA_DATALOADER_H_
