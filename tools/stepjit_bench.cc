// stepjit-bench: eager vs compiled training-step timings for a fixed set of
// MLP and GPT workloads (bench/workloads.h) on the CPU or a CUDA device, and
// the device's copy and fused-elementwise bandwidth, as a table, one JSON
// object per line or CSV.
//
//   stepjit-bench --workload mlp784_adamw_b128 --steps 50 --json
//   stepjit-bench --steps 20 --csv > bench.csv
//   stepjit-bench --device cuda --bandwidth
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <numeric>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/machine_limits.h"
#include "bench/workloads.h"
#include "codegen/cuda/nvrtc.h"
#include "devices/cuda/api.h"
#include "devices/cuda/cublaslt/cublaslt_library.h"
#include "devices/cuda/driver/device.h"
#include "frontend/stepjit.h"
#include "ir/status.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/JSON.h"
#include "runtime/ops.h"
#include "runtime/profiler.h"
#include "runtime/storage.h"
#include "runtime/thread_pool.h"
#include "tools/cli_flags.h"
#include "tools/cli_output.h"

namespace {

using namespace stepjit;  // NOLINT: tool code, mirrors libtorch usage
using Clock = std::chrono::steady_clock;

namespace cl = llvm::cl;

constexpr char kOverview[] =
    "Times training steps (forward, cross-entropy, backward, optimizer) of "
    "MLP\nand GPT workloads, eager and through stepjit::compile, on the CPU or "
    "a "
    "CUDA device.\n";

enum class Amp : uint8_t { kWorkload, kF32, kBF16, kF16, kAll };
enum class DeviceKind : uint8_t { kCpu, kCuda };
enum class OnOff : uint8_t { kOff, kOn };

// A workload's name, checked against bench::Workloads() and CudaWorkloads().
class WorkloadParser : public cl::parser<std::string> {
 public:
  using parser::parser;
  bool parse(cl::Option& option, llvm::StringRef, llvm::StringRef arg,
             std::string& value) {
    value = arg.str();
    if (bench::FindWorkload(value) != nullptr) return false;
    return tools::FlagError(
        option, absl::StrFormat("unknown workload '%s'; known: %s", value,
                                bench::WorkloadNames()));
  }
  llvm::StringRef getValueName() const override { return "NAME"; }
};

cl::OptionCategory kFlags("stepjit-bench options");

namespace flags {
// The --workload help: every workload of both lists with its description.
const std::string& WorkloadHelp() {
  static const std::string* help = [] {
    auto* s = new std::string(
        "run only NAME (default: all of the device's), one of:\n");
    auto add = [&](const std::vector<bench::Workload>& list) {
      for (const bench::Workload& w : list) {
        absl::StrAppend(s, "  ", w.name, "\n      ", w.description, "\n");
      }
    };
    add(bench::Workloads());
    absl::StrAppend(
        s, "and, sized for a GPU (in \"all\" only with --device cuda):\n");
    add(bench::CudaWorkloads());
    s->pop_back();
    return s;
  }();
  return *help;
}
cl::opt<std::string, false, WorkloadParser> workload("workload",
                                                     cl::desc(WorkloadHelp()),
                                                     cl::cat(kFlags));
cl::opt<DeviceKind, false, tools::WordParser<DeviceKind>> device(
    "device",
    cl::desc("where the model, optimizer state and batches live and the\n"
             "step runs. Each CUDA step is followed by a device synchronize\n"
             "before the clock stops."),
    cl::values(clEnumValN(DeviceKind::kCpu, "cpu", "the CPU (default)"),
               clEnumValN(DeviceKind::kCuda, "cuda", "CUDA device 0")),
    cl::init(DeviceKind::kCpu), cl::cat(kFlags));
// A flag taking on or off, on by default.
class OnOffFlag : public cl::opt<OnOff, false, tools::WordParser<OnOff>> {
 public:
  OnOffFlag(llvm::StringRef name, const char* description)
      : cl::opt<OnOff, false, tools::WordParser<OnOff>>(
            name, cl::desc(description),
            cl::values(clEnumValN(OnOff::kOn, "on", "(default)"),
                       clEnumValN(OnOff::kOff, "off", "no")),
            cl::init(OnOff::kOn), cl::cat(kFlags)) {}
  bool on() const { return getValue() == OnOff::kOn; }
};
OnOffFlag cuda_graphs(
    "cuda-graphs",
    "CompileOptions::cuda_graphs, whether compiled CUDA steps\n"
    "replay as one captured CUDA graph");
OnOffFlag multi_region(
    "multi-region",
    "CompileOptions::cuda_multi_region, whether consecutive\n"
    "independent regions (the optimizer updates) launch as one\n"
    "kernel per phase");
cl::opt<long long, false, tools::IntParser<1>> steps(
    "steps",
    cl::desc("timed steps per workload and mode (default 50); with\n"
             "--bandwidth, timed runs of each kernel"),
    cl::init(50), cl::cat(kFlags));
cl::opt<long long, false, tools::IntParser<0>> warmup(
    "warmup",
    cl::desc("untimed steps first (default 5; compiled runs at least\n"
             "enough to warm up and trace)"),
    cl::init(5), cl::cat(kFlags));
cl::opt<Amp, false, tools::WordParser<Amp>> amp(
    "amp",
    cl::desc("the training precision (default: the workload's, f32 except\n"
             "for *_bf16). Eager steps run under amp::Autocast (f16 with an\n"
             "amp::GradScaler); compiled steps compile the plain step with\n"
             "{.amp = P} (f16: the grad-scaler pass)."),
    cl::values(clEnumValN(Amp::kF32, "f32", "plain f32"),
               clEnumValN(Amp::kBF16, "bf16", "bf16 autocast"),
               clEnumValN(Amp::kF16, "f16", "f16 autocast, loss scaling"),
               clEnumValN(Amp::kAll, "all",
                          "f32, bf16 and f16 one after the other")),
    cl::init(Amp::kWorkload), cl::cat(kFlags));
cl::opt<bool> bandwidth(
    "bandwidth",
    cl::desc("instead of the workloads, time on the device: a plain copy\n"
             "(dst.copy_(src)) and the elementwise y = relu(x * a + b),\n"
             "eager (three ops) and compiled (one fused kernel), over\n"
             "--numel f32 elements; GB/s counts the bytes the kernel\n"
             "must read and write (copy and elementwise: 8 per element)\n"
             "over the median time"),
    cl::cat(kFlags));
cl::opt<long long, false, tools::IntParser<1>> numel(
    "numel", cl::desc("elements for --bandwidth (default 67108864, 64M)"),
    cl::init(int64_t{1} << 26), cl::cat(kFlags));
cl::opt<long long, false, tools::IntParser<0>> background_load(
    "background-load",
    cl::desc("N busy processes (each an endless loop, one core's worth of\n"
             "work) run beside the benchmark from start to end, as other\n"
             "work on a shared machine would (default 0, at most 256)"),
    cl::init(0), cl::cat(kFlags));
cl::opt<bool> roofline(
    "roofline",
    cl::desc("also measure this machine's limits (FMA peak, bf16 dot-product\n"
             "peak, triad bandwidth, the GEMM library's rate on 1024^3) and,\n"
             "for each compiled step, where its time goes against them (a\n"
             "second table; CPU only): see Roofline below"),
    cl::cat(kFlags));
cl::opt<bool> json(
    "json",
    cl::desc("one JSON object per line per workload and mode, keys:\n"
             "workload, mode, dtype, device, ms_per_step,\n"
             "kernels_per_step, compile_ms_cold, compile_ms_warm,\n"
             "peak_bytes, background_load; with --roofline, compiled rows\n"
             "also gemm_ms, gemm_gflops, gemm_pct_peak, fused_ms,\n"
             "fused_gb_per_s, fused_pct_triad, other_ms, floor_ms,\n"
             "ratio_to_floor, and a first line with the machine's limits;\n"
             "with --bandwidth per kernel: bandwidth, mode, device, numel,\n"
             "bytes, ms, gb_per_s"),
    cl::cat(kFlags));
cl::opt<bool> csv(
    "csv",
    cl::desc("CSV (RFC 4180): a header row, then one row per workload and\n"
             "mode with the fields of --json; with --roofline the roofline\n"
             "columns are empty in eager rows (the machine's limits are not\n"
             "printed); with --bandwidth the --bandwidth fields"),
    cl::cat(kFlags));
OnOffFlag compile_times(
    "compile-times",
    "whether compiled f32 rows measure compile cold and warm in two\n"
    "child processes (off: both are reported as -1, not measured;\n"
    "a short device lease has no time for them)");
cl::opt<bool> info(
    "info",
    cl::desc("instead of the workloads, print what the device has: on CUDA\n"
             "the GPU, the driver, NVRTC (version and file), the CUDA\n"
             "headers found and cuBLASLt (version and file); on the CPU its\n"
             "threads (with --json: one object, key info)"),
    cl::cat(kFlags));
// Internal: the child process ColdWarmCompileMs starts.
cl::opt<std::string, false, WorkloadParser> compile_probe(
    "compile-probe",
    cl::desc("compile NAME's step once and print \"<compile_ms> "
             "<cached_regions> <native_regions>\""),
    cl::Hidden, cl::cat(kFlags));
cl::extrahelp columns(R"(
Flags take their value as "--flag V" or "--flag=V".

Columns: speedup is against the workload's first eager row (f32 unless
--amp or the workload says otherwise); ms/step is the
median over the timed steps; batches rotate through a
pool of 16 random batches drawn with a fixed seed. Workloads whose sizes
vary (*_tvar_*, *_bvar) time whole turns of the pool (--steps rounded up to
16) and report the mean, after a warmup turn that compiles every size; their
compiled_static row compiles each size on its own (Shapes::kStatic), the
reference the one compilation for all sizes is measured against. kernels/step is, for eager,
the ops the step dispatches (the compiled trace's ops_per_step) and, for
compiled, kernel launches per replay. compile cold and warm are measured in
two fresh child processes sharing a new, empty kernel cache directory: cold
is the first (every kernel compiled), warm the second (every kernel loaded
from the disk cache). Each is stats().compile_ms: tracing the step (one
eager step), the pass pipeline and code generation. replayed is, for compiled rows, the share of
all calls (warmup included) that replayed compiled code and traces the
traces made (more than one where shapes or paths vary). check us is, for
compiled rows, the mean
cost per call of the recording check (the step's host code run shape-only
and compared with the compiled record, CompileOptions::verify, on every call
by default), ns/op that per op the step dispatches, and check% its share of
ms/step. peak is the tensor
memory allocated above the steady state during one step (on CUDA: the
caching allocator's allocated bytes, as torch.cuda.max_memory_allocated). A
device that cannot be used (no CUDA runtime, driver or GPU) is an
error naming the reason, before any workload runs.

Roofline (--roofline): after the timed steps, --steps more steps of each
compiled workload run under the replay profiler, which times every kernel
and counts its work: a GEMM's or convolution's FLOPs (2 per multiply-add;
convolutions and their gradients count as GEMMs, and their FLOPs are in the
floor at the GEMM rate) and every kernel's bytes (each operand and result
once, the least it must move). GEMM ms and
GFLOP/s are the step's GEMMs, % peak against the FMA peak (bf16/f16 steps:
the bf16 dot-product peak); fused ms and GB/s the generated regions, %
triad against the triad bandwidth; other ms the remaining kernels. The
floor is what the step cannot go below on this machine: its GEMM FLOPs at
the GEMM library's measured rate plus one streaming pass over the
optimizer state at the triad bandwidth (AdamW reads parameter, gradient
and both moments and writes three: 28 bytes per parameter, SGD with
momentum 20, plus 2 for the bf16/f16 weight copy); x floor is ms/step
over it.
)");
}  // namespace flags

