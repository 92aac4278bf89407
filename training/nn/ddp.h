// nn::DistributedDataParallel: data-parallel training over dist:: ranks.
//
//   dist::init();
//   nn::Sequential model(...);
//   nn::DistributedDataParallel ddp(model.ptr(), {.bucket_cap_mb = 25});
//   auto step = [&](const Tensor& x, const Tensor& y) {
//     opt.zero_grad();
//     Tensor loss = nn::functional::cross_entropy(ddp(x), y);
//     loss.backward();          // gradients are averaged over ranks here
//     opt.step();
//     return loss;
//   };
//
// Construction broadcasts every parameter from rank 0, so all ranks start
// equal. Gradients are grouped into buckets of about bucket_cap_mb, in the
// reverse order of the parameters (the order backward produces them); a
// bucket's average over ranks starts (dist::all_reduce_async) as soon as its
// last gradient has been accumulated, overlapping the rest of backward, and
// backward returns once every bucket is reduced and copied back into the
// .grad tensors. A traced step records these ops, and the bucket-plan pass
// (passes/bucket_plan.h) records the bucket plan in the compiled graph.
//
// Everything that reads gradients after backward (clip_grad_norm_, the AMP
// scaler's inf check, the optimizer) therefore sees the global average: the
// norm clip_grad_norm_ computes is the global one, identical on every rank.
#ifndef STEPJIT_TRAINING_NN_DDP_H_
#define STEPJIT_TRAINING_NN_DDP_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "training/nn/module.h"

namespace stepjit::nn {

struct DistributedDataParallelOptions {
  // Bucket size in MiB of gradient bytes (PyTorch's bucket_cap_mb); a
  // parameter larger than this gets a bucket of its own. Must be > 0.
  double bucket_cap_mb = 25.0;
  // Broadcast the parameters from rank 0 at construction.
  bool broadcast_parameters = true;
  // Average (true) or sum (false) the gradients over ranks.
  bool average = true;
};

class DistributedDataParallelImpl : public Module {
 public:
  // Wraps `module` (registered as child "module", so state_dict names carry
  // the "module." prefix as in PyTorch). Needs dist::init() first (a world of
  // one is fine); throws stepjit::Error otherwise.
  explicit DistributedDataParallelImpl(
      std::shared_ptr<Module> module,
      DistributedDataParallelOptions options = {});
  ~DistributedDataParallelImpl() override;

  Tensor forward(const Tensor& input) override;
  const std::shared_ptr<Module>& module() const { return module_; }

  // The bucket plan: parameter indices (into module()->parameters()) per
  // bucket, in launch order, and each bucket's gradient bytes.
  struct Bucket {
    std::vector<int> params;
    int64_t bytes = 0;
  };
  const std::vector<Bucket>& buckets() const;
  // Bucket reductions launched and copied back by eager backwards (all ranks
  // equal); a compiled step's replays run the recorded ops without the
  // hooks and do not count.
  int64_t num_syncs() const;

  // Gradient accumulation without communication (PyTorch's no_sync()):
  // backwards run while the returned guard lives only accumulate into .grad
  // locally; the first backward after it averages everything accumulated
  // (each parameter's .grad as it stands), so N micro-batches cost one
  // reduction. Every rank must use it alike.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallelImpl& ddp)
        : ddp_(ddp), previous_(ddp.sync_) {
      ddp_.sync_ = false;
    }
    ~NoSyncGuard() { ddp_.sync_ = previous_; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallelImpl& ddp_;
    bool previous_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

 private:
  class Reducer;
  std::shared_ptr<Module> module_;
  DistributedDataParallelOptions options_;
  std::unique_ptr<Reducer> reducer_;
  // ParameterEpoch() when the hooks were last checked against parameters().
  uint64_t parameter_epoch_ = 0;
  // False under no_sync(); the reducer's hooks read it.
  bool sync_ = true;
};

class DistributedDataParallel
    : public ModuleHolder<DistributedDataParallelImpl> {
 public:
  using ModuleHolder<DistributedDataParallelImpl>::ModuleHolder;
  template <ModuleHolderType H>
  explicit DistributedDataParallel(const H& module,
                                   DistributedDataParallelOptions options = {})
      : ModuleHolder(std::make_shared<DistributedDataParallelImpl>(module.ptr(),
                                                                   options)) {}
  explicit DistributedDataParallel(std::shared_ptr<Module> module,
                                   DistributedDataParallelOptions options = {})
      : ModuleHolder(std::make_shared<DistributedDataParallelImpl>(
            std::move(module), options)) {}
};

}  // namespace stepjit::nn

#endif  // STEPJIT_TRAINING_NN_DDP_H_
