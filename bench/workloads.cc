// Benchmark workloads: model construction, batch pools and the step closure.
#include "bench/workloads.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "devices/cuda/api.h"

namespace stepjit::bench {

namespace {
constexpr uint64_t kDataSeed = 1234;
constexpr uint64_t kInitSeed = 0;

std::shared_ptr<nn::Module> MakeMlp(const Workload& w) {
  nn::Sequential model;
  for (size_t i = 0; i + 1 < w.widths.size(); ++i) {
    if (i > 0) model.push_back(nn::ReLU());
    model.push_back(nn::Linear(w.widths[i], w.widths[i + 1]));
  }
  return model.ptr();
}

std::shared_ptr<nn::Module> MakeCnn() {
  const nn::Conv2dModuleOptions same{.padding = {1, 1}};
  return nn::Sequential(nn::Conv2d(1, 32, 3, same), nn::ReLU(),
                        nn::MaxPool2d(2), nn::Conv2d(32, 64, 3, same),
                        nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(),
                        nn::Linear(64 * 7 * 7, 128), nn::ReLU(),
                        nn::Linear(128, 10))
      .ptr();
}

std::shared_ptr<nn::Module> MakeResnet() {
  return nn::Sequential(nn::Conv2d(1, 32, 3,
                                   nn::Conv2dModuleOptions{.padding = {1, 1},
                                                           .bias = false}),
                        nn::BatchNorm2d(32), nn::ReLU(), nn::BasicBlock(32, 32),
                        nn::BasicBlock(32, 64, 2), nn::BasicBlock(64, 128, 2),
                        nn::AdaptiveAvgPool2d(std::array<int64_t, 2>{1, 1}),
                        nn::Flatten(), nn::Linear(128, 10))
      .ptr();
}

std::shared_ptr<nn::Module> MakeModel(const Workload& w) {
  manual_seed(kInitSeed);
  if (w.cnn) return MakeCnn();
  if (w.resnet) return MakeResnet();
  if (w.gpt) {
    return std::make_shared<nn::GPTImpl>(
        nn::GPTOptions{.vocab = w.gpt->vocab,
                       .context = w.gpt->context,
                       .d_model = w.gpt->d_model,
                       .heads = w.gpt->heads,
                       .layers = w.gpt->layers});
  }
  return MakeMlp(w);
}

// The width-128, 2-layer, 4-head GPT over the 65-character vocabulary, with
// a context of `context` tokens.
GptShape GptD128L2(int64_t context) {
  return GptShape{
      .vocab = 65, .d_model = 128, .heads = 4, .context = context, .layers = 2};
}
}  // namespace

const std::vector<Workload>& Workloads() {
  static const std::vector<Workload> kAll = {
      {.name = "mlp784_adamw_b128",
       .description = "784-512-512-10, batch 128, AdamW lr 1e-3",
       .widths = {784, 512, 512, 10},
       .batch = 128,
       .opt = OptKind::kAdamW,
       .lr = 1e-3},
      {.name = "mlp784_sgd_b128",
       .description = "the same with SGD lr 0.01 momentum 0.9",
       .widths = {784, 512, 512, 10},
       .batch = 128,
       .opt = OptKind::kSGD,
       .lr = 1e-2},
      {.name = "tiny_mlp_adamw_b32",
       .description = "64-64-64-64-10, batch 32, AdamW",
       .widths = {64, 64, 64, 64, 10},
       .batch = 32,
       .opt = OptKind::kAdamW,
       .lr = 1e-3},
      {.name = "mlp1024x3_adamw_b512",
       .description =
           "3x Linear(1024,1024)+ReLU, Linear(1024,10), batch 512, AdamW",
       .widths = {1024, 1024, 1024, 1024, 10},
       .batch = 512,
       .opt = OptKind::kAdamW,
       .lr = 1e-3},
      {.name = "gpt_d64_l1_t32_b16",
       .description = "GPT: vocab 65, width 64, 4 heads, 1 layer, context 32, "
                      "batch 16, AdamW",
       .batch = 16,
       .opt = OptKind::kAdamW,
       .lr = 1e-3,
       .gpt = GptShape{.vocab = 65,
                       .d_model = 64,
                       .heads = 4,
                       .context = 32,
                       .layers = 1}},
      {.name = "gpt_d128_l2_t64_b16",
       .description = "GPT: vocab 65, width 128, 4 heads, 2 layers, context "
                      "64, batch 16, AdamW",
       .batch = 16,
       .opt = OptKind::kAdamW,
       .lr = 1e-3,
       .gpt = GptD128L2(64)},
      {.name = "gpt_d128_l4_t128_b32",
       .description = "GPT: vocab 114, width 128, 4 heads, 4 layers, context "
                      "128, batch 32, AdamW (examples/char_lm's model)",
       .batch = 32,
       .opt = OptKind::kAdamW,
       .lr = 1e-3,
       .gpt = GptShape{.vocab = 114,
                       .d_model = 128,
                       .heads = 4,
                       .context = 128,
                       .layers = 4}},
      // Shapes that change on every call: each batch of the pool has its
      // own sequence length (the 16 multiples of 8 up to 128, shuffled) or
      // batch size (16 drawn once from 1..256).
      {.name = "gpt_d128_l2_tvar_b16",
       .description = "GPT: vocab 65, width 128, 4 heads, 2 layers, batch 16, "
                      "AdamW; the sequence length changes every call (16 "
                      "lengths, 8..128)",
       .batch = 16,
       .opt = OptKind::kAdamW,
       .lr = 1e-3,
       .gpt = GptD128L2(128),
       .sizes = {72, 8, 128, 40, 96, 16, 112, 56, 24, 88, 64, 120, 32, 104, 48,
                 80}},
      {.name = "cnn_adamw_b128",
       .description = "CNN on 28x28 images: conv 3x3 32, max-pool, conv 3x3 "
                      "64, max-pool, 3136-128-10; batch 128, AdamW",
       .batch = 128,
       .opt = OptKind::kAdamW,
       .lr = 1e-3,
       .cnn = true},
      {.name = "resnet_adamw_b128",
       .description = "ResNet on 28x28 images: 3x3 conv 32 + BN stem, "
                      "BasicBlocks of 32, 64/2 and 128/2 channels, global "
                      "pool, linear 10; batch 128, AdamW",
       .batch = 128,
       .opt = OptKind::kAdamW,
       .lr = 1e-3,
       .resnet = true},
      {.name = "mlp784_adamw_bvar",
       .description = "784-512-512-10, AdamW lr 1e-3; the batch size changes "
                      "every call (16 sizes, 1..256)",
       .widths = {784, 512, 512, 10},
       .batch = 256,
       .opt = OptKind::kAdamW,
       .lr = 1e-3,
       .sizes = {37, 201, 1, 129, 84, 256, 13, 170, 58, 243, 112, 7, 190, 65,
                 146, 29}},
  };
  return kAll;
}

const std::vector<Workload>& CudaWorkloads() {
  // About 1.6 TFLOP of GEMMs per step (4 layers x 3 products of 4096^3)
  // and 67M AdamW parameters: GEMM-bound on a GPU, seconds on a CPU.
  static const std::vector<Workload> kAll = {
      {.name = "mlp4096x4_adamw_b4096_bf16",
       .description = "4x Linear(4096,4096)+ReLU, Linear(4096,10), batch "
                      "4096, AdamW, bf16 autocast",
       .widths = {4096, 4096, 4096, 4096, 4096, 10},
       .batch = 4096,
       .opt = OptKind::kAdamW,
       .lr = 1e-3,
       .amp = DType::kBF16},
      // About 1.3 TFLOP of GEMMs per step and 25.5M parameters.
      {.name = "gpt_d512_l8_t256_b32_bf16",
       .description = "GPT: vocab 114, width 512, 8 heads, 8 layers, context "
                      "256, batch 32, AdamW, bf16 autocast",
       .batch = 32,
       .opt = OptKind::kAdamW,
       .lr = 1e-3,
       .amp = DType::kBF16,
       .gpt = GptShape{.vocab = 114,
                       .d_model = 512,
                       .heads = 8,
                       .context = 256,
                       .layers = 8}},
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
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<optim::Optimizer> opt;
  std::unique_ptr<amp::GradScaler> scaler;
  std::function<Tensor(const Tensor&, const Tensor&)> step;
  std::function<CompileStats()> stats;
  std::vector<std::pair<Tensor, Tensor>> pool;
  int64_t next = 0;
  int warmup_steps = 0;
};

WorkloadRun::WorkloadRun(const Workload& w, CompileOptions options,
                         Device device)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.model = MakeModel(w);
  s.model->to(device);
  if (w.opt == OptKind::kSGD) {
    s.opt = std::make_unique<optim::SGD>(
        s.model->parameters(), optim::SGDOptions{.lr = w.lr, .momentum = 0.9});
  } else {
    s.opt = std::make_unique<optim::AdamW>(s.model->parameters(),
                                           optim::AdamWOptions{.lr = w.lr});
  }
  State* raw = &s;
  const DType amp_dtype = options.amp;
  const bool eager_amp =
      options.mode == Mode::kEager && amp_dtype != DType::kF32;
  s.scaler = std::make_unique<amp::GradScaler>(
      amp::GradScalerOptions{.enabled = eager_amp && amp_dtype == DType::kF16});
  auto body = [raw, eager_amp, amp_dtype](const Tensor& x, const Tensor& y) {
    raw->opt->zero_grad();
    Tensor loss;
    {
      amp::Autocast autocast(
          amp_dtype == DType::kF16 ? DType::kF16 : DType::kBF16, eager_amp);
      Tensor out = (*raw->model)(x);  // the GPT's [B, T, vocab] as rows
      if (out.dim() == 3) out = out.reshape({-1, out.size(2)});
      loss = cross_entropy(out, y.reshape({y.numel()}));
    }
    raw->scaler->scale(loss).backward();  // disabled: a pass-through
    raw->scaler->step(*raw->opt);
    raw->scaler->update();
    return loss;
  };
  s.warmup_steps = options.warmup_steps;
  auto fast =
      std::make_shared<CompiledStep<decltype(body)>>(compile(body, options));
  s.step = [fast](const Tensor& x, const Tensor& y) { return (*fast)(x, y); };
  s.stats = [fast] { return fast->stats(); };
  Generator gen(kDataSeed);
  for (int i = 0; i < kPoolSize; ++i) {
    const int64_t size = w.sizes.empty() ? 0 : w.sizes[static_cast<size_t>(i)];
    if (w.gpt) {
      // Random tokens; the targets are the inputs shifted by one position.
      const int64_t t = size > 0 ? size : w.gpt->context;
      const Tensor seq = randint(0, w.gpt->vocab, {w.batch, t + 1},
                                 {.dtype = DType::kI64}, &gen);
      s.pool.emplace_back(seq.slice(1, 0, t).contiguous().to(device),
                          seq.slice(1, 1, t + 1).contiguous().to(device));
    } else {
      const int64_t b = size > 0 ? size : w.batch;
      const bool images = w.cnn || w.resnet;
      const Tensor x = images ? randn({b, 1, 28, 28}, {}, &gen)
                              : randn({b, w.widths.front()}, {}, &gen);
      const int64_t classes = images ? 10 : w.widths.back();
      s.pool.emplace_back(
          x.to(device),
          randint(0, classes, {b}, {.dtype = DType::kI64}, &gen).to(device));
    }
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

int64_t WorkloadRun::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& p : state_->model->parameters()) n += p.numel();
  return n;
}

}  // namespace stepjit::bench