using bench::Workload;
using bench::WorkloadRun;
using tools::Median;
using tools::PrintJsonLine;

// The parsed command line.
struct Flags {
  std::string workload;       // empty: all
  std::string compile_probe;  // internal: time one compile and print it
  std::vector<DType> amp;     // empty: the workload's own precision
  Device device = Device::cpu();
  int64_t steps = 50;
  int64_t warmup = 5;
  int64_t numel = int64_t{1} << 26;
  bool cuda_graphs = true;
  bool multi_region = true;
  bool bandwidth = false;
  bool json = false;
  bool csv = false;
  bool roofline = false;
  bool compile_times = true;
  bool info = false;
  int64_t background_load = 0;
};

Flags FromCommandLine() {
  Flags f{.workload = flags::workload,
          .compile_probe = flags::compile_probe,
          .amp = {},
          .device = flags::device == DeviceKind::kCuda ? Device::cuda()
                                                       : Device::cpu(),
          .steps = flags::steps,
          .warmup = flags::warmup,
          .numel = flags::numel,
          .cuda_graphs = flags::cuda_graphs.on(),
          .multi_region = flags::multi_region.on(),
          .bandwidth = flags::bandwidth,
          .json = flags::json,
          .csv = flags::csv,
          .roofline = flags::roofline,
          .compile_times = flags::compile_times.on(),
          .info = flags::info,
          .background_load = flags::background_load};
  switch (flags::amp) {
    case Amp::kWorkload:
      break;
    case Amp::kF32:
      f.amp = {DType::kF32};
      break;
    case Amp::kBF16:
      f.amp = {DType::kBF16};
      break;
    case Amp::kF16:
      f.amp = {DType::kF16};
      break;
    case Amp::kAll:
      f.amp = {DType::kF32, DType::kBF16, DType::kF16};
      break;
  }
  return f;
}

