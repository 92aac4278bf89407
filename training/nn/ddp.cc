// nn::DistributedDataParallel: the bucket plan and the Reducer, which averages
// gradients over ranks from post-accumulate-grad hooks during backward.
//
// Everything the Reducer does to tensors is an ordinary dispatched op (cat,
// reshape, all_reduce {async}, slice, copy_), so a traced step records the
// reduction and a compiled step replays it without the hooks.
#include "training/nn/ddp.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "dist/dist.h"
#include "ir/shape.h"
#include "ir/status.h"
#include "runtime/autograd/engine.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/ops.h"

namespace stepjit::nn {
namespace {

constexpr double kBytesPerMiB = 1024.0 * 1024.0;

}  // namespace

// Per backward, a bucket is launched once the hooks of all its parameters
// have run, but only after every bucket before it: all ranks must issue the
// collectives in one order, and readiness order can differ between ranks
// (a parameter unused on one rank). A callback queued by the first hook of
// the backward launches what is left and copies the averages back.
class DistributedDataParallelImpl::Reducer {
 public:
  Reducer(std::vector<Tensor> params,
          const DistributedDataParallelOptions& options, const bool* sync)
      : options_(options), sync_(sync) {
    Hook(std::move(params));
  }
  ~Reducer() { Unhook(); }
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Moves the hooks to `params` unless they are the tensors already hooked
  // (replace_parameter gives a parameter a new identity).
  void Rehook(std::vector<Tensor> params) {
    bool same = params.size() == params_.size();
    for (size_t i = 0; same && i < params.size(); ++i)
      same = params[i].is_same(params_[i]);
    if (same) return;
    Unhook();
    Hook(std::move(params));
  }

  const std::vector<Bucket>& buckets() const { return buckets_; }
  int64_t num_syncs() const { return num_syncs_; }

 private:
  struct Slot {
    int bucket = -1;
    int64_t offset = 0;  // elements into the bucket's flat tensor
    DType dtype = DType::kF32;
    Device device = Device::cpu();
  };

  void Hook(std::vector<Tensor> params) {
    params_ = std::move(params);
    BuildPlan();
    backward_ = 0;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!params_[i].requires_grad()) continue;
      const int index = static_cast<int>(i);
      hooks_.emplace_back(index, autograd::AddPostAccumulateGradHook(
                                     params_[i], [this, index](const Tensor&) {
                                       OnGrad(index);
                                     }));
    }
  }
  void Unhook() {
    for (const auto& [index, handle] : hooks_) {
      autograd::RemovePostAccumulateGradHook(params_[index], handle);
    }
    hooks_.clear();
  }

  // Buckets over the parameters that require grad, in reverse registration
  // order (roughly the order backward produces their gradients), one open
  // bucket per dtype and device (a flat tensor has one of each). A bucket
  // closes when the next gradient would take it past the cap; a parameter
  // larger than the cap gets a bucket of its own.
  void BuildPlan() {
    const auto cap =
        static_cast<int64_t>(options_.bucket_cap_mb * kBytesPerMiB);
    buckets_.clear();
    slots_.assign(params_.size(), Slot{});
    struct Open {
      DType dtype;
      Device device;
      int bucket;
    };
    std::vector<Open> open;
    for (int i = static_cast<int>(params_.size()) - 1; i >= 0; --i) {
      const Tensor& p = params_[i];
      if (!p.requires_grad()) continue;
      const int64_t bytes = p.numel() * p.element_size();
      Open* group = nullptr;
      for (Open& o : open) {
        if (o.dtype == p.dtype() && o.device == p.device()) group = &o;
      }
      if (group == nullptr) {
        open.push_back({p.dtype(), p.device(), -1});
        group = &open.back();
      }
      if (group->bucket >= 0 && buckets_[group->bucket].bytes + bytes > cap)
        group->bucket = -1;
      if (group->bucket < 0) {
        group->bucket = static_cast<int>(buckets_.size());
        buckets_.emplace_back();
      }
      Bucket& b = buckets_[group->bucket];
      slots_[i] = {group->bucket, b.bytes / p.element_size(), p.dtype(),
                   p.device()};
      b.params.push_back(i);
      b.bytes += bytes;
      if (b.bytes >= cap) group->bucket = -1;
    }
  }

  // The plan groups by dtype and device; Module::to() may have changed them
  // since it was built.
  bool PlanIsCurrent() const {
    for (size_t i = 0; i < params_.size(); ++i) {
      const Slot& s = slots_[i];
      if (s.bucket >= 0 &&
          (s.dtype != params_[i].dtype() || s.device != params_[i].device())) {
        return false;
      }
    }
    return true;
  }

  void OnGrad(int index) {
    if (!*sync_) return;
    const uint64_t backward = autograd::CurrentBackwardId();
    if (backward != backward_) StartBackward(backward);
    SJ_CHECK(!ready_[index], "DistributedDataParallel: parameter ", index,
             " accumulated twice in one backward");
    ready_[index] = true;
    --pending_[slots_[index].bucket];
    while (next_launch_ < static_cast<int>(buckets_.size()) &&
           pending_[next_launch_] == 0) {
      Launch(next_launch_++);
    }
  }

  void StartBackward(uint64_t backward) {
    if (!PlanIsCurrent()) BuildPlan();
    backward_ = backward;
    ready_.assign(params_.size(), false);
    pending_.clear();
    for (const Bucket& b : buckets_)
      pending_.push_back(static_cast<int>(b.params.size()));
    reduced_.assign(buckets_.size(), dist::Work());
    next_launch_ = 0;
    autograd::QueueCallback([this] { Finish(); });
  }

  // Flattens the bucket's gradients into one tensor and starts its average.
  // A parameter whose gradient did not arrive in this backward contributes
  // its .grad as it stands (zeros when it has none): every rank then adds
  // exactly what it holds.
  void Launch(int bucket) {
    std::vector<Tensor> pieces;
    for (int i : buckets_[bucket].params) {
      const Tensor& p = params_[i];
      Tensor grad = p.grad();
      if (!grad.defined()) grad = zeros_like(p);
      pieces.push_back(grad.reshape({grad.numel()}));
    }
    const dist::ReduceOp op =
        options_.average ? dist::ReduceOp::kAvg : dist::ReduceOp::kSum;
    reduced_[bucket] = dist::all_reduce_async(cat(pieces, 0), op, bucket);
  }

  // End of backward: launch the rest in order, then write each reduced
  // slice back into its .grad in place (waiting for each bucket's work).
  void Finish() {
    while (next_launch_ < static_cast<int>(buckets_.size()))
      Launch(next_launch_++);
    for (size_t b = 0; b < buckets_.size(); ++b) {
      const Tensor& flat = reduced_[b].result();
      for (int i : buckets_[b].params) {
        const Tensor& p = params_[i];
        const int64_t begin = slots_[i].offset;
        const Tensor piece =
            flat.slice(0, begin, begin + p.numel()).reshape(p.shape());
        Tensor grad = p.grad();
        if (grad.defined()) {
          grad.copy_(piece);
        } else {
          // Its own storage, as AccumulateGrad gives a fresh gradient.
          p.set_grad(piece.clone());
        }
      }
      ++num_syncs_;
    }
    // Released now: in a shape-only re-trace these are meta tensors, which
    // must not outlive the step.
    reduced_.clear();
  }

  std::vector<Tensor> params_;
  DistributedDataParallelOptions options_;
  const bool* sync_;  // the owner's no_sync() flag
  std::vector<Bucket> buckets_;
  std::vector<Slot> slots_;
  std::vector<std::pair<int, int>> hooks_;  // (parameter, hook handle)

  // The backward being reduced.
  uint64_t backward_ = 0;
  std::vector<bool> ready_;
  std::vector<int> pending_;  // per bucket: gradients not yet accumulated
  std::vector<dist::Work> reduced_;
  int next_launch_ = 0;
  int64_t num_syncs_ = 0;
};

