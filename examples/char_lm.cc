// A character-level GPT trained on the fortune databases of the Debian
// package `fortunes` (training/data/char_corpus.h says how they are split),
// eagerly and/or through stepjit::compile, with validation loss per epoch
// and sampled text at the end.
//
//   char_lm --mode both --max-steps 300 --sample 400
//   mpirun -np 2 char_lm --ddp --max-steps 300   (docs/distributed.md)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "dist/dist.h"
#include "examples/ddp.h"
#include "examples/progress.h"
#include "frontend/stepjit.h"
#include "ir/status.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/JSON.h"
#include "runtime/host_memory.h"
#include "tools/cli_flags.h"
#include "tools/cli_output.h"
#include "training/data/char_corpus.h"
#include "training/nn/ddp.h"

namespace {

using namespace stepjit;  // NOLINT: example code, mirrors libtorch usage
using examples::Clock;
using examples::Progress;
using examples::Seconds;
namespace cl = llvm::cl;

constexpr char kOverview[] =
    "Trains a character-level GPT (pre-LN transformer blocks, causal\n"
    "multi-head attention) on the fortune databases with AdamW, a linear\n"
    "warmup and cosine decay, and samples text from it.\n";

enum class ModeFlag : uint8_t { kEager, kCompiled, kBoth };
enum class DeviceFlag : uint8_t { kCpu, kCuda };

cl::OptionCategory kFlags("char_lm options");

// The largest learning rate the optimizer's f32 copy keeps finite.
constexpr double kMaxF32 = std::numeric_limits<float>::max();

namespace flags {
cl::opt<std::string> data_dir(
    "data-dir",
    cl::desc("fortune databases (default /usr/share/games/fortunes)"),
    cl::value_desc("DIR"), cl::init(data::kFortunesDir), cl::cat(kFlags));
cl::opt<long long, false, tools::IntParser<1, 1024>> layers(
    "layers", cl::desc("transformer blocks (default 4)"), cl::init(4),
    cl::cat(kFlags));
cl::opt<long long, false, tools::IntParser<1, 4096>> heads(
    "heads", cl::desc("attention heads (default 4)"), cl::init(4),
    cl::cat(kFlags));
cl::opt<long long, false, tools::IntParser<1, 1 << 16>> width(
    "width", cl::desc("model width, a multiple of --heads (default 128)"),
    cl::init(128), cl::cat(kFlags));
cl::opt<long long, false, tools::IntParser<1, 1 << 16>> context(
    "context", cl::desc("characters per sequence (default 128)"), cl::init(128),
    cl::cat(kFlags));
cl::opt<long long, false, tools::IntParser<1, 1 << 20>> batch_size(
    "batch-size",
    cl::desc("sequences per step (default 32); under --ddp the global\n"
             "batch, split evenly over the ranks"),
    cl::init(32), cl::cat(kFlags));
cl::opt<long long, false, tools::IntParser<1, 1000000>> epochs(
    "epochs", cl::desc("epochs of --steps-per-epoch steps (default 3)"),
    cl::init(3), cl::cat(kFlags));
cl::opt<long long, false, tools::IntParser<1, 1000000000>> steps_per_epoch(
    "steps-per-epoch", cl::desc("steps between validations (default 200)"),
    cl::init(200), cl::cat(kFlags));
cl::opt<long long, false, tools::IntParser<1>> max_steps(
    "max-steps", cl::desc("stop after N steps in total (default: no limit)"),
    cl::init(-1), cl::cat(kFlags));
cl::opt<long long, false, tools::IntParser<1, 1000000>> val_batches(
    "val-batches", cl::desc("validation batches per evaluation (default 8)"),
    cl::init(8), cl::cat(kFlags));
cl::opt<double, false, tools::PositiveNumberParser<kMaxF32>> lr(
    "lr", cl::desc("peak AdamW learning rate (default 3e-3)"), cl::init(3e-3),
    cl::cat(kFlags));
cl::opt<double> dropout("dropout",
                        cl::desc("dropout in the blocks (default 0)"),
                        cl::init(0.0), cl::cat(kFlags));
cl::opt<bool> tie_weights(
    "tie-weights", cl::desc("the output head shares the token embedding"),
    cl::cat(kFlags));
cl::opt<unsigned long long, false, tools::Uint64Parser> seed(
    "seed", cl::desc("seeds init, batches and sampling (default 0)"),
    cl::init(0), cl::cat(kFlags));
cl::opt<ModeFlag, false, tools::WordParser<ModeFlag>> mode(
    "mode", cl::desc("how to train"),
    cl::values(clEnumValN(ModeFlag::kEager, "eager", "eagerly"),
               clEnumValN(ModeFlag::kCompiled, "compiled",
                          "through stepjit::compile (default)"),
               clEnumValN(ModeFlag::kBoth, "both", "eager, then compiled")),
    cl::init(ModeFlag::kCompiled), cl::cat(kFlags));
cl::opt<std::string> amp("amp", cl::desc("none (default) or bf16 autocast"),
                         cl::init("none"), cl::cat(kFlags));
cl::opt<DeviceFlag, false, tools::WordParser<DeviceFlag>> device(
    "device", cl::desc("where the model and batches live"),
    cl::values(clEnumValN(DeviceFlag::kCpu, "cpu", "the CPU (default)"),
               clEnumValN(DeviceFlag::kCuda, "cuda", "CUDA device 0")),
    cl::init(DeviceFlag::kCpu), cl::cat(kFlags));
cl::opt<long long, false, tools::IntParser<0, 100000000>> sample(
    "sample", cl::desc("characters to generate after training (default 0)"),
    cl::init(0), cl::cat(kFlags));
cl::opt<double, false, tools::PositiveNumberParser<1e6>> temperature(
    "temperature", cl::desc("sampling temperature (default 0.8)"),
    cl::init(0.8), cl::cat(kFlags));
cl::opt<long long, false, tools::IntParser<0, 1 << 20>> top_k(
    "top-k",
    cl::desc("sample among the k likeliest characters, 0 = all (default 20)"),
    cl::init(20), cl::cat(kFlags));
cl::opt<bool> json("json", cl::desc("one JSON result line on stdout"),
                   cl::cat(kFlags));
cl::opt<bool> quiet("quiet", cl::desc("no progress bar and no epoch lines"),
                    cl::cat(kFlags));
cl::opt<bool> ddp(
    "ddp",
    cl::desc("data-parallel training over the ranks of mpirun, srun or\n"
             "torchrun (a world of one without a launcher): the model\n"
             "wrapped in nn::DistributedDataParallel, each rank trains on\n"
             "its share of every batch, rank 0 prints"),
    cl::cat(kFlags));
cl::opt<double, false, tools::PositiveNumberParser<1048576.0>> bucket_mb(
    "bucket-mb",
    cl::desc("--ddp: MiB of gradients per all_reduce bucket (default 25)"),
    cl::init(25.0), cl::cat(kFlags));
}  // namespace flags

// Rank 0 alone prints (every process is rank 0 without --ddp).
bool Lead() { return dist::rank() == 0; }

struct Config {
  int64_t layers, heads, width, context, batch, epochs, steps_per_epoch,
      max_steps, val_batches, sample, top_k;
  double lr, dropout, temperature;
  bool tie, json, quiet;
  uint64_t seed;
  DType amp;
  Device device;
  bool ddp = false;
  double bucket_mb = 25;
  int world_size = 1;      // dist::world_size() under --ddp
  int64_t rank_batch = 0;  // batch / world_size: this rank's share
};

// Random windows of context + 1 characters: inputs and next-character targets.
// Every rank draws the same c.batch windows (the same generator state) and
// keeps its rank_batch of them, so the ranks' shards are disjoint and
// together are the batch one process would train on.
std::pair<Tensor, Tensor> TrainBatch(const std::vector<int64_t>& ids,
                                     const Config& c, Generator& gen) {
  const int64_t span = static_cast<int64_t>(ids.size()) - c.context - 1;
  const std::vector<int64_t> all =
      randint(0, span, {c.batch}, {.dtype = DType::kI64}, &gen)
          .to_vector<int64_t>();
  const int64_t first = c.ddp ? dist::rank() * c.rank_batch : 0;
  const std::vector<int64_t> starts(all.begin() + first,
                                    all.begin() + first + c.rank_batch);
  std::vector<int64_t> x, y;
  for (int64_t s : starts) {
    x.insert(x.end(), ids.begin() + s, ids.begin() + s + c.context);
    y.insert(y.end(), ids.begin() + s + 1, ids.begin() + s + c.context + 1);
  }
  return {from_vector(x, {c.rank_batch, c.context}, {.dtype = DType::kI64})
              .to(c.device),
          from_vector(y, {c.rank_batch, c.context}, {.dtype = DType::kI64})
              .to(c.device)};
}

// Mean next-character loss over the first val_batches x batch windows of
// the validation text, laid end to end. Under --ddp each rank scores every
// world_size-th of these batches and the sums are added over the ranks, so
// the result is the one a single process computes.
double Validate(nn::GPTImpl& model, const std::vector<int64_t>& ids,
                const Config& c) {
  model.eval();
  NoGradGuard no_grad;
  amp::Autocast autocast(DType::kBF16, c.amp != DType::kF32);
  double total = 0;
  int64_t n = 0;
  const int64_t windows = (static_cast<int64_t>(ids.size()) - 1) / c.context;
  const int rank = c.ddp ? dist::rank() : 0;
  for (int64_t b = 0; b < c.val_batches && (b + 1) * c.batch <= windows; ++b) {
    if (b % c.world_size != rank) continue;
    std::vector<int64_t> x, y;
    for (int64_t w = b * c.batch; w < (b + 1) * c.batch; ++w) {
      x.insert(x.end(), ids.begin() + w * c.context,
               ids.begin() + (w + 1) * c.context);
      y.insert(y.end(), ids.begin() + w * c.context + 1,
               ids.begin() + (w + 1) * c.context + 1);
    }
    const Tensor logits =
        model(from_vector(x, {c.batch, c.context}, {.dtype = DType::kI64})
                  .to(c.device));
    total += cross_entropy(
                 logits.reshape({-1, logits.size(2)}),
                 from_vector(y, {c.batch * c.context}, {.dtype = DType::kI64})
                     .to(c.device))
                 .item();
    ++n;
  }
  if (c.ddp) {
    const Tensor sums = dist::all_reduce(
        from_vector(std::vector<double>{total, static_cast<double>(n)}, {2},
                    {.dtype = DType::kF64})
            .to(c.device));
    const std::vector<double> both = sums.to(Device::cpu()).to_vector<double>();
    total = both[0];
    n = static_cast<int64_t>(both[1]);
  }
  model.train();
  return n > 0 ? total / static_cast<double>(n) : NAN;
}

// `n` characters after a newline: softmax(logits / temperature) over the
// top_k likeliest characters (topk), one drawn with `gen` (multinomial), on
// the model's device; only the chosen id comes back to the host.
std::string Sample(nn::GPTImpl& model, const data::CharCorpus& corpus,
                   const Config& c, int64_t n, Generator& gen) {
  model.eval();
  NoGradGuard no_grad;
  std::vector<int64_t> ids = *corpus.Encode("\n");
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t =
        std::min<int64_t>(static_cast<int64_t>(ids.size()), c.context);
    std::vector<int64_t> window(ids.end() - t, ids.end());
    const Tensor logits =
        model(from_vector(window, {1, t}, {.dtype = DType::kI64}).to(c.device));
    const int64_t vocab = logits.shape().back();
    const Tensor last =
        logits.slice(1, t - 1, t).reshape({1, vocab}).to(DType::kF32);
    const int64_t k = c.top_k > 0 && c.top_k < vocab ? c.top_k : vocab;
    const TopK top = topk(last / c.temperature, k);
    const Tensor pick = multinomial(softmax(top.values, -1), 1, false, &gen);
    const std::vector<int64_t> kept =
        top.indices.to(Device::cpu()).to_vector<int64_t>();
    ids.push_back(kept[static_cast<size_t>(pick.to(Device::cpu()).item())]);
  }
  model.train();
  return corpus.Decode(std::vector<int64_t>(ids.begin() + 1, ids.end()));
}