// The columns of --csv: the keys Json(Result) writes, in its order.
const std::vector<std::string> kResultColumns = {
    "workload",        "mode",
    "dtype",           "device",
    "ms_per_step",     "kernels_per_step",
    "compile_ms_cold", "compile_ms_warm",
    "peak_bytes",      "background_load",
    "check_us",        "check_ns_per_op",
    "check_pct",       "replay_pct",
    "traces",          "first_loss",
    "last_loss",       "checks",
    "check_failures"};
const std::vector<std::string> kRooflineColumns = {
    "gemm_ms",  "gemm_gflops",    "gemm_pct_peak",
    "fused_ms", "fused_gb_per_s", "fused_pct_triad",
    "other_ms", "floor_ms",       "ratio_to_floor"};
const std::vector<std::string> kBandwidthColumns = {
    "bandwidth", "mode", "device", "numel", "bytes", "ms", "gb_per_s"};

std::vector<std::string> ResultColumns(bool roofline) {
  std::vector<std::string> columns = kResultColumns;
  if (roofline)
    columns.insert(columns.end(), kRooflineColumns.begin(),
                   kRooflineColumns.end());
  return columns;
}

struct Result {
  std::string workload;
  std::string mode;
  std::string dtype = "f32";
  std::string device = "cpu";
  double ms_per_step = 0;
  int64_t kernels_per_step = 0;
  double compile_ms_cold = 0;
  double compile_ms_warm = 0;
  int64_t peak_bytes = 0;
  int64_t ops_per_step = 0;  // compiled only: fills eager's kernels_per_step
  // Compiled only: the per-call recording check (CompileOptions::verify),
  // its mean cost per call and per recorded op, and its share of ms_per_step.
  double check_us = 0;
  // Compiled only: the share of all calls (warmup included) that replayed,
  // and the traces made.
  double replay_pct = 0;
  int64_t traces = 0;
  // The loss of the run's first call (warmup included) and of its last
  // timed step: a benchmarked step that trains wrong shows here.
  double first_loss = 0, last_loss = 0;
  // Compiled only: accuracy-checker runs (STEPJIT_CHECK=N checks the first
  // N replays against eager) and how many found a divergence.
  int64_t checks = 0, check_failures = 0;
  double CheckNsPerOp() const {
    return ops_per_step > 0 ? 1e3 * check_us / static_cast<double>(ops_per_step)
                            : 0;
  }
  double CheckPct() const {
    return ms_per_step > 0 ? 0.1 * check_us / ms_per_step : 0;
  }
  // --roofline, compiled only: per step, from the profiled steps.
  bool roofline = false;
  double gemm_ms = 0, gemm_flops = 0, fused_ms = 0, fused_bytes = 0,
         other_ms = 0;
  double floor_ms = 0;
  double gemm_peak_gflops = 0;  // the peak % peak is against
  double GemmGflops() const {
    return gemm_ms > 0 ? gemm_flops / (gemm_ms * 1e6) : 0;
  }
  double FusedGbPerS() const {
    return fused_ms > 0 ? fused_bytes / (fused_ms * 1e6) : 0;
  }
};

