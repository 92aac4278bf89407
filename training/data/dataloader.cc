// DataLoader epochs: a seeded permutation, and worker threads that assemble
// batches ahead of the consumer and hand them over strictly in order.
#include "training/data/dataloader.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>
#include <utility>

#include "devices/cuda/backend.h"
#include "ir/status.h"
#include "runtime/profiler.h"
#include "training/data/permutation.h"

namespace stepjit::data {
namespace internal {

// One pass over the data. Batch k holds order[k*bs, min((k+1)*bs, n)).
// Workers claim batch numbers in increasing order, at most `prefetch` ahead
// of the next one to deliver; batch k goes to slot k % prefetch, which is
// free because batch k - prefetch has already been delivered.
class Epoch {
 public:
  Epoch(const Dataset& dataset, std::vector<int64_t> order, int64_t batch_size,
        int64_t num_batches, int num_workers, int prefetch, bool pin_memory,
        const ImageAugment& augment, uint64_t seed, int64_t epoch)
      : dataset_(dataset),
        order_(std::move(order)),
        batch_size_(batch_size),
        num_batches_(num_batches),
        pin_memory_(pin_memory),
        augment_(augment),
        seed_(seed),
        epoch_(epoch),
        slots_(num_workers > 0 ? prefetch : 0) {
    workers_.reserve(num_workers);
    for (int i = 0; i < num_workers; ++i) {
      workers_.emplace_back([this] { WorkerLoop(); });
    }
  }

  ~Epoch() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  Epoch(const Epoch&) = delete;
  Epoch& operator=(const Epoch&) = delete;

  // Moves the next batch into `out`; false once the epoch is exhausted.
  bool Next(Batch& out) {
    if (next_deliver_ >= num_batches_) return false;
    if (workers_.empty()) {
      out = Assemble(next_deliver_++);
      return true;
    }
    std::unique_lock<std::mutex> lock(mu_);
    Slot& slot = slots_[next_deliver_ % slots_.size()];
    ready_cv_.wait(lock, [&] { return slot.ready; });
    slot.ready = false;
    ++next_deliver_;
    std::exception_ptr error = std::exchange(slot.error, nullptr);
    out = std::move(slot.batch);
    slot.batch = Batch();
    lock.unlock();
    work_cv_.notify_one();
    if (error) std::rethrow_exception(error);
    return true;
  }

 private:
  struct Slot {
    bool ready = false;
    Batch batch;
    std::exception_ptr error;
  };

  Batch Assemble(int64_t k) const {
    const int64_t begin = k * batch_size_;
    const int64_t end = std::min<int64_t>(begin + batch_size_,
                                          static_cast<int64_t>(order_.size()));
    const auto indices =
        absl::MakeConstSpan(order_.data() + begin, end - begin);
    Batch b = dataset_.Get(indices);
    AugmentBatch(b.x, indices, augment_, seed_, epoch_);
    if (pin_memory_) {
      b.x = b.x.pin_memory();
      b.y = b.y.pin_memory();
    }
    return b;
  }

  void WorkerLoop() {
    const int64_t prefetch = static_cast<int64_t>(slots_.size());
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      work_cv_.wait(lock, [&] {
        return stop_ || next_assign_ >= num_batches_ ||
               next_assign_ < next_deliver_ + prefetch;
      });
      if (stop_ || next_assign_ >= num_batches_) return;
      const int64_t k = next_assign_++;
      lock.unlock();
      Slot result;
      try {
        result.batch = Assemble(k);
      } catch (...) {
        result.error = std::current_exception();
      }
      lock.lock();
      Slot& slot = slots_[k % prefetch];
      slot.batch = std::move(result.batch);
      slot.error = std::move(result.error);
      slot.ready = true;
      // The consumer may wait on a different slot than this one; wake all
      // waiters so the one whose slot just filled proceeds.
      ready_cv_.notify_all();
    }
  }

  const Dataset dataset_;
  const std::vector<int64_t> order_;
  const int64_t batch_size_;
  const int64_t num_batches_;
  const bool pin_memory_;
  const ImageAugment augment_;
  const uint64_t seed_;
  const int64_t epoch_;

  std::mutex mu_;
  std::condition_variable work_cv_;   // workers: a batch may be claimed
  std::condition_variable ready_cv_;  // consumer: a slot was filled
  int64_t next_assign_ = 0;
  int64_t next_deliver_ = 0;  // written only by the consumer, under mu_
  bool stop_ = false;
  std::vector<Slot> slots_;
  std::vector<std::thread> workers_;  // last: started after the rest exists
};

// Copies host batches to a CUDA device one batch ahead, on its own stream.
class DeviceStager {
 public:
  explicit DeviceStager(Device device) : device_(device) {
    backend_ = ValueOrThrow(runtime::cuda::RequireBackend());
    stream_ = ValueOrThrow(backend_->CreateStream());
  }
  ~DeviceStager() {
    (void)backend_->SynchronizeStream(stream_);
    if (staged_) backend_->DestroyEvent(staged_->done);
    (void)backend_->DestroyStream(stream_);
  }
  DeviceStager(const DeviceStager&) = delete;
  DeviceStager& operator=(const DeviceStager&) = delete;

