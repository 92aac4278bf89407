// stepjit-bench: eager vs compiled training-step timings for a fixed set of
// MLP workloads on the CPU or a CUDA device, and the device's copy and
// fused-elementwise bandwidth, as a table or one JSON object per line
// (issue 5, item 5; issue 7, point 7).
//
//   stepjit-bench --workload mlp784_adamw_b128 --steps 50 --json
//   stepjit-bench --device cuda --bandwidth
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <tuple>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/workloads.h"
#include "frontend/stepjit.h"
#include "ir/status.h"
#include "runtime/cuda/api.h"
#include "runtime/ops.h"
#include "runtime/storage.h"

namespace {

using namespace stepjit;  // NOLINT: tool code, mirrors libtorch usage
using Clock = std::chrono::steady_clock;

constexpr char kUsage[] =
    R"(usage: stepjit-bench [flags]
Times training steps (forward, cross-entropy, backward, optimizer) of MLP
workloads, eager and through stepjit::compile, on the CPU or a CUDA device.
  --workload NAME   run only NAME (default: all of the device's), one of:
                      mlp784_adamw_b128     784-512-512-10, batch 128, AdamW lr 1e-3
                      mlp784_sgd_b128       the same with SGD lr 0.01 momentum 0.9
                      tiny_mlp_adamw_b32    64-64-64-64-10, batch 32, AdamW
                      mlp1024x3_adamw_b512  3x Linear(1024,1024)+ReLU, Linear(1024,10),
                                            batch 512, AdamW
                    and, sized for a GPU (in "all" only with --device cuda):
                      mlp4096x4_adamw_b4096_bf16  4x Linear(4096,4096)+ReLU,
                                            Linear(4096,10), batch 4096, AdamW,
                                            bf16 autocast
  --device D        cpu (default) or cuda: where the model, optimizer state
                    and batches live and the step runs. Each CUDA step is
                    followed by a device synchronize before the clock stops.
  --cuda-graphs B   on (default) or off: CompileOptions::cuda_graphs, whether
                    compiled CUDA steps replay as one captured CUDA graph
  --multi-region B  on (default) or off: CompileOptions::cuda_multi_region,
                    whether consecutive independent regions (the optimizer
                    updates) launch as one kernel per phase
  --steps N         timed steps per workload and mode (default 50); with
                    --bandwidth, timed runs of each kernel
  --warmup N        untimed steps first (default 5; compiled runs at least
                    enough to warm up and trace)
  --amp P           f32, bf16, f16 or all: the training precision (default:
                    the workload's, f32 except for *_bf16).
                    Eager steps run under amp::Autocast (f16 with an
                    amp::GradScaler); compiled steps compile the plain step
                    with {.amp = P} (f16: the grad-scaler pass). "all" runs
                    f32, bf16 and f16 one after the other.
  --bandwidth       instead of the workloads, time on the device: a plain copy
                    (dst.copy_(src)) and the elementwise y = relu(x * a + b),
                    eager (three ops) and compiled (one fused kernel), over
                    --numel f32 elements; GB/s counts the bytes the kernel
                    must read and write (copy and elementwise: 8 per element)
                    over the median time
  --numel N         elements for --bandwidth (default 67108864, 64M)
  --json            one JSON object per line per workload and mode, keys:
                    workload, mode, dtype, device, ms_per_step,
                    kernels_per_step, compile_ms_cold, compile_ms_warm,
                    peak_bytes; with --bandwidth per kernel:
                    bandwidth, mode, device, numel, bytes, ms, gb_per_s
  --help            this text
Flags take their value as "--flag V" or "--flag=V".

Columns: speedup is against the workload's first eager row (f32 unless
--amp or the workload says otherwise); ms/step is the
median over the timed steps; batches rotate through a
pool of 16 random batches drawn with a fixed seed. kernels/step is, for eager,
the ops the step dispatches (the compiled trace's ops_per_step) and, for
compiled, kernel launches per replay. compile cold and warm are measured in
two fresh child processes sharing a new, empty kernel cache directory: cold
is the first (every kernel compiled), warm the second (every kernel loaded
from the disk cache). Each is stats().compile_ms: tracing the step (one
eager step), the pass pipeline and code generation. peak is the tensor
memory allocated above the steady state during one step (on CUDA: the
caching allocator's allocated bytes, as torch.cuda.max_memory_allocated). A device that cannot be used (no CUDA runtime, driver or GPU) is an
error naming the reason, before any workload runs.
)";

using bench::Workload;
using bench::WorkloadRun;

struct Flags {
  std::string workload;  // empty: all
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
};

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
};

// Returns an error message, or "" when all flags parsed.
std::string ParseFlags(int argc, char** argv, Flags& f, bool& help) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::optional<std::string> inline_value;
    if (const size_t eq = arg.find('='); eq != std::string::npos) {
      inline_value = arg.substr(eq + 1);
      arg.resize(eq);
    }
    if (arg == "--help" || arg == "-h" || arg == "--json" || arg == "--bandwidth") {
      if (inline_value) return arg + " takes no value";
      help |= arg == "--help" || arg == "-h";
      f.json |= arg == "--json";
      f.bandwidth |= arg == "--bandwidth";
      continue;
    }
    if (arg != "--workload" && arg != "--steps" && arg != "--warmup" &&
        arg != "--compile-probe" && arg != "--amp" && arg != "--device" &&
        arg != "--numel" && arg != "--cuda-graphs" && arg != "--multi-region") {
      return "unknown flag '" + std::string(argv[i]) + "'";
    }
    std::optional<std::string> v = inline_value;
    if (!v && i + 1 < argc) v = argv[++i];
    if (!v) return arg + " needs a value";
    if (arg == "--workload" || arg == "--compile-probe") {
      if (bench::FindWorkload(*v) == nullptr) {
        return absl::StrFormat("%s: unknown workload '%s'; known: %s", arg, *v,
                               bench::WorkloadNames());
      }
      (arg == "--workload" ? f.workload : f.compile_probe) = *v;
      continue;
    }
    if (arg == "--amp") {
      if (*v == "f32") f.amp = {DType::kF32};
      else if (*v == "bf16") f.amp = {DType::kBF16};
      else if (*v == "f16") f.amp = {DType::kF16};
      else if (*v == "all") f.amp = {DType::kF32, DType::kBF16, DType::kF16};
      else return "--amp: expected f32, bf16, f16 or all, got '" + *v + "'";
      continue;
    }
    if (arg == "--device") {
      if (*v == "cpu") f.device = Device::cpu();
      else if (*v == "cuda") f.device = Device::cuda();
      else return "--device: expected cpu or cuda, got '" + *v + "'";
      continue;
    }
    if (arg == "--cuda-graphs" || arg == "--multi-region") {
      if (*v != "on" && *v != "off") return arg + ": expected on or off, got '" + *v + "'";
      (arg == "--cuda-graphs" ? f.cuda_graphs : f.multi_region) = *v == "on";
      continue;
    }
    int64_t& out = arg == "--steps" ? f.steps : arg == "--numel" ? f.numel : f.warmup;
    const int64_t min = arg == "--warmup" ? 0 : 1;
    if (!absl::SimpleAtoi(*v, &out) || out < min) {
      return absl::StrFormat("%s: expected an integer >= %d, got '%s'", arg,
                             min, *v);
    }
  }
  return "";
}

double Ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

double Median(std::vector<double> v) {
  auto mid = v.begin() + v.size() / 2;
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
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

Result Run(const Workload& w, const Flags& f, bool compiled, DType amp, const char* self) {
  const CompileOptions copts{.mode = compiled ? Mode::kCompiled : Mode::kEager,
                             .amp = amp,
                             .cuda_graphs = f.cuda_graphs,
                             .cuda_multi_region = f.multi_region};
  WorkloadRun run(w, copts, f.device);
  // Compiled: warmup_steps eager calls, then one traced call, then a replay.
  const int64_t warmup = compiled ? std::max<int64_t>(f.warmup, run.StepsToWarm()) : f.warmup;
  for (int64_t i = 0; i < warmup; ++i) run.Step();
  bench::Synchronize(f.device);

  Result r{.workload = w.name, .mode = compiled ? "compiled" : "eager",
           .dtype = std::string(ir::DTypeName(amp)), .device = DeviceFlag(f.device)};
  std::vector<double> ms;
  ms.reserve(f.steps);
  for (int64_t i = 0; i < f.steps; ++i) {
    const auto t0 = Clock::now();
    Tensor loss = run.Step();
    bench::Synchronize(f.device);
    ms.push_back(Ms(Clock::now() - t0));
  }
  r.ms_per_step = Median(ms);

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

  if (compiled) {
    const CompileStats s = run.stats();
    r.kernels_per_step = s.kernels_per_step;
    r.ops_per_step = s.ops_per_step;
    if (amp == DType::kF32) {
      std::tie(r.compile_ms_cold, r.compile_ms_warm) = ColdWarmCompileMs(w, f, self);
    }
  }
  return r;
}

std::string Json(const Result& r) {
  return absl::StrFormat(
      "{\"workload\":\"%s\",\"mode\":\"%s\",\"dtype\":\"%s\",\"device\":\"%s\","
      "\"ms_per_step\":%.4f,\"kernels_per_step\":%d,\"compile_ms_cold\":%.3f,"
      "\"compile_ms_warm\":%.3f,\"peak_bytes\":%d}",
      r.workload, r.mode, r.dtype, r.device, r.ms_per_step, r.kernels_per_step,
      r.compile_ms_cold, r.compile_ms_warm, r.peak_bytes);
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
  if (!f.json) {
    std::printf("%-10s %-9s %-6s %12s %10s %9s\n", "bandwidth", "mode", "device", "MB moved",
                "ms", "GB/s");
  }
  for (const Bandwidth& b : rows) {
    if (f.json) {
      absl::PrintF(
          "{\"bandwidth\":\"%s\",\"mode\":\"%s\",\"device\":\"%s\",\"numel\":%d,"
          "\"bytes\":%d,\"ms\":%.4f,\"gb_per_s\":%.2f}\n",
          b.kernel, b.mode, DeviceFlag(f.device), n, b.bytes, b.ms, b.gb_per_s());
    } else {
      std::printf("%-10s %-9s %-6s %12.1f %10.3f %9.2f\n", b.kernel.c_str(), b.mode.c_str(),
                  DeviceFlag(f.device), b.bytes / 1e6, b.ms, b.gb_per_s());
    }
  }
  if (!f.json) std::printf("compiled relu_axpb: %d kernel(s) per call\n", kernels);
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

void PrintHeader() {
  std::printf("%-26s %-9s %-5s %9s %8s %13s %12s %12s %9s\n", "workload",
              "mode", "dtype", "ms/step", "speedup", "kernels/step",
              "compile cold", "compile warm", "peak MB");
}

void PrintRow(const Result& r, double eager_ms) {
  std::printf("%-26s %-9s %-5s %9.3f %7.2fx %13d %10.1fms %10.1fms %9.2f\n",
              r.workload.c_str(), r.mode.c_str(), r.dtype.c_str(), r.ms_per_step,
              eager_ms / r.ms_per_step, static_cast<int>(r.kernels_per_step),
              r.compile_ms_cold, r.compile_ms_warm, r.peak_bytes / 1048576.0);
}

int Main(int argc, char** argv) {
  Flags f;
  bool help = false;
  if (std::string error = ParseFlags(argc, argv, f, help); !error.empty()) {
    std::fprintf(stderr, "stepjit-bench: %s\nrun with --help for usage\n",
                 error.c_str());
    return 2;
  }
  if (help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (std::string error = CheckDevice(f.device); !error.empty()) {
    std::fprintf(stderr, "stepjit-bench: --device %s: %s\n", DeviceFlag(f.device),
                 error.c_str());
    return 1;
  }
  if (!f.compile_probe.empty()) {
    return CompileProbe(*bench::FindWorkload(f.compile_probe), f);
  }
  if (f.bandwidth) return RunBandwidth(f);
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
  if (!f.json) PrintHeader();
  for (const Workload* wp : selected) {
    const Workload& w = *wp;
    double f32_eager_ms = 0;
    const std::vector<DType> amps = f.amp.empty() ? std::vector<DType>{w.amp} : f.amp;
    for (DType amp : amps) {
      Result eager = Run(w, f, false, amp, self.c_str());
      Result compiled = Run(w, f, true, amp, self.c_str());
      eager.kernels_per_step = compiled.ops_per_step;
      if (f32_eager_ms == 0) f32_eager_ms = eager.ms_per_step;
      for (const Result* r : {&eager, &compiled}) {
        if (f.json) {
          std::printf("%s\n", Json(*r).c_str());
        } else {
          PrintRow(*r, f32_eager_ms);
        }
        std::fflush(stdout);
      }
    }
  }
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