DistributedDataParallelImpl::DistributedDataParallelImpl(
    std::shared_ptr<Module> module, DistributedDataParallelOptions options)
    : module_(std::move(module)), options_(options) {
  SJ_REQUIRE(module_ != nullptr,
             "DistributedDataParallel: expected a module, got nullptr");
  SJ_REQUIRE(
      dist::is_initialized(),
      "DistributedDataParallel: the process group is not initialized; call "
      "dist::init() first (a single process too: dist::init({.backend = "
      "\"single\"}))");
  SJ_REQUIRE(std::isfinite(options_.bucket_cap_mb) &&
                 options_.bucket_cap_mb > 0 &&
                 options_.bucket_cap_mb <= 1 << 20,
             "DistributedDataParallel: expected bucket_cap_mb > 0 and at most "
             "1048576 (1 TiB), "
             "got ",
             options_.bucket_cap_mb);
  register_module("module", module_);
  if (dist::world_size() > 1) {
    // Ranks whose models or buckets differ would reduce mismatched
    // gradients: every rank checks that the others built the same.
    std::string layout =
        absl::StrCat("bucket_cap_mb ", options_.bucket_cap_mb, ", ");
    const auto named = module_->named_parameters();
    absl::StrAppend(&layout, named.size(), " parameters:");
    for (const auto& [name, p] : named) {
      absl::StrAppend(&layout, " ", name, " ", ir::DTypeName(p.dtype()),
                      ir::ShapeToString(p.shape()),
                      p.requires_grad() ? "" : " (frozen)");
    }
    dist::check_same("the DistributedDataParallel model", layout);
  }
  if (options_.broadcast_parameters && dist::world_size() > 1) {
    NoGradGuard no_grad;
    for (Tensor& p : module_->parameters()) p.copy_(dist::broadcast(p, 0));
    // (Buffers too, as PyTorch's DDP: BatchNorm's running statistics.)
    for (Tensor& b : module_->buffers()) b.copy_(dist::broadcast(b, 0));
  }
  reducer_ = std::make_unique<Reducer>(module_->parameters(), options_, &sync_);
  parameter_epoch_ = ParameterEpoch();
}

DistributedDataParallelImpl::~DistributedDataParallelImpl() = default;

Tensor DistributedDataParallelImpl::forward(const Tensor& input) {
  // A parameter rebound since the hooks were placed (replace_parameter)
  // would never be reduced: hook the module's current parameters.
  if (ParameterEpoch() != parameter_epoch_) {
    reducer_->Rehook(module_->parameters());
    parameter_epoch_ = ParameterEpoch();
  }
  return module_->forward(input);
}

const std::vector<DistributedDataParallelImpl::Bucket>&
DistributedDataParallelImpl::buckets() const {
  return reducer_->buckets();
}

int64_t DistributedDataParallelImpl::num_syncs() const {
  return reducer_->num_syncs();
}

}  // namespace stepjit::nn