  // The device copy of the batch `epoch` delivers next; false at its end.
  bool Next(Epoch& epoch, Batch& out) {
    if (!staged_) {
      Batch host;
      if (!epoch.Next(host)) return false;
      staged_ = Stage(std::move(host));
    }
    Staged current = std::move(*staged_);
    staged_.reset();
    Batch host;
    if (epoch.Next(host))
      staged_ = Stage(std::move(host));  // overlaps the caller's work
    const runtime::cuda::Stream consumer = runtime::cuda::CurrentStream();
    ThrowIfError(backend_->StreamWaitEvent(consumer, current.done));
    backend_->DestroyEvent(current.done);
    // The blocks were allocated on the copy stream: the allocator must not
    // hand them out again before the caller's work on them is done.
    for (const Tensor* t : {&current.device.x, &current.device.y}) {
      ThrowIfError(runtime::cuda::DeviceAllocator().RecordStream(
          t->storage()->data(), consumer));
    }
    // The pinned source may go now: the pinned pool reuses its block only
    // once the copy from it has finished.
    out = std::move(current.device);
    return true;
  }

 private:
  struct Staged {
    Batch host, device;
    runtime::cuda::Event done = 0;
  };

  Staged Stage(Batch host) {
    runtime::cuda::StreamGuard on_copy_stream(stream_);
    Staged s;
    s.device.x = host.x.to(device_, /*non_blocking=*/true);
    s.device.y = host.y.to(device_, /*non_blocking=*/true);
    s.done = ValueOrThrow(
        backend_->CreateEvent(runtime::cuda::Backend::EventTiming::kOff));
    ThrowIfError(backend_->RecordEvent(s.done, stream_));
    s.host = std::move(host);
    return s;
  }

  Device device_;
  runtime::cuda::Backend* backend_ = nullptr;
  runtime::cuda::Stream stream_ = 0;
  std::optional<Staged> staged_;
};

}  // namespace internal

DataLoader::DataLoader(const Dataset& dataset, DataLoaderOptions options)
    : dataset_(dataset), options_(options) {
  SJ_REQUIRE(options_.batch_size > 0,
             "DataLoader: batch_size must be > 0, got ", options_.batch_size);
  SJ_REQUIRE(options_.num_workers >= 0,
             "DataLoader: num_workers must be >= 0, got ",
             options_.num_workers);
  SJ_REQUIRE(options_.prefetch >= 1, "DataLoader: prefetch must be >= 1, got ",
             options_.prefetch);
  if (options_.sampler) {
    SJ_REQUIRE(
        !options_.shuffle,
        "DataLoader: shuffle=true and a sampler both order the samples; set "
        "shuffle on the DistributedSampler instead (it shuffles the whole "
        "dataset "
        "identically on every rank before splitting it)");
    SJ_REQUIRE(options_.sampler->dataset_size() == dataset_.size(),
               "DataLoader: the sampler was made for a dataset of ",
               options_.sampler->dataset_size(),
               " samples, but the dataset has ", dataset_.size());
  }
  if (options_.augment.enabled() && dataset_.size() > 0) {
    CheckAugment(options_.augment, dataset_.inputs().numel() / dataset_.size());
  }
  if (options_.device.is_cuda()) {
    absl::StatusOr<runtime::cuda::Backend*> b = runtime::cuda::RequireBackend();
    SJ_REQUIRE(b.ok(), "DataLoader: device ", options_.device.str(),
               " needs a CUDA device: ", b.status().message());
  } else if (options_.pin_memory) {
    absl::StatusOr<runtime::cuda::Backend*> b = runtime::cuda::RequireBackend();
    if (!b.ok()) {
      // PyTorch's DataLoader warns and goes on unpinned.
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true)) {
        std::fprintf(
            stderr,
            "stepjit: warning: DataLoader: pin_memory=true but there is no "
            "CUDA device (%s); batches are not pinned\n",
            std::string(b.status().message()).c_str());
      }
      options_.pin_memory = false;
    }
  }
}

void DataLoader::set_epoch(int64_t epoch) {
  epoch_ = epoch;
  if (options_.sampler) options_.sampler->set_epoch(epoch);
}

int64_t DataLoader::num_batches() const {
  const int64_t n =
      options_.sampler ? options_.sampler->num_samples() : dataset_.size();
  const int64_t bs = options_.batch_size;
  return options_.drop_last ? n / bs : (n + bs - 1) / bs;
}

std::vector<int64_t> DataLoader::EpochOrder(int64_t epoch) const {
  if (options_.sampler) return options_.sampler->Indices(epoch);
  if (options_.shuffle)
    return EpochPermutation(dataset_.size(), options_.seed, epoch);
  std::vector<int64_t> order(dataset_.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  return order;
}

DataLoader::Iterator DataLoader::begin() {
  const int64_t epoch = epoch_++;
  if (options_.sampler) options_.sampler->set_epoch(epoch);
  const int64_t batches = num_batches();
  const int workers =
      static_cast<int>(std::min<int64_t>(options_.num_workers, batches));
  Iterator it;
  it.epoch_ = std::make_unique<internal::Epoch>(
      dataset_, EpochOrder(epoch), options_.batch_size, batches, workers,
      options_.prefetch, options_.pin_memory, options_.augment, options_.seed,
      epoch);
  if (options_.device.is_cuda()) {
    it.stager_ = std::make_unique<internal::DeviceStager>(options_.device);
  }
  ++it;
  return it;
}

DataLoader::Iterator::Iterator() = default;
DataLoader::Iterator::Iterator(Iterator&&) noexcept = default;
DataLoader::Iterator& DataLoader::Iterator::operator=(Iterator&&) noexcept =
    default;
DataLoader::Iterator::~Iterator() = default;

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  if (epoch_ == nullptr) return *this;
  // The consumer's wait for the next batch (assembling it, without workers).
  runtime::ProfileSpan wait(runtime::kCatData);
  if (wait.active()) wait.set_name("dataloader next batch");
  const bool more = stager_ != nullptr ? stager_->Next(*epoch_, current_)
                                       : epoch_->Next(current_);
  if (!more) {
    stager_.reset();
    epoch_.reset();
    current_ = Batch();
  }
  return *this;
}

}  // namespace stepjit::data