struct RunResult {
  std::string mode;
  int64_t steps = 0;
  double ms_per_step = 0;  // median
  double final_loss = 0;   // mean training loss over the last epoch
  double val_loss = 0;     // after the last epoch
  int kernels_per_step = 0;
  int interpreted_regions = 0;
  std::string sample = {};
  // --ddp: sequences per second over all ranks (wall time of the training
  // loop, compilation included), and gradient buckets per step.
  double samples_per_s = 0;
  int64_t buckets = 0;
};

// Bytes a training run of `c` needs at least, in doubles (no overflow):
// f32 parameters with their gradients and AdamW's two moments (16 bytes per
// parameter), and the activations one step keeps for backward (about 16
// values of the width and the attention matrix per token and layer, and
// the logits three times). An empty result when it fits in this machine's
// memory, else a message.
std::string TooBigForMemory(const Config& c, int64_t vocab) {
  const double w = static_cast<double>(c.width),
               l = static_cast<double>(c.layers);
  const double v = static_cast<double>(vocab),
               t = static_cast<double>(c.context);
  const double params =
      l * (12 * w * w + 13 * w) + (v + t) * w + (c.tie ? 0 : v * w) + 2 * w;
  const double tokens = static_cast<double>(c.rank_batch) * t;
  const double activations =
      tokens * (l * (16 * w + 3 * static_cast<double>(c.heads) * t) + 3 * v);
  const double need = 16 * params + 4 * activations;
  const double have = PhysicalMemoryBytes();
  if (have <= 0 || need <= have) return "";
  return absl::StrFormat(
      "--layers %d --width %d --context %d --batch-size %d: the model (%.3g "
      "parameters) and "
      "one step's activations need about %.3g GiB to train; this machine has "
      "%.3g GiB",
      c.layers, c.width, c.context, c.batch, params, need / (1 << 30),
      have / (1 << 30));
}

