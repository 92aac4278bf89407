// Benchmark workloads: model construction, batch pools and the step closure.
#include "bench/workloads.h"

#include <algorithm>

#include "absl/strings/str_join.h"
#include "runtime/cuda/api.h"

namespace stepjit::bench {

namespace {
constexpr uint64_t kDataSeed = 1234;
constexpr uint64_t kInitSeed = 0;

nn::Sequential MakeModel(const Workload& w) {
  manual_seed(kInitSeed);
  nn::Sequential model;
  for (size_t i = 0; i + 1 < w.widths.size(); ++i) {
    if (i > 0) model.push_back(nn::ReLU());
    model.push_back(nn::Linear(w.widths[i], w.widths[i + 1]));
  }
  return model;
}
}  // namespace

const std::vector<Workload>& Workloads() {
  static const std::vector<Workload> kAll = {
      {"mlp784_adamw_b128", "784-512-512-10, batch 128, AdamW lr 1e-3", {784, 512, 512, 10}, 128,
       OptKind::kAdamW, 1e-3},
      {"mlp784_sgd_b128", "the same with SGD lr 0.01 momentum 0.9", {784, 512, 512, 10}, 128,
       OptKind::kSGD, 1e-2},
      {"tiny_mlp_adamw_b32", "64-64-64-64-10, batch 32, AdamW", {64, 64, 64, 64, 10}, 32,
       OptKind::kAdamW, 1e-3},
      {"mlp1024x3_adamw_b512", "3x Linear(1024,1024)+ReLU, Linear(1024,10), batch 512, AdamW",
       {1024, 1024, 1024, 1024, 10}, 512, OptKind::kAdamW, 1e-3},
  };
  return kAll;
}

const std::vector<Workload>& CudaWorkloads() {
  // About 1.6 TFLOP of GEMMs per step (4 layers x 3 products of 4096^3)
  // and 67M AdamW parameters: GEMM-bound on a GPU, seconds on a CPU.
  static const std::vector<Workload> kAll = {
      {"mlp4096x4_adamw_b4096_bf16",
       "4x Linear(4096,4096)+ReLU, Linear(4096,10), batch 4096, AdamW, bf16 autocast",
       {4096, 4096, 4096, 4096, 4096, 10}, 4096, OptKind::kAdamW, 1e-3, DType::kBF16},
  };
  return kAll;
}

const Workload* FindWorkload(const std::string& name) {
  for (const auto* list : {&Workloads(), &CudaWorkloads()}) {
    for (const Workload& w : *list) {
      if (w.name == name) return &w;
    }
  }
  return nullptr;
}

std::string WorkloadNames() {
  std::vector<std::string> names;
  for (const auto* list : {&Workloads(), &CudaWorkloads()}) {
    for (const Workload& w : *list) names.push_back(w.name);
  }
  return absl::StrJoin(names, ", ");
}

void Synchronize(Device device) {
  if (device.is_cuda()) cuda::synchronize();
}

struct WorkloadRun::State {
  nn::Sequential model;
  std::unique_ptr<optim::Optimizer> opt;
  std::unique_ptr<amp::GradScaler> scaler;
  std::function<Tensor(const Tensor&, const Tensor&)> step;
  std::function<CompileStats()> stats;
  std::vector<std::pair<Tensor, Tensor>> pool;
  int64_t next = 0;
  int warmup_steps = 0;
};

WorkloadRun::WorkloadRun(const Workload& w, CompileOptions options, Device device)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.model = MakeModel(w);
  s.model.to(device);
  if (w.opt == OptKind::kSGD) {
    s.opt = std::make_unique<optim::SGD>(s.model.parameters(),
                                         optim::SGDOptions{.lr = w.lr, .momentum = 0.9});
  } else {
    s.opt = std::make_unique<optim::AdamW>(s.model.parameters(), optim::AdamWOptions{.lr = w.lr});
  }
  State* raw = &s;
  const DType amp_dtype = options.amp;
  const bool eager_amp = options.mode == Mode::kEager && amp_dtype != DType::kF32;
  s.scaler = std::make_unique<amp::GradScaler>(
      amp::GradScalerOptions{.enabled = eager_amp && amp_dtype == DType::kF16});
  auto body = [raw, eager_amp, amp_dtype](const Tensor& x, const Tensor& y) {
    raw->opt->zero_grad();
    Tensor loss;
    {
      amp::Autocast autocast(amp_dtype == DType::kF16 ? DType::kF16 : DType::kBF16, eager_amp);
      loss = cross_entropy(raw->model(x), y);
    }
    raw->scaler->scale(loss).backward();  // disabled: a pass-through
    raw->scaler->step(*raw->opt);
    raw->scaler->update();
    return loss;
  };
  s.warmup_steps = options.warmup_steps;
  auto fast = std::make_shared<CompiledStep<decltype(body)>>(compile(body, options));
  s.step = [fast](const Tensor& x, const Tensor& y) { return (*fast)(x, y); };
  s.stats = [fast] { return fast->stats(); };
  Generator gen(kDataSeed);
  const int64_t classes = w.widths.back();
  for (int i = 0; i < kPoolSize; ++i) {
    s.pool.emplace_back(randn({w.batch, w.widths.front()}, {}, &gen).to(device),
                        randint(0, classes, {w.batch}, {.dtype = DType::kI64}, &gen).to(device));
  }
}

WorkloadRun::~WorkloadRun() = default;

Tensor WorkloadRun::Step() {
  State& s = *state_;
  const auto& [x, y] = s.pool[static_cast<size_t>(s.next++ % kPoolSize)];
  return s.step(x, y);
}

int64_t WorkloadRun::StepsToWarm() const { return state_->warmup_steps + 2; }

CompileStats WorkloadRun::stats() const { return state_->stats(); }

}  // namespace stepjit::bench
