// Fashion-MNIST MLP (784-512-512-10): trains eagerly and/or through
// stepjit::compile and reports accuracy and ms/step side by side.
//
//   fashion_mnist --epochs 2 --mode both --json
//   mpirun -np 2 fashion_mnist --ddp --mode compiled   (docs/distributed.md)
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "devices/cuda/api.h"
#include "dist/dist.h"
#include "examples/ddp.h"
#include "examples/progress.h"
#include "frontend/compile.h"
#include "ir/status.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/JSON.h"
#include "runtime/amp/autocast.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/generator.h"
#include "runtime/ops.h"
#include "runtime/profiler.h"
#include "tools/cli_flags.h"
#include "tools/cli_output.h"
#include "training/amp/grad_scaler.h"
#include "training/checkpoint.h"
#include "training/data/dataloader.h"
#include "training/data/distributed_sampler.h"
#include "training/data/idx.h"
#include "training/nn/ddp.h"
#include "training/nn/layers.h"
#include "training/nn/resnet.h"
#include "training/optim/adamw.h"
#include "training/optim/lr_scheduler.h"

namespace {

using namespace stepjit;  // NOLINT: example code, mirrors libtorch usage
using examples::Clock;
using examples::Progress;
using examples::Seconds;

namespace cl = llvm::cl;

constexpr char kOverview[] =
    "Trains a 784-512-512-10 ReLU MLP on Fashion-MNIST with AdamW.\n";

enum class ModeFlag : uint8_t { kEager, kCompiled, kBoth };
enum class AmpFlag : uint8_t { kNone, kBF16, kF16 };
enum class DeviceFlag : uint8_t { kCpu, kCuda };
enum class ModelFlag : uint8_t { kMlp, kCnn, kResnet };

cl::OptionCategory kFlags("fashion_mnist options");

// The largest learning rate the optimizer's f32 copy keeps finite.
constexpr double kMaxF32 = std::numeric_limits<float>::max();

namespace flags {
cl::opt<std::string> data_dir(
    "data-dir",
    cl::desc("IDX files (default /usr/share/datasets/fashion-mnist,\n"
             "from the Debian package dataset-fashion-mnist)"),
    cl::value_desc("DIR"), cl::init(data::kFashionMnistDir), cl::cat(kFlags));
cl::opt<long long, false, tools::IntParser<1, 1000000>> epochs(
    "epochs", cl::desc("training epochs (default 2)"), cl::init(2),
    cl::cat(kFlags));
cl::opt<long long, false, tools::IntParser<1>> max_steps(
    "max-steps",
    cl::desc("stop after N optimizer steps in total (default: no limit)"),
    cl::init(-1), cl::cat(kFlags));
cl::opt<long long, false, tools::IntParser<1, 1 << 20>> batch_size(
    "batch-size",
    cl::desc("samples per step (default 128); under --ddp the global\n"
             "batch, split evenly over the ranks"),
    cl::init(128), cl::cat(kFlags));
cl::opt<double, false, tools::PositiveNumberParser<kMaxF32>> lr(
    "lr", cl::desc("AdamW learning rate (default 1e-3)"), cl::init(1e-3),
    cl::cat(kFlags));
cl::opt<unsigned long long, false, tools::Uint64Parser> seed(
    "seed", cl::desc("seeds parameter init and the shuffle (default 0)"),
    cl::init(0), cl::cat(kFlags));
cl::opt<long long, false, tools::IntParser<0, 256>> workers(
    "workers",
    cl::desc("DataLoader worker threads, 0 = main thread (default 1)"),
    cl::init(1), cl::cat(kFlags));
cl::opt<std::string> save(
    "save",
    cl::desc("write model, AdamW and grad scaler state to FILE at the end\n"
             "(safetensors; tools/torch_checkpoint.py loads it in PyTorch)"),
    cl::value_desc("FILE"), cl::cat(kFlags));
cl::opt<std::string> load("load",
                          cl::desc("resume from a --save FILE before training"),
                          cl::value_desc("FILE"), cl::cat(kFlags));
cl::opt<ModeFlag, false, tools::WordParser<ModeFlag>> mode(
    "mode", cl::desc("how to train"),
    cl::values(clEnumValN(ModeFlag::kEager, "eager", "eagerly (default)"),
               clEnumValN(ModeFlag::kCompiled, "compiled",
                          "through stepjit::compile"),
               clEnumValN(ModeFlag::kBoth, "both", "eager, then compiled")),
    cl::init(ModeFlag::kEager), cl::cat(kFlags));
cl::opt<AmpFlag, false, tools::WordParser<AmpFlag>> amp(
    "amp",
    cl::desc("mixed precision. Eager runs the step under amp::Autocast\n"
             "with an amp::GradScaler (f16, or bf16 with --loss-scaling);\n"
             "compiled compiles the plain f32 step with {.amp = P}, whose\n"
             "passes insert the same casts and scaler ops. Evaluation runs\n"
             "under autocast."),
    cl::values(clEnumValN(AmpFlag::kNone, "none", "f32 (default)"),
               clEnumValN(AmpFlag::kBF16, "bf16", "bfloat16 autocast"),
               clEnumValN(AmpFlag::kF16, "f16", "float16 autocast")),
    cl::init(AmpFlag::kNone), cl::cat(kFlags));
cl::opt<ModelFlag, false, tools::WordParser<ModelFlag>> model(
    "model", cl::desc("the network"),
    cl::values(clEnumValN(ModelFlag::kMlp, "mlp",
                          "784-512-512-10 ReLU MLP (default)"),
               clEnumValN(ModelFlag::kCnn, "cnn",
                          "two 3x3 conv + max-pool stages (32, 64 channels), "
                          "then 128-10 linear"),
               clEnumValN(ModelFlag::kResnet, "resnet",
                          "a 3x3 conv stem and three residual stages with "
                          "batch norm (32, 64, 128 channels), global average "
                          "pool, linear")),
    cl::init(ModelFlag::kMlp), cl::cat(kFlags));
cl::opt<DeviceFlag, false, tools::WordParser<DeviceFlag>> device(
    "device",
    cl::desc("where the model and batches live; cuda needs a GPU (or\n"
             "STEPJIT_CUDA_BACKEND=emulator, slow) and copies batches from\n"
             "pinned memory one ahead"),
    cl::values(clEnumValN(DeviceFlag::kCpu, "cpu", "the CPU (default)"),
               clEnumValN(DeviceFlag::kCuda, "cuda", "CUDA device 0")),
    cl::init(DeviceFlag::kCpu), cl::cat(kFlags));
enum class ScheduleFlag : uint8_t { kConstant, kCosine };
cl::opt<ScheduleFlag> schedule(
    "schedule", cl::desc("the learning rate over the run (default constant)"),
    cl::values(
        clEnumValN(ScheduleFlag::kConstant, "constant", "--lr throughout"),
        clEnumValN(ScheduleFlag::kCosine, "cosine",
                   "linear warmup over the first 5% of the steps (at most\n"
                   "200), then cosine decay to 0 at the last step")),
    cl::init(ScheduleFlag::kConstant), cl::cat(kFlags));
cl::opt<bool> augment(
    "augment",
    cl::desc(
        "augment the training images in the loader's workers: a\n"
        "random 28x28 crop from the image padded by 2 and a random\n"
        "horizontal flip (torchvision's RandomCrop + RandomHorizontalFlip)"),
    cl::cat(kFlags));
cl::opt<bool> loss_scaling(
    "loss-scaling",
    cl::desc("use dynamic loss scaling with bf16 too (always on for f16)"),
    cl::cat(kFlags));
cl::opt<bool> compare_amp(
    "compare-amp",
    cl::desc("run each mode in f32 and with --amp (default bf16) and\n"
             "print them side by side, with the scaler's skipped steps"),
    cl::cat(kFlags));
cl::opt<bool> check(
    "check",
    cl::desc("compiled mode: run the accuracy checker on the first 3\n"
             "replays (compiled vs eager from the same state; the\n"
             "verdict is in the explain() summary)"),
    cl::cat(kFlags));
cl::opt<bool> json(
    "json",
    cl::desc("print one JSON result line on stdout (epoch lines go to\n"
             "stderr)"),
    cl::cat(kFlags));
cl::opt<std::string> loss_csv(
    "loss-csv",
    cl::desc("write the training loss of every step to FILE as CSV:\n"
             "a header row mode,step,loss, then one row per step of each run"),
    cl::value_desc("FILE"), cl::cat(kFlags));
cl::opt<bool> quiet("quiet", cl::desc("no progress bar and no epoch lines"),
                    cl::cat(kFlags));
cl::opt<std::string> profile(
    "profile",
    cl::desc("profile the training steps (not the evaluation) into this\n"
             "Chrome trace file (Perfetto, chrome://tracing) and print the\n"
             "profiler's summary on stderr"),
    cl::value_desc("FILE.json"), cl::cat(kFlags));
cl::opt<bool> ddp(
    "ddp",
    cl::desc("data-parallel training over the ranks of mpirun, srun or\n"
             "torchrun (a world of one without a launcher): the model\n"
             "wrapped in nn::DistributedDataParallel, each rank trains on\n"
             "its shard of the training set, rank 0 prints and saves"),
    cl::cat(kFlags));
cl::opt<double, false, tools::PositiveNumberParser<1048576.0>> bucket_mb(
    "bucket-mb",
    cl::desc("--ddp: MiB of gradients per all_reduce bucket (default 25)"),
    cl::init(25.0), cl::cat(kFlags));
cl::extrahelp value_forms(
    "\nFlags take their value as \"--flag V\" or \"--flag=V\".\n");
}  // namespace flags

// The --profile session, paused around evaluations.
Profiler* g_profiler = nullptr;

// The parsed command line.
struct Flags {
  std::string data_dir = data::kFashionMnistDir;
  int64_t epochs = 2;
  int64_t max_steps = -1;  // no limit
  int64_t batch_size = 128;
  double lr = 1e-3;
  uint64_t seed = 0;
  int64_t workers = 1;
  std::string mode = "eager";
  std::string model = "mlp";
  DType amp = DType::kF32;  // kF32: none
  bool augment = false;
  bool cosine = false;  // --schedule cosine
  bool loss_scaling = false;
  bool compare_amp = false;
  bool check = false;
  bool json = false;
  bool quiet = false;
  std::string loss_csv;  // empty: no per-step loss file
  Device device = Device::cpu();
  std::string save, load;  // checkpoint files, "" for none
  bool ddp = false;
  double bucket_mb = 25;
  int world_size = 1;        // dist::world_size() under --ddp
  int64_t rank_batch = 128;  // batch_size / world_size
};

// Rank 0 alone prints, writes files and saves checkpoints (every process
// is rank 0 without --ddp).
bool Lead() { return dist::rank() == 0; }

// What every rank of --ddp must agree on: the flags that change what is
// trained, how, or on what (not output-only ones such as --quiet).
std::string TrainingFlags(const Flags& f) {
  // (--augment and --schedule cosine only when given, at the end, so that
  // the usual line stays short enough to show whole in the error.)
  return absl::StrFormat(
      "--data-dir %s --epochs %d --max-steps %d --batch-size %d --lr %.17g "
      "--seed %d --mode %s --model %s "
      "--amp %s --loss-scaling %d --compare-amp %d --check %d --load '%s' "
      "--bucket-mb %.17g "
      "--device %s%s%s",
      f.data_dir, f.epochs, f.max_steps, f.batch_size, f.lr, f.seed, f.mode,
      f.model, ir::DTypeName(f.amp), f.loss_scaling, f.compare_amp, f.check,
      f.load, f.bucket_mb, f.device.is_cuda() ? "cuda" : "cpu",
      f.augment ? " --augment" : "", f.cosine ? " --schedule cosine" : "");
}

// Returns an error message, or "" when the command line can be used.
std::string FromCommandLine(Flags& f) {
  constexpr const char* kModes[] = {"eager", "compiled", "both"};
  constexpr const char* kModels[] = {"mlp", "cnn", "resnet"};
  constexpr DType kAmps[] = {DType::kF32, DType::kBF16, DType::kF16};
  f = Flags{.data_dir = flags::data_dir,
            .epochs = flags::epochs,
            .max_steps = flags::max_steps,
            .batch_size = flags::batch_size,
            .lr = flags::lr,
            .seed = flags::seed,
            .workers = flags::workers,
            .mode = kModes[static_cast<int>(flags::mode.getValue())],
            .model = kModels[static_cast<int>(flags::model.getValue())],
            .amp = kAmps[static_cast<int>(flags::amp.getValue())],
            .augment = flags::augment,
            .cosine = flags::schedule == flags::ScheduleFlag::kCosine,
            .loss_scaling = flags::loss_scaling,
            .compare_amp = flags::compare_amp,
            .check = flags::check,
            .json = flags::json,
            .quiet = flags::quiet,
            .loss_csv = flags::loss_csv,
            .device = flags::device == DeviceFlag::kCuda
                          ? Device::cuda(flags::ddp ? dist::local_rank() : 0)
                          : Device::cpu(),
            .save = flags::save,
            .load = flags::load,
            .ddp = flags::ddp,
            .bucket_mb = flags::bucket_mb,
            .world_size = dist::world_size(),
            .rank_batch = flags::batch_size};
  if (flags::bucket_mb.getNumOccurrences() > 0 && !f.ddp) {
    return "--bucket-mb needs --ddp";
  }
  if (f.batch_size % f.world_size != 0) {
    return absl::StrCat("--batch-size ", f.batch_size,
                        " is not divisible by the world size ", f.world_size,
                        " (--batch-size is the global batch, split evenly over "
                        "the ranks)");
  }
  f.rank_batch = f.batch_size / f.world_size;
  if ((!f.save.empty() || !f.load.empty()) &&
      (f.mode == "both" || f.compare_amp)) {
    return "--save and --load need one run: --mode eager or compiled, without "
           "--compare-amp";
  }
  if (f.device.is_cuda() && !cuda::is_available()) {
    return "--device cuda: " + cuda::unavailable_reason();
  }
  return "";
}

struct RunResult {
  std::string mode;   // "eager", "compiled", with "+bf16"/"+f16" under AMP
  std::string amp = "none";
  int64_t skipped_steps = 0;  // loss-scaler steps skipped for inf/NaN grads
  int64_t epochs = 0;
  int64_t steps = 0;
  double ms_per_step = 0;        // median of forward+backward+optimizer
  double train_ms_per_step = 0;  // training-loop wall time / steps
  double final_loss = 0;
  double test_accuracy = 0;
  // --ddp: training samples per second over all ranks, and the number of
  // gradient buckets each step all_reduces.
  double samples_per_s = 0;
  int64_t buckets = 0;
};

// Under --ddp each rank scores every world_size-th batch of the test set and
// the correct counts are summed over the ranks, so every sample is scored
// once (a DistributedSampler would pad the shards with repeated samples)
// and every rank returns the accuracy on the whole test set.
template <typename Model>
double Evaluate(Model& model, const data::Dataset& test, DType amp,
                Device device, bool ddp) {
  model.eval();
  NoGradGuard no_grad;
  amp::Autocast autocast(amp == DType::kF16 ? DType::kF16 : DType::kBF16, amp != DType::kF32);
  int64_t correct = 0;
  data::DataLoader loader(test, {.batch_size = 1000, .pin_memory = device.is_cuda(),
                                 .device = device});
  const int rank = ddp ? dist::rank() : 0;
  const int world = ddp ? dist::world_size() : 1;
  int64_t batch_index = 0;
  for (data::Batch& b : loader) {
    if (batch_index++ % world != rank) continue;
    Tensor pred = argmax(model(b.x), 1);
    correct +=
        static_cast<int64_t>(sum(cast(eq(pred, b.y), DType::kI64)).item());
  }
  if (ddp) {
    const Tensor mine =
        from_vector(std::vector<int64_t>{correct}, {1}, {.dtype = DType::kI64});
    correct = static_cast<int64_t>(dist::all_reduce(mine.to(device)).item());
  }
  model.train();
  return static_cast<double>(correct) / test.size();
}

// The images as [N, 1, 28, 28] (the loader gives rows of 784).
class ImagesImpl : public nn::Module {
 public:
  Tensor forward(const Tensor& x) override {
    return x.reshape({x.size(0), 1, 28, 28});
  }
};
using Images = nn::ModuleHolder<ImagesImpl>;

nn::Sequential MakeModel(const std::string& name) {
  if (name == "cnn") {
    const nn::Conv2dModuleOptions same{.padding = {1, 1}};
    return nn::Sequential(Images(), nn::Conv2d(1, 32, 3, same), nn::ReLU(),
                          nn::MaxPool2d(2), nn::Conv2d(32, 64, 3, same),
                          nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(),
                          nn::Linear(64 * 7 * 7, 128), nn::ReLU(),
                          nn::Linear(128, 10));
  }
  if (name == "resnet") {
    return nn::Sequential(
        Images(),
        nn::Conv2d(1, 32, 3,
                   nn::Conv2dModuleOptions{.padding = {1, 1}, .bias = false}),
        nn::BatchNorm2d(32), nn::ReLU(), nn::BasicBlock(32, 32),
        nn::BasicBlock(32, 64, 2), nn::BasicBlock(64, 128, 2),
        nn::AdaptiveAvgPool2d(std::array<int64_t, 2>{1, 1}), nn::Flatten(),
        nn::Linear(128, 10));
  }
  return nn::Sequential(nn::Linear(784, 512), nn::ReLU(), nn::Linear(512, 512),
                        nn::ReLU(), nn::Linear(512, 10));
}

// Trains from f.seed; `compiled` wraps the step with stepjit::compile, so
// both modes see the same initialization and batches.
// With `loss_csv`, each step's loss is a row "<mode>,<step>,<loss>" there.
RunResult Run(const Flags& f, const data::Dataset& train,
              const data::Dataset& test, bool compiled, DType amp_dtype,
              std::FILE* loss_csv) {
  manual_seed(f.seed);
  nn::Sequential model = MakeModel(f.model);
  model->to(f.device);
  optim::AdamW opt(model->parameters(), {.lr = f.lr});
  // Under --ddp the sampler shuffles (the same permutation on every rank)
  // and hands this rank its shard; every shard has as many batches, so all
  // ranks run the same steps.
  std::shared_ptr<data::DistributedSampler> sampler;
  if (f.ddp) {
    sampler = std::make_shared<data::DistributedSampler>(
        train.size(), data::DistributedSamplerOptions{.seed = f.seed});
  }
  data::DataLoader loader(train, {.batch_size = f.rank_batch,
                                  .shuffle = !f.ddp,
                                  .seed = f.seed,
                                  .num_workers = static_cast<int>(f.workers),
                                  .prefetch = 4,
                                  .pin_memory = f.device.is_cuda(),
                                  .device = f.device,
                                  .sampler = sampler,
                                  .augment = {.channels = 1,
                                              .height = 28,
                                              .width = 28,
                                              .padding = f.augment ? 2 : 0,
                                              .horizontal_flip = f.augment}});
  int64_t total = 0;
  SJ_REQUIRE(!__builtin_mul_overflow(f.epochs, loader.num_batches(), &total),
             "--epochs ", f.epochs, " x ", loader.num_batches(),
             " steps per epoch overflows");
  if (f.max_steps > 0) total = std::min(total, f.max_steps);
  // Epoch lines go to stderr under --json so stdout holds one JSON line.
  std::FILE* log = f.json ? stderr : stdout;

  // Set after --load: the wrapper broadcasts rank 0's parameters.
  std::optional<nn::DistributedDataParallel> ddp;
  auto forward = [&](const Tensor& x) { return ddp ? (*ddp)(x) : model(x); };

  // Mixed precision: written by hand in eager mode; in compiled mode the
  // compiler inserts it into the plain f32 step.
  const bool use_amp = amp_dtype != DType::kF32;
  const bool scaling = use_amp && (amp_dtype == DType::kF16 || f.loss_scaling);
  const DType low = amp_dtype == DType::kF16 ? DType::kF16 : DType::kBF16;
  amp::GradScaler scaler({.enabled = scaling && !compiled, .device = f.device});
  auto step = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::Autocast autocast(low, use_amp && !compiled);
      loss = cross_entropy(forward(x), y);
    }
    scaler.scale(loss).backward();  // a disabled scaler passes through
    scaler.step(opt);
    scaler.update();
    return loss;
  };
  // Every rank loads the checkpoint (the optimizer state too). Checkpoints
  // hold the plain model, without the wrapper's "module." prefix, so they
  // load with and without --ddp and in tools/torch_eval_fashion_mnist.py.
  const TrainingState checkpoint{
      .model = model.ptr(), .optimizer = &opt, .scaler = &scaler};
  if (!f.load.empty()) {
    ThrowIfError(LoadCheckpoint(f.load, checkpoint));
    // The checkpoint carries the optimizer's lr; a --lr given with --load
    // replaces it (said, not silent).
    if (flags::lr.getNumOccurrences() > 0) {
      if (Lead() && !f.quiet) {
        std::fprintf(log, "--lr %g replaces the learning rate %g from %s\n",
                     f.lr, opt.lr(), f.load.c_str());
      }
      opt.set_lr(f.lr);
    }
  }
  // The schedule sets the lr tensor in place between steps: a compiled step
  // follows it without a retrace.
  std::optional<optim::lr_scheduler::WarmupCosineLR> schedule;
  if (f.cosine) {
    schedule.emplace(opt,
                     optim::lr_scheduler::WarmupCosineOptions{
                         .warmup_steps = std::min<int64_t>(total / 20, 200),
                         .total_steps = total});
  }
  if (f.ddp)
    ddp.emplace(model, nn::DistributedDataParallelOptions{.bucket_cap_mb =
                                                              f.bucket_mb});
  auto fast = compile(step, {.mode = compiled ? Mode::kCompiled : Mode::kEager,
                             .check = f.check,
                             .amp = compiled ? amp_dtype : DType::kF32,
                             .loss_scaling = compiled && scaling});

  const std::string amp_name = use_amp ? std::string(ir::DTypeName(amp_dtype)) : "none";
  RunResult r{.mode = absl::StrCat(compiled ? "compiled" : "eager", use_amp ? "+" : "",
                                   use_amp ? amp_name : ""),
              .amp = amp_name};
  Progress progress(total, !f.quiet && Lead());
  std::vector<double> step_ms;
  step_ms.reserve(std::min<int64_t>(total, 1 << 16));  // grows past that
  double train_s = 0;
  int64_t samples = 0;  // this rank's
  for (int64_t epoch = 0; epoch < f.epochs && r.steps < total; ++epoch) {
    loader.set_epoch(epoch);  // and so the sampler's: a new shuffle each epoch
    const auto epoch_start = Clock::now();
    double loss_sum = 0;
    int64_t epoch_steps = 0;
    for (data::Batch& b : loader) {
      const auto t0 = Clock::now();
      Tensor loss = fast(b.x, b.y);
      if (schedule) schedule->step();
      double l = loss.item();  // waits for a GPU step to finish
      step_ms.push_back(1e3 * Seconds(Clock::now() - t0));
      samples += b.x.size(0);
      // The global batch's loss (the mean of the ranks' equal-sized
      // batches), as one process would report it; outside the timed step.
      if (f.ddp) l = dist::all_reduce(loss, dist::ReduceOp::kAvg).item();
      loss_sum += l;
      ++epoch_steps;
      ++r.steps;
      if (loss_csv != nullptr) {
        std::fprintf(loss_csv, "%s,%lld,%.9g\n", r.mode.c_str(),
                     static_cast<long long>(r.steps), l);
      }
      progress.Update(r.steps, l,
                      train_s + Seconds(Clock::now() - epoch_start));
      if (r.steps >= total) break;
    }
    const double epoch_train_s = Seconds(Clock::now() - epoch_start);
    train_s += epoch_train_s;
    r.epochs = epoch + 1;
    // final_loss is the mean training loss over the last epoch's steps (a
    // partial epoch when --max-steps stops mid-way).
    r.final_loss = loss_sum / std::max<int64_t>(epoch_steps, 1);
    const auto eval_start = Clock::now();
    if (g_profiler != nullptr) g_profiler->Pause();
    r.test_accuracy = Evaluate(model, test, amp_dtype, f.device, f.ddp);
    if (g_profiler != nullptr) g_profiler->Resume();
    progress.Clear();
    if (!f.quiet && Lead()) {
      std::fprintf(log,
                   "%-8s epoch %d  train loss %.4f  test acc %.2f%%  train %.1fs  "
                   "eval %.1fs  (%d steps)\n",
                   r.mode.c_str(), static_cast<int>(r.epochs), r.final_loss,
                   100 * r.test_accuracy, epoch_train_s,
                   Seconds(Clock::now() - eval_start),
                   static_cast<int>(epoch_steps));
      std::fflush(log);
    }
  }
  if (!f.save.empty() && Lead())
    ThrowIfError(SaveCheckpoint(f.save, checkpoint));
  if (!step_ms.empty()) {
    r.ms_per_step = tools::Median(step_ms);
    r.train_ms_per_step = 1e3 * train_s / r.steps;
    // Every rank's shard has as many samples per epoch.
    r.samples_per_s = static_cast<double>(samples) * f.world_size / train_s;
  }
  r.skipped_steps = compiled ? fast.stats().skipped_steps : (scaling ? scaler.skipped_steps() : 0);
  if (ddp) r.buckets = static_cast<int64_t>((*ddp)->buckets().size());
  if (compiled && !f.quiet && Lead()) {
    std::fprintf(log, "%s", fast.explain().c_str());
    if (fast.stats().check_failures > 0) std::fprintf(log, "%s", fast.check_report().c_str());
    std::fflush(log);
  }
  return r;
}