// The machine's limits when --roofline asks for them (measured once).
std::optional<bench::MachineLimits> g_limits;

// Bytes of one streaming pass over the optimizer state (see Roofline).
double OptimizerPassBytes(const Workload& w, int64_t params, DType amp) {
  const double per_param = (w.opt == bench::OptKind::kAdamW ? 28.0 : 20.0) +
                           (amp == DType::kF32 ? 0.0 : 2.0);
  return per_param * static_cast<double>(params);
}

// Runs `steps` more steps under the replay profiler and fills r's roofline
// columns.
void Roofline(WorkloadRun& run, const Workload& w, DType amp, int64_t steps,
              const bench::MachineLimits& m, Result& r) {
  const bool was_on = runtime::ProfilingEnabled();
  runtime::EnableProfiling(true);
  runtime::ResetProfile();
  for (int64_t i = 0; i < steps; ++i) run.Step();
  runtime::EnableProfiling(was_on);
  const double n = static_cast<double>(steps);
  for (const runtime::ProfileEntry& e : runtime::ProfileSnapshot()) {
    switch (e.kind) {
      case runtime::ProfileKind::kGemm:
        r.gemm_ms += e.total_ms / n;
        r.gemm_flops += e.flops / n;
        break;
      case runtime::ProfileKind::kRegion:
        r.fused_ms += e.total_ms / n;
        r.fused_bytes += e.bytes / n;
        break;
      case runtime::ProfileKind::kOp:
        r.other_ms += e.total_ms / n;
        break;
    }
  }
  if (!was_on) runtime::ResetProfile();
  r.roofline = true;
  r.gemm_peak_gflops = m.PeakGflops(amp);
  r.floor_ms = r.gemm_flops / (m.GemmGflops(amp) * 1e6) +
               OptimizerPassBytes(w, run.num_parameters(), amp) /
                   (m.triad_gb_per_s * 1e6);
}

double Ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

const char* DeviceFlag(Device d) { return d.is_cpu() ? "cpu" : "cuda"; }

// Compiles the workload's step in this process and prints
// "<compile_ms> <cached_regions> <native_regions>".
int CompileProbe(const Workload& w, const Flags& f) {
  WorkloadRun run(w, CompileOptions{.cuda_graphs = f.cuda_graphs, .cuda_multi_region = f.multi_region},
                  f.device);
  for (int64_t i = 0; i < run.StepsToWarm(); ++i) run.Step();
  bench::Synchronize(f.device);
  const CompileStats s = run.stats();
  std::printf("%.3f %d %d\n", s.compile_ms, s.cached_regions, s.native_regions);
  return 0;
}

// Cold and warm compile times from two child processes sharing a fresh
// cache directory; -1 when a child failed.
std::pair<double, double> ColdWarmCompileMs(const Workload& w, const Flags& f,
                                            const char* self) {
  char dir_template[] = "/tmp/stepjit-bench-cache-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (dir == nullptr) return {-1, -1};
  auto probe = [&]() -> double {
    const std::string cmd =
        absl::StrFormat("STEPJIT_CACHE_DIR='%s' '%s' --device %s --cuda-graphs %s "
                        "--multi-region %s --compile-probe %s",
                        dir, self, DeviceFlag(f.device), f.cuda_graphs ? "on" : "off",
                        f.multi_region ? "on" : "off", w.name);
    FILE* p = popen(cmd.c_str(), "r");
    if (p == nullptr) return -1;
    double ms = -1;
    int cached = 0, native = 0;
    if (std::fscanf(p, "%lf %d %d", &ms, &cached, &native) != 3) ms = -1;
    pclose(p);
    return ms;
  };
  const double cold = probe(), warm = probe();
  std::filesystem::remove_all(dir);
  return {cold, warm};
}

