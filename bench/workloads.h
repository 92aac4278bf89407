// The benchmark workloads shared by stepjit-bench and stepjit_benchmarks:
// training steps (forward, cross-entropy, backward, optimizer) of MLPs and of
// a GPT-style language model, on a rotating pool of random batches, run
// eagerly or through stepjit::compile.
#ifndef STEPJIT_BENCH_WORKLOADS_H_
#define STEPJIT_BENCH_WORKLOADS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "frontend/stepjit.h"

namespace stepjit::bench {

enum class OptKind { kAdamW, kSGD };

// A GPT-style language model: token and learned position embeddings,
// `layers` pre-LN blocks (causal multi-head self-attention with a fused QKV
// projection, a GELU MLP of width 4 * d_model, residuals), a final
// LayerNorm and a vocabulary head; the loss is the cross-entropy of the
// next token at every position. Batches are [batch, context] token ids.
struct GptShape {
  int64_t vocab;
  int64_t d_model;
  int64_t heads;
  int64_t context;
  int64_t layers;
};

struct Workload {
  std::string name;
  std::string description;
  std::vector<int64_t> widths = {};  // MLP: input, hidden..., classes
  int64_t batch;
  OptKind opt;
  double lr;
  // The precision the workload is defined in (stepjit-bench's --amp
  // overrides it): kF32, or kBF16 for autocast.
  DType amp = DType::kF32;
  // Set: the workload trains this language model instead of an MLP.
  std::optional<GptShape> gpt = std::nullopt;
  // Set: a CNN on [batch, 1, 28, 28] images (examples/fashion_mnist's
  // --model cnn: two 3x3 conv + 2x2 max-pool stages of 32 and 64 channels,
  // then 3136-128-10) instead of an MLP; `widths` is unused.
  bool cnn = false;
  // Set: a ResNet on [batch, 1, 28, 28] images instead (examples/
  // fashion_mnist's --model resnet: a 3x3 conv, batch norm and ReLU stem of
  // 32 channels, nn::BasicBlocks of 32, 64 (stride 2) and 128 (stride 2)
  // channels, a global average pool and a linear layer to 10).
  bool resnet = false;
  // Non-empty: one per batch of the pool, the size that varies from call to
  // call (the GPT's sequence length, the MLP's batch size); the pool is
  // stepped through in this order.
  std::vector<int64_t> sizes = {};
};

// (a) mlp784_adamw_b128, (b) mlp784_sgd_b128, (c) tiny_mlp_adamw_b32,
// (d) mlp1024x3_adamw_b512, (e) gpt_d64_l1_t32_b16, (f) gpt_d128_l2_t64_b16
// and (g) gpt_d128_l4_t128_b32 (the language model, (g) at examples/char_lm's
// size; softmax, layer_norm and cross-entropy rows are a large part of their
// steps): sized for the CPU. Then two whose shapes change every call:
// gpt_d128_l2_tvar_b16 (sequence lengths 8..128) and mlp784_adamw_bvar
// (batch sizes 1..256), 16 of each.
const std::vector<Workload>& Workloads();
// Sized for a GPU, far too slow on a CPU: mlp4096x4_adamw_b4096_bf16 and
// gpt_d512_l8_t256_b32_bf16.
const std::vector<Workload>& CudaWorkloads();
// Either list's workload; nullptr when none has that name.
const Workload* FindWorkload(const std::string& name);
// "a, b, c": the names of both lists, for error messages.
std::string WorkloadNames();

// Waits until the work queued on `device` has run (the CPU runs
// synchronously); throws stepjit::Error when the device reports an error.
void Synchronize(Device device);

// A fresh model (fixed init seed), optimizer, step function and batch pool,
// all on one device.
class WorkloadRun {
 public:
  static constexpr int kPoolSize = 16;

  // options.amp (kBF16/kF16) selects mixed precision: the compiler's passes
  // in compiled mode, amp::Autocast (+ amp::GradScaler for f16) written into
  // the step in eager mode. The model is built on the CPU and moved to
  // `device`, then the optimizer is made; the pool is drawn on the CPU and
  // copied, so every device starts from the same values.
  WorkloadRun(const Workload& w, CompileOptions options,
              Device device = Device::cpu());
  WorkloadRun(WorkloadRun&&) = default;
  ~WorkloadRun();

  // One training step on the next batch of the pool; returns the loss.
  Tensor Step();
  // Steps needed before Step() replays compiled code (warmup + trace + 1).
  int64_t StepsToWarm() const;
  CompileStats stats() const;
  // Elements of the model's parameters.
  int64_t num_parameters() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace stepjit::bench

#endif  // STEPJIT_BENCH_WORKLOADS_H_