llvm::json::Object Json(const RunResult& r, const Flags& f) {
  llvm::json::Object o{{"mode", r.mode},
                       {"amp", r.amp},
                       {"epochs", r.epochs},
                       {"steps", r.steps},
                       {"ms_per_step", r.ms_per_step},
                       {"train_ms_per_step", r.train_ms_per_step},
                       {"final_loss", r.final_loss},
                       {"test_accuracy", r.test_accuracy},
                       {"skipped_steps", r.skipped_steps}};
  if (f.ddp) examples::AddDdpFields(o, r, f.world_size, f.rank_batch);
  return o;
}

// One row per mode; speedup is relative to the first row's ms/step.
void PrintSummary(const std::vector<RunResult>& rows) {
  std::printf("%-14s %8s %8s %8s %14s %11s %9s %8s\n", "mode", "ms/step", "steps/s",
              "speedup", "train ms/step", "final loss", "test acc", "skipped");
  for (const RunResult& r : rows) {
    std::printf("%-14s %8.3f %8.1f %7.2fx %14.3f %11.4f %8.2f%% %8d\n", r.mode.c_str(),
                r.ms_per_step, 1e3 / r.ms_per_step, rows[0].ms_per_step / r.ms_per_step,
                r.train_ms_per_step, r.final_loss, 100 * r.test_accuracy,
                static_cast<int>(r.skipped_steps));
  }
}