// `static_shapes` (workloads whose sizes vary): compiled with
// Shapes::kStatic, each size its own eagerly traced specialization.
Result Run(const Workload& w, const Flags& f, bool compiled, DType amp,
           const char* self, bool static_shapes = false) {
  const bool varies = !w.sizes.empty();
  const CompileOptions copts{
      .mode = compiled ? Mode::kCompiled : Mode::kEager,
      .max_traces = static_shapes ? 2 * WorkloadRun::kPoolSize : 8,
      .shapes = static_shapes ? Shapes::kStatic : Shapes::kDynamic,
      .amp = amp,
      .cuda_graphs = f.cuda_graphs,
      .cuda_multi_region = f.multi_region};
  WorkloadRun run(w, copts, f.device);
  // Compiled: warmup_steps eager calls, then one traced call, then a replay;
  // where sizes vary, a whole turn of the pool besides, so that every size
  // is compiled before the timing.
  int64_t warmup =
      compiled ? std::max<int64_t>(f.warmup, run.StepsToWarm()) : f.warmup;
  if (compiled && varies) warmup += WorkloadRun::kPoolSize;
  Tensor first_loss;
  for (int64_t i = 0; i < warmup; ++i) {
    Tensor loss = run.Step();
    if (i == 0) first_loss = loss;
  }
  bench::Synchronize(f.device);

  Result r{.workload = w.name,
           .mode = static_shapes ? "compiled_static"
                   : compiled    ? "compiled"
                                 : "eager",
           .dtype = std::string(ir::DTypeName(amp)),
           .device = DeviceFlag(f.device)};
  // Where sizes vary, whole turns of the pool and their mean: the median of
  // steps of different sizes would be one size's time.
  int64_t steps = f.steps;
  if (varies)
    steps = (steps + WorkloadRun::kPoolSize - 1) / WorkloadRun::kPoolSize *
            WorkloadRun::kPoolSize;
  std::vector<double> ms;
  ms.reserve(steps);
  Tensor last_loss;
  for (int64_t i = 0; i < steps; ++i) {
    const auto t0 = Clock::now();
    last_loss = run.Step();
    bench::Synchronize(f.device);
    ms.push_back(Ms(Clock::now() - t0));
    if (i == 0 && !first_loss.defined()) first_loss = last_loss;
  }
  // Read after the clock stopped (a host read synchronizes).
  r.first_loss = first_loss.to(Device::cpu()).item();
  r.last_loss = last_loss.to(Device::cpu()).item();
  first_loss = last_loss = Tensor();
  r.ms_per_step = varies ? std::accumulate(ms.begin(), ms.end(), 0.0) /
                               static_cast<double>(ms.size())
                         : Median(ms);

  // Everything the step returns is dropped first, so the peak measures only
  // the transient buffers of one step above the parameters and state.
  if (f.device.is_cpu()) {
    const int64_t steady = GetCpuMemoryStats().allocated_bytes;
    ResetCpuPeakMemory();
    run.Step();
    r.peak_bytes = GetCpuMemoryStats().peak_bytes - steady;
  } else {
    const auto steady = static_cast<int64_t>(cuda::memory_stats().allocated_bytes);
    cuda::reset_peak_memory_stats();
    run.Step();
    bench::Synchronize(f.device);
    r.peak_bytes = static_cast<int64_t>(cuda::memory_stats().peak_allocated_bytes) - steady;
  }

  if (compiled && g_limits) Roofline(run, w, amp, f.steps, *g_limits, r);
  if (compiled) {
    const CompileStats s = run.stats();
    r.kernels_per_step = s.kernels_per_step;
    r.ops_per_step = s.ops_per_step;
    if (s.verifications > 0)
      r.check_us = 1e3 * s.verify_ms / static_cast<double>(s.verifications);
    if (s.calls > 0)
      r.replay_pct = 100.0 * static_cast<double>(s.replays) / s.calls;
    r.traces = s.traces;
    r.checks = s.checks;
    r.check_failures = s.check_failures;
    if (!f.compile_times) {
      r.compile_ms_cold = r.compile_ms_warm = -1;
    } else if (amp == DType::kF32 && !static_shapes) {
      std::tie(r.compile_ms_cold, r.compile_ms_warm) = ColdWarmCompileMs(w, f, self);
    }
  }
  return r;
}

// --background-load: N child processes that spin until this process ends
// (they also die with it: PR_SET_PDEATHSIG), each competing for a core.
class BackgroundLoad {
 public:
  explicit BackgroundLoad(int64_t n) {
    const pid_t parent = getpid();
    for (int64_t i = 0; i < n; ++i) {
      const pid_t pid = fork();
      SJ_REQUIRE(pid >= 0,
                 "--background-load: fork failed: ", std::strerror(errno));
      if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(0);  // the parent is gone already
        volatile uint64_t spin = 0;
        while (true) spin = spin + 1;
      }
      pids_.push_back(pid);
    }
  }
  ~BackgroundLoad() {
    for (pid_t pid : pids_) kill(pid, SIGKILL);
    for (pid_t pid : pids_) waitpid(pid, nullptr, 0);
  }
  BackgroundLoad(const BackgroundLoad&) = delete;
  BackgroundLoad& operator=(const BackgroundLoad&) = delete;

 private:
  std::vector<pid_t> pids_;
};