RunResult Run(const Config& c, const data::CharCorpus& corpus, bool compiled) {
  manual_seed(c.seed);
  auto model =
      std::make_shared<nn::GPTImpl>(nn::GPTOptions{.vocab = corpus.vocab_size(),
                                                   .context = c.context,
                                                   .d_model = c.width,
                                                   .heads = c.heads,
                                                   .layers = c.layers,
                                                   .dropout = c.dropout,
                                                   .tie_weights = c.tie});
  model->to(c.device);
  // Broadcasts rank 0's parameters; gradients are averaged over the ranks.
  std::optional<nn::DistributedDataParallel> ddp;
  if (c.ddp) {
    ddp.emplace(
        std::static_pointer_cast<nn::Module>(model),
        nn::DistributedDataParallelOptions{.bucket_cap_mb = c.bucket_mb});
  }
  optim::AdamW opt(optim::DecayGroups(*model, 0.1),
                   {.lr = c.lr, .beta2 = 0.99});
  int64_t total = 0;
  SJ_REQUIRE(!__builtin_mul_overflow(c.epochs, c.steps_per_epoch, &total),
             "--epochs ", c.epochs, " x --steps-per-epoch ", c.steps_per_epoch,
             " overflows");
  if (c.max_steps > 0) total = std::min(total, c.max_steps);
  optim::lr_scheduler::WarmupCosineLR sched(
      opt, {.warmup_steps = std::min<int64_t>(100, total / 10),
            .total_steps = total,
            .min_factor = 0.1});
  auto step = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::Autocast autocast(DType::kBF16, c.amp != DType::kF32 && !compiled);
      const Tensor logits = ddp ? (*ddp)(x) : (*model)(x);
      loss =
          cross_entropy(logits.reshape({-1, logits.size(2)}), y.reshape({-1}));
    }
    loss.backward();
    opt.step();
    return loss;
  };
  auto fast = compile(step, {.mode = compiled ? Mode::kCompiled : Mode::kEager,
                             .amp = compiled ? c.amp : DType::kF32});
  RunResult r{.mode = absl::StrCat(compiled ? "compiled" : "eager",
                                   c.amp != DType::kF32 ? "+bf16" : "")};
  std::FILE* log = c.json ? stderr : stdout;
  Progress progress(total, !c.quiet && Lead());
  Generator gen(c.seed + 1);
  std::vector<double> step_ms;
  const auto start = Clock::now();
  double train_s = 0;  // the training loop's wall time, without validation
  for (int64_t epoch = 0; r.steps < total; ++epoch) {
    const auto epoch_start = Clock::now();
    double loss_sum = 0;
    int64_t n = 0;
    for (; n < c.steps_per_epoch && r.steps < total; ++n) {
      auto [x, y] = TrainBatch(corpus.train, c, gen);
      const auto t0 = Clock::now();
      const Tensor loss = fast(x, y);
      double l = loss.item();
      step_ms.push_back(1e3 * Seconds(Clock::now() - t0));
      // The global batch's loss (the mean of the ranks' equal-sized
      // shares), as one process would report it; outside the timed step.
      if (c.ddp) l = dist::all_reduce(loss, dist::ReduceOp::kAvg).item();
      sched.step();
      loss_sum += l;
      ++r.steps;
      progress.Update(r.steps, l, Seconds(Clock::now() - start));
    }
    train_s += Seconds(Clock::now() - epoch_start);
    r.final_loss = loss_sum / static_cast<double>(std::max<int64_t>(n, 1));
    r.val_loss = Validate(*model, corpus.valid, c);
    progress.Clear();
    if (!c.quiet && Lead()) {
      std::fprintf(log,
                   "%-14s epoch %d  train loss %.4f  val loss %.4f  lr %.2e  "
                   "(%d steps)\n",
                   r.mode.c_str(), static_cast<int>(epoch + 1), r.final_loss,
                   r.val_loss, sched.get_last_lr()[0], static_cast<int>(n));
      std::fflush(log);
    }
  }
  r.ms_per_step = tools::Median(step_ms);
  r.samples_per_s = static_cast<double>(r.steps * c.batch) / train_s;
  if (ddp) r.buckets = static_cast<int64_t>((*ddp)->buckets().size());
  if (compiled) {
    r.kernels_per_step = fast.stats().kernels_per_step;
    r.interpreted_regions = fast.stats().interpreted_regions;
    if (!c.quiet && Lead()) std::fprintf(log, "%s", fast.explain().c_str());
  }
  if (c.sample > 0 && Lead()) {
    Generator sample_gen(c.seed + 2);
    r.sample = Sample(*model, corpus, c, c.sample, sample_gen);
  }
  return r;
}