// --profile under --ddp: this rank's time in collectives, on the
// communication thread ("<collective> (comm)") and waiting for them ("dist
// wait"), summed from the trace's "comm" spans.
void PrintCommTotals() {
  absl::flat_hash_map<std::string, std::pair<int64_t, double>>
      totals;  // calls, ms
  for (const runtime::TraceEvent& e : runtime::TraceSnapshot()) {
    if (std::strcmp(e.cat, runtime::kCatComm) != 0) continue;
    auto& [calls, ms] = totals[e.name];
    ++calls;
    ms += 1e-6 * static_cast<double>(e.dur_ns);
  }
  std::vector<std::pair<std::string, std::pair<int64_t, double>>> rows(
      totals.begin(), totals.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return a.second.second > b.second.second;
  });
  std::fprintf(stderr,
               "communication on rank 0 (the trace's \"comm\" spans):\n");
  constexpr size_t kShown = 8;
  for (size_t i = 0; i < rows.size() && i < kShown; ++i) {
    std::fprintf(
        stderr, "  %-52s %6lld calls %10.3f ms\n", rows[i].first.c_str(),
        static_cast<long long>(rows[i].second.first), rows[i].second.second);
  }
  if (rows.size() > kShown)
    std::fprintf(stderr, "  ... and %zu more\n", rows.size() - kShown);
}