int64_t g_background_load = 0;  // reported with each result

llvm::json::Value Json(const Result& r) {
  llvm::json::Object o{{"workload", r.workload},
                       {"mode", r.mode},
                       {"dtype", r.dtype},
                       {"device", r.device},
                       {"ms_per_step", r.ms_per_step},
                       {"kernels_per_step", r.kernels_per_step},
                       {"compile_ms_cold", r.compile_ms_cold},
                       {"compile_ms_warm", r.compile_ms_warm},
                       {"peak_bytes", r.peak_bytes},
                       {"background_load", g_background_load},
                       {"check_us", r.check_us},
                       {"check_ns_per_op", r.CheckNsPerOp()},
                       {"check_pct", r.CheckPct()},
                       {"replay_pct", r.replay_pct},
                       {"traces", r.traces},
                       {"first_loss", r.first_loss},
                       {"last_loss", r.last_loss},
                       {"checks", r.checks},
                       {"check_failures", r.check_failures}};
  if (r.roofline) {
    o["gemm_ms"] = r.gemm_ms;
    o["gemm_gflops"] = r.GemmGflops();
    o["gemm_pct_peak"] = 100.0 * r.GemmGflops() / r.gemm_peak_gflops;
    o["fused_ms"] = r.fused_ms;
    o["fused_gb_per_s"] = r.FusedGbPerS();
    o["fused_pct_triad"] = 100.0 * r.FusedGbPerS() / g_limits->triad_gb_per_s;
    o["other_ms"] = r.other_ms;
    o["floor_ms"] = r.floor_ms;
    o["ratio_to_floor"] = r.ms_per_step / r.floor_ms;
  }
  return o;
}

void PrintRooflineTable(const std::vector<Result>& rows) {
  std::printf("\nroofline of the compiled steps: %s\n",
              g_limits->ToString().c_str());
  std::printf("%-26s %-5s %9s %8s %9s %7s %9s %8s %7s %9s %9s %8s\n",
              "workload", "dtype", "ms/step", "GEMM ms", "GFLOP/s", "% peak",
              "fused ms", "GB/s", "% triad", "other ms", "floor ms", "x floor");
  for (const Result& r : rows) {
    std::printf(
        "%-26s %-5s %9.3f %8.3f %9.1f %6.1f%% %9.3f %8.2f %6.1f%% %9.3f %9.3f "
        "%7.2fx\n",
        r.workload.c_str(), r.dtype.c_str(), r.ms_per_step, r.gemm_ms,
        r.GemmGflops(), 100.0 * r.GemmGflops() / r.gemm_peak_gflops, r.fused_ms,
        r.FusedGbPerS(), 100.0 * r.FusedGbPerS() / g_limits->triad_gb_per_s,
        r.other_ms, r.floor_ms, r.ms_per_step / r.floor_ms);
  }
}

// One --bandwidth measurement: `bytes` moved per run of `fn` on `device`,
// over the median of `runs` synchronized runs after two warm-up runs.
struct Bandwidth {
  std::string kernel;
  std::string mode;
  int64_t bytes = 0;
  double ms = 0;
  double gb_per_s() const { return bytes / (ms * 1e6); }
};

Bandwidth TimeBandwidth(std::string kernel, std::string mode, int64_t bytes,
                        const std::function<void()>& fn, Device device, int64_t runs) {
  for (int i = 0; i < 2; ++i) fn();
  bench::Synchronize(device);
  std::vector<double> ms;
  ms.reserve(runs);
  for (int64_t i = 0; i < runs; ++i) {
    const auto t0 = Clock::now();
    fn();
    bench::Synchronize(device);
    ms.push_back(Ms(Clock::now() - t0));
  }
  return {std::move(kernel), std::move(mode), bytes, Median(ms)};
}