llvm::json::Object Json(const RunResult& r, const Config& c) {
  llvm::json::Object o{{"mode", r.mode},
                       {"steps", r.steps},
                       {"ms_per_step", r.ms_per_step},
                       {"final_loss", r.final_loss},
                       {"val_loss", r.val_loss},
                       {"kernels_per_step", r.kernels_per_step},
                       {"interpreted_regions", r.interpreted_regions},
                       {"sample", r.sample}};
  if (c.ddp) examples::AddDdpFields(o, r, c.world_size, c.rank_batch);
  return o;
}

int Main(int argc, char** argv) {
  if (!tools::ParseFlags(argc, argv, kFlags, kOverview)) return 2;
  if (flags::ddp) dist::init();
  Config c{.layers = flags::layers,
           .heads = flags::heads,
           .width = flags::width,
           .context = flags::context,
           .batch = flags::batch_size,
           .epochs = flags::epochs,
           .steps_per_epoch = flags::steps_per_epoch,
           .max_steps = flags::max_steps,
           .val_batches = flags::val_batches,
           .sample = flags::sample,
           .top_k = flags::top_k,
           .lr = flags::lr,
           .dropout = flags::dropout,
           .temperature = flags::temperature,
           .tie = flags::tie_weights,
           .json = flags::json,
           .quiet = flags::quiet,
           .seed = flags::seed,
           .amp = DType::kF32,
           .device = flags::device == DeviceFlag::kCuda
                         ? Device::cuda(flags::ddp ? dist::local_rank() : 0)
                         : Device::cpu(),
           .ddp = flags::ddp,
           .bucket_mb = flags::bucket_mb,
           .world_size = dist::world_size(),
           .rank_batch = flags::batch_size / dist::world_size()};
  std::string error;
  if (flags::amp == "bf16") {
    c.amp = DType::kBF16;
  } else if (flags::amp != "none") {
    error = absl::StrCat("--amp: expected none or bf16, got '",
                         std::string(flags::amp), "'");
  }
  if (c.width % c.heads != 0)
    error = absl::StrFormat("--width %d is not a multiple of --heads %d",
                            c.width, c.heads);
  if (!(c.dropout >= 0.0 && c.dropout < 1.0))
    error =
        absl::StrCat("--dropout: expected a number in [0, 1), got ", c.dropout);
  if (flags::bucket_mb.getNumOccurrences() > 0 && !c.ddp)
    error = "--bucket-mb needs --ddp";
  if (c.batch % c.world_size != 0) {
    error = absl::StrCat(
        "--batch-size ", c.batch, " is not divisible by the world size ",
        c.world_size,
        " (--batch-size is the global batch, split evenly over the ranks)");
  }
  if (!error.empty()) {
    // Every rank finds the same error; one message is enough. (A rank that
    // exits here ends the job: mpirun stops the others.)
    if (Lead())
      std::fprintf(stderr, "char_lm: %s\nrun with --help for usage\n",
                   error.c_str());
    return 2;
  }
  // Ranks given different flags would train different models or settings
  // silently; each stops here instead, naming every rank's flags.
  if (c.ddp) {
    dist::check_same(
        "the training flags",
        absl::StrFormat(
            "--data-dir %s --layers %d --heads %d --width %d --context %d "
            "--batch-size %d --epochs %d --steps-per-epoch %d --max-steps %d "
            "--val-batches %d --lr %.17g --dropout %.17g --tie-weights %d "
            "--seed %d "
            "--mode %d --amp %s --bucket-mb %.17g --device %s",
            std::string(flags::data_dir), c.layers, c.heads, c.width, c.context,
            c.batch, c.epochs, c.steps_per_epoch, c.max_steps, c.val_batches,
            c.lr, c.dropout, c.tie, c.seed,
            static_cast<int>(flags::mode.getValue()), ir::DTypeName(c.amp),
            c.bucket_mb, c.device.is_cuda() ? "cuda" : "cpu"));
  }
  absl::StatusOr<data::CharCorpus> corpus =
      data::LoadFortuneCorpus(flags::data_dir);
  if (!corpus.ok()) {
    std::fprintf(stderr, "char_lm: %s\n",
                 std::string(corpus.status().message()).c_str());
    return 1;
  }
  if (static_cast<int64_t>(corpus->train.size()) <= c.context + 1 ||
      static_cast<int64_t>(corpus->valid.size()) <= c.context * c.batch) {
    std::fprintf(stderr,
                 "char_lm: the corpus is too small for --context %d and "
                 "--batch-size %d\n",
                 static_cast<int>(c.context), static_cast<int>(c.batch));
    return 1;
  }
  // The size flags multiply: check what training them takes against this
  // machine's memory before building anything.
  if (const std::string why = TooBigForMemory(c, corpus->vocab_size());
      !why.empty()) {
    if (Lead()) std::fprintf(stderr, "char_lm: %s\n", why.c_str());
    return 2;
  }
  if (!c.quiet && Lead()) {
    std::fprintf(c.json ? stderr : stdout,
                 "corpus: %zu databases, %d entries, %zu train / %zu "
                 "validation characters, "
                 "vocabulary %d\n",
                 corpus->files.size(), static_cast<int>(corpus->entries),
                 corpus->train.size(), corpus->valid.size(),
                 static_cast<int>(corpus->vocab_size()));
  }
  std::vector<RunResult> rows;
  if (flags::mode != ModeFlag::kCompiled)
    rows.push_back(Run(c, *corpus, false));
  if (flags::mode != ModeFlag::kEager) rows.push_back(Run(c, *corpus, true));
  if (!Lead()) return 0;
  if (c.json) {
    llvm::json::Object out{{"runs", llvm::json::Array{}}};
    for (const RunResult& r : rows)
      out["runs"].getAsArray()->push_back(Json(r, c));
    if (rows.size() == 2)
      out["speedup"] = rows[0].ms_per_step / rows[1].ms_per_step;
    tools::PrintJsonLine(std::move(out));
    return 0;
  }
  std::printf("%-14s %8s %8s %8s %11s %9s %8s\n", "mode", "ms/step", "steps/s",
              "speedup", "train loss", "val loss", "kernels");
  for (const RunResult& r : rows) {
    std::printf("%-14s %8.3f %8.1f %7.2fx %11.4f %9.4f %8d\n", r.mode.c_str(),
                r.ms_per_step, 1e3 / r.ms_per_step,
                rows[0].ms_per_step / r.ms_per_step, r.final_loss, r.val_loss,
                r.kernels_per_step);
  }
  if (c.ddp)
    examples::PrintDdpSummary(rows, c.world_size, c.rank_batch, c.batch);
  if (c.sample > 0)
    std::printf("\nsample (%s):\n%s\n", rows.back().mode.c_str(),
                rows.back().sample.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return stepjit::examples::RunMain("char_lm", Main, argc, argv);
}