// --profile FILE under --ddp: rank 0 writes FILE, rank r FILE with ".rank<r>"
// before its extension, so the ranks' traces do not overwrite each other.
std::string TracePath(const std::string& path) {
  if (Lead()) return path;
  const size_t slash = path.find_last_of('/');
  size_t dot = path.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash))
    dot = path.size();
  return absl::StrCat(path.substr(0, dot), ".rank", dist::rank(),
                      path.substr(dot));
}

int Main(int argc, char** argv) {
  if (!tools::ParseFlags(argc, argv, kFlags, kOverview)) return 2;
  if (flags::ddp) dist::init();
  Flags f;
  if (std::string error = FromCommandLine(f); !error.empty()) {
    // Every rank finds the same error; one message is enough.
    if (Lead()) {
      std::fprintf(stderr, "fashion_mnist: %s\nrun with --help for usage\n",
                   error.c_str());
    }
    return 2;
  }
  // Ranks given different flags would train on different settings with no
  // error; each stops here instead, naming both ranks' flags.
  if (f.ddp) dist::check_same("the training flags", TrainingFlags(f));
  absl::StatusOr<data::Dataset> train =
      data::LoadFashionMnist(f.data_dir, true);
  absl::StatusOr<data::Dataset> test =
      data::LoadFashionMnist(f.data_dir, false);
  for (const auto* d : {&train, &test}) {
    if (!d->ok()) {
      std::fprintf(stderr, "fashion_mnist: %s\n",
                   std::string(d->status().message()).c_str());
      return 1;
    }
  }
  // A batch larger than this rank's shard of the training set would make
  // an epoch of no steps: nothing trained, and nothing said.
  const int64_t shard = train->size() / f.world_size;
  if (f.rank_batch > shard) {
    std::fprintf(stderr,
                 "fashion_mnist: --batch-size: expected at most %lld (the %lld "
                 "training images%s), "
                 "got %lld\n",
                 static_cast<long long>(shard * f.world_size),
                 static_cast<long long>(train->size()),
                 f.world_size > 1 ? " split over the ranks" : "",
                 static_cast<long long>(f.batch_size));
    return 2;
  }
  std::vector<DType> precisions = {f.amp};
  if (f.compare_amp) {
    precisions = {DType::kF32, f.amp == DType::kF32 ? DType::kBF16 : f.amp};
  }
  std::FILE* loss_csv = nullptr;
  if (!f.loss_csv.empty() && Lead()) {
    loss_csv = std::fopen(f.loss_csv.c_str(), "w");
    if (loss_csv == nullptr) {
      std::fprintf(stderr, "fashion_mnist: --loss-csv: cannot write '%s': %s\n",
                   f.loss_csv.c_str(), std::strerror(errno));
      return 1;
    }
    std::fputs("mode,step,loss\n", loss_csv);
  }
  std::optional<Profiler> profiler;
  if (!flags::profile.empty())
    g_profiler = &profiler.emplace(TracePath(flags::profile));
  std::vector<RunResult> rows;
  for (DType p : precisions) {
    if (f.mode != "compiled")
      rows.push_back(Run(f, *train, *test, false, p, loss_csv));
    if (f.mode != "eager")
      rows.push_back(Run(f, *train, *test, true, p, loss_csv));
  }
  if (loss_csv != nullptr && std::fclose(loss_csv) != 0) {
    std::fprintf(stderr, "fashion_mnist: --loss-csv: cannot write '%s': %s\n",
                 f.loss_csv.c_str(), std::strerror(errno));
    return 1;
  }
  if (profiler) profiler->Stop();
  if (!Lead()) return 0;
  if (profiler) {
    std::fprintf(stderr, "%sprofile trace written to %s\n",
                 profiler->Summary(12).c_str(), flags::profile.c_str());
    if (f.ddp) PrintCommTotals();
  }
  if (!f.json) {
    PrintSummary(rows);
    if (f.ddp)
      examples::PrintDdpSummary(rows, f.world_size, f.rank_batch, f.batch_size);
  } else if (rows.size() > 2 || f.compare_amp) {
    // --compare-amp: one line per run, each naming its mode and precision.
    for (const RunResult& r : rows) tools::PrintJsonLine(Json(r, f));
  } else if (rows.size() == 2 && !f.compare_amp) {
    tools::PrintJsonLine(llvm::json::Object{
        {"mode", "both"},
        {"eager", Json(rows[0], f)},
        {"compiled", Json(rows[1], f)},
        {"speedup", rows[0].ms_per_step / rows[1].ms_per_step}});
  } else {
    tools::PrintJsonLine(Json(rows[0], f));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return stepjit::examples::RunMain("fashion_mnist", Main, argc, argv);
}