// Copy, and relu(x * a + b) eager and compiled, on f.device. Each counts one
// f32 read and one f32 write per element: what a single pass must move.
int RunBandwidth(const Flags& f) {
  const int64_t n = f.numel;
  const int64_t bytes = 2 * n * static_cast<int64_t>(sizeof(float));
  Generator gen(1);
  // Random data: zeros can run faster than real values.
  const Tensor x = randn({n}, {}, &gen).to(f.device);
  Tensor dst = empty({n}, {.device = f.device});
  auto elementwise = [](const Tensor& t) { return relu(t * 1.5 + 0.25); };
  auto fused =
      compile(elementwise, CompileOptions{.name = "bandwidth", .cuda_graphs = f.cuda_graphs});
  std::vector<Bandwidth> rows;
  rows.push_back(TimeBandwidth("copy", "eager", bytes, [&] { dst.copy_(x); }, f.device, f.steps));
  rows.push_back(TimeBandwidth("relu_axpb", "eager", bytes, [&] { dst = elementwise(x); },
                               f.device, f.steps));
  for (int64_t i = 0; i < CompileOptions{}.warmup_steps + 1; ++i) dst = fused(x);
  rows.push_back(TimeBandwidth("relu_axpb", "compiled", bytes, [&] { dst = fused(x); },
                               f.device, f.steps));
  const int kernels = fused.stats().kernels_per_step;
  if (f.csv) tools::PrintCsvLine(kBandwidthColumns);
  if (!f.json && !f.csv) {
    std::printf("%-10s %-9s %-6s %12s %10s %9s\n", "bandwidth", "mode", "device", "MB moved",
                "ms", "GB/s");
  }
  for (const Bandwidth& b : rows) {
    const llvm::json::Object row{{"bandwidth", b.kernel},
                                 {"mode", b.mode},
                                 {"device", DeviceFlag(f.device)},
                                 {"numel", n},
                                 {"bytes", b.bytes},
                                 {"ms", b.ms},
                                 {"gb_per_s", b.gb_per_s()}};
    if (f.json) {
      PrintJsonLine(llvm::json::Object(row));
    } else if (f.csv) {
      tools::PrintCsvRow(row, kBandwidthColumns);
    } else {
      std::printf("%-10s %-9s %-6s %12.1f %10.3f %9.2f\n", b.kernel.c_str(), b.mode.c_str(),
                  DeviceFlag(f.device), b.bytes / 1e6, b.ms, b.gb_per_s());
    }
  }
  if (!f.json && !f.csv)
    std::printf("compiled relu_axpb: %d kernel(s) per call\n", kernels);
  return 0;
}

// Moves one tensor to the device: a device that cannot be used fails here,
// with the runtime's reason, before any workload is built.
std::string CheckDevice(Device device) {
  try {
    Tensor probe = ones({4}).to(device);
    bench::Synchronize(device);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// --info: what the device has, before anything runs on it (a device that
// cannot be used still prints, with the reason).
int PrintInfo(const Flags& f) {
  std::vector<std::pair<std::string, std::string>> rows;
  if (f.device.is_cpu()) {
    rows.push_back({"device", "cpu"});
    rows.push_back({"threads", absl::StrCat(runtime::NumThreads())});
  } else {
    const runtime::cuda::CudaAvailability& a = runtime::cuda::Availability();
    rows.push_back({"device", cuda::is_available()
                                  ? cuda::device_name()
                                  : cuda::unavailable_reason()});
    rows.push_back({"driver", a.driver_version > 0
                                  ? absl::StrCat(a.driver_version / 1000, ".",
                                                 a.driver_version % 1000 / 10)
                                  : "none"});
    rows.push_back(
        {"nvrtc", absl::StrCat(codegen::cuda::NvrtcCompilerId(), " at ",
                               codegen::cuda::NvrtcAvailable()
                                   ? codegen::cuda::NvrtcLibraryPath()
                                   : codegen::cuda::NvrtcUnavailableReason())});
    const codegen::cuda::CudaHeaders& headers =
        codegen::cuda::FoundCudaHeaders();
    rows.push_back(
        {"cuda_headers", headers.dir.empty() ? headers.error : headers.dir});
    const absl::StatusOr<const runtime::cuda::CublasLtLibrary*> lt =
        runtime::cuda::LoadCublasLt();
    rows.push_back(
        {"cublaslt", lt.ok() ? absl::StrCat((*lt)->version, " at ", (*lt)->path)
                             : std::string(lt.status().message())});
  }
  if (f.json) {
    llvm::json::Object o{{"info", DeviceFlag(f.device)}};
    for (const auto& [key, value] : rows) o[key] = value;
    PrintJsonLine(std::move(o));
  } else {
    for (const auto& [key, value] : rows)
      std::printf("%-13s %s\n", (key + ":").c_str(), value.c_str());
  }
  return 0;
}

void PrintHeader() {
  std::printf("%-26s %-15s %-5s %9s %8s %13s %12s %12s %9s %9s %8s %7s %9s %7s\n",
              "workload", "mode", "dtype", "ms/step", "speedup", "kernels/step",
              "compile cold", "compile warm", "peak MB", "check us", "ns/op",
              "check%", "replayed", "traces");
}

// A compile time for the table: "-" where it was not measured (< 0).
std::string CompileCell(double ms) {
  return ms < 0 ? "-" : absl::StrFormat("%.1fms", ms);
}

void PrintRow(const Result& r, double eager_ms) {
  std::printf(
      "%-26s %-15s %-5s %9.3f %7.2fx %13d %12s %12s %9.2f %9.1f %8.0f "
      "%6.2f%% %8.1f%% %7d\n",
      r.workload.c_str(), r.mode.c_str(), r.dtype.c_str(), r.ms_per_step,
      eager_ms / r.ms_per_step, static_cast<int>(r.kernels_per_step),
      CompileCell(r.compile_ms_cold).c_str(),
      CompileCell(r.compile_ms_warm).c_str(), r.peak_bytes / 1048576.0,
      r.check_us, r.CheckNsPerOp(), r.CheckPct(), r.replay_pct,
      static_cast<int>(r.traces));
}

int Main(int argc, char** argv) {
  if (!tools::ParseFlags(argc, argv, kFlags, kOverview)) return 2;
  const Flags f = FromCommandLine();
  if (f.json && f.csv) {
    std::fprintf(stderr,
                 "stepjit-bench: --csv: expected one output format, got both "
                 "--json and --csv\n");
    return 2;
  }
  if (f.info) return PrintInfo(f);
  if (std::string error = CheckDevice(f.device); !error.empty()) {
    std::fprintf(stderr, "stepjit-bench: --device %s: %s\n", DeviceFlag(f.device),
                 error.c_str());
    return 1;
  }
  if (!f.compile_probe.empty()) {
    return CompileProbe(*bench::FindWorkload(f.compile_probe), f);
  }
  if (f.device.is_cuda()) {
    // What the kernels will be compiled with, for the logs of a device run
    // (bench/gpu/check.sh keeps stderr in check.log).
    const codegen::cuda::CudaHeaders& headers =
        codegen::cuda::FoundCudaHeaders();
    std::fprintf(
        stderr, "stepjit-bench: %s at %s; CUDA headers: %s\n",
        codegen::cuda::NvrtcCompilerId().c_str(),
        codegen::cuda::NvrtcAvailable()
            ? codegen::cuda::NvrtcLibraryPath().c_str()
            : codegen::cuda::NvrtcUnavailableReason().c_str(),
        headers.dir.empty() ? headers.error.c_str() : headers.dir.c_str());
  }
  if (f.background_load > 256) {
    std::fprintf(stderr,
                 "stepjit-bench: --background-load: expected at most 256 busy "
                 "processes, got %lld\n",
                 static_cast<long long>(f.background_load));
    return 2;
  }
  g_background_load = f.background_load;
  const BackgroundLoad load(f.background_load);
  if (!f.json && !f.csv && f.background_load > 0) {
    std::printf(
        "background load: %lld busy process(es) beside every measurement\n",
        static_cast<long long>(f.background_load));
  }
  if (f.bandwidth) return RunBandwidth(f);
  if (f.roofline) {
    if (!f.device.is_cpu()) {
      std::fprintf(
          stderr,
          "stepjit-bench: --roofline: expected --device cpu (it measures "
          "this CPU's limits), got --device %s\n",
          DeviceFlag(f.device));
      return 2;
    }
    g_limits = bench::MeasureMachineLimits(runtime::NumThreads());
    if (f.json) {
      PrintJsonLine(
          llvm::json::Object{{"machine", "cpu"},
                             {"threads", g_limits->threads},
                             {"fma_f32_gflops", g_limits->fma_f32_gflops},
                             {"dp_bf16_gflops", g_limits->dp_bf16_gflops},
                             {"triad_gb_per_s", g_limits->triad_gb_per_s},
                             {"gemm_n", g_limits->gemm_n},
                             {"gemm_f32_gflops", g_limits->gemm_f32_gflops},
                             {"gemm_bf16_gflops", g_limits->gemm_bf16_gflops}});
    }
  }
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::vector<const Workload*> selected;
  if (!f.workload.empty()) {
    selected.push_back(bench::FindWorkload(f.workload));
  } else {
    for (const Workload& w : bench::Workloads()) selected.push_back(&w);
    if (f.device.is_cuda()) {
      for (const Workload& w : bench::CudaWorkloads()) selected.push_back(&w);
    }
  }
  if (f.csv) {
    tools::PrintCsvLine(ResultColumns(f.roofline));
  } else if (!f.json) {
    PrintHeader();
  }
  std::vector<Result> roofline_rows;
  for (const Workload* wp : selected) {
    const Workload& w = *wp;
    double f32_eager_ms = 0;
    const std::vector<DType> amps = f.amp.empty() ? std::vector<DType>{w.amp} : f.amp;
    for (DType amp : amps) {
      Result eager = Run(w, f, false, amp, self.c_str());
      Result compiled = Run(w, f, true, amp, self.c_str());
      eager.kernels_per_step = compiled.ops_per_step;
      if (f32_eager_ms == 0) f32_eager_ms = eager.ms_per_step;
      std::vector<const Result*> rows = {&eager, &compiled};
      // Sizes that vary: the same sizes, each compiled on its own, beside.
      std::optional<Result> fixed;
      if (!w.sizes.empty()) {
        fixed = Run(w, f, true, amp, self.c_str(), /*static_shapes=*/true);
        rows.push_back(&*fixed);
      }
      for (const Result* r : rows) {
        if (f.json) {
          PrintJsonLine(Json(*r));
        } else if (f.csv) {
          tools::PrintCsvRow(*Json(*r).getAsObject(),
                             ResultColumns(f.roofline));
        } else {
          PrintRow(*r, f32_eager_ms);
        }
        std::fflush(stdout);
      }
      if (compiled.roofline) roofline_rows.push_back(compiled);
    }
  }
  if (!f.json && !f.csv && !roofline_rows.empty())
    PrintRooflineTable(roofline_rows);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stepjit-bench: error: %s\n", e.what());
    return 1;
  }
}
