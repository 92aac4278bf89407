// stepjit-bench: eager vs compiled training-step timings for a fixed set of
// MLP workloads, as a table or one JSON object per line (issue 5, item 5).
//
//   stepjit-bench --workload mlp784_adamw_b128 --steps 50 --json
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
#include "runtime/storage.h"

namespace {

using namespace stepjit;  // NOLINT: tool code, mirrors libtorch usage
using Clock = std::chrono::steady_clock;

constexpr char kUsage[] =
    R"(usage: stepjit-bench [flags]
Times training steps (forward, cross-entropy, backward, optimizer) of MLP
workloads, eager and through stepjit::compile, on the CPU.
  --workload NAME   run only NAME (default: all), one of:
                      mlp784_adamw_b128     784-512-512-10, batch 128, AdamW lr 1e-3
                      mlp784_sgd_b128       the same with SGD lr 0.01 momentum 0.9
                      tiny_mlp_adamw_b32    64-64-64-64-10, batch 32, AdamW
                      mlp1024x3_adamw_b512  3x Linear(1024,1024)+ReLU, Linear(1024,10),
                                            batch 512, AdamW
  --steps N         timed steps per workload and mode (default 50)
  --warmup N        untimed steps first (default 5; compiled runs at least
                    enough to warm up and trace)
  --amp P           f32 (default), bf16, f16 or all: the training precision.
                    Eager steps run under amp::Autocast (f16 with an
                    amp::GradScaler); compiled steps compile the plain step
                    with {.amp = P} (f16: the grad-scaler pass). "all" runs
                    f32, bf16 and f16 one after the other.
  --json            one JSON object per line per workload and mode, keys:
                    workload, mode, dtype, ms_per_step, kernels_per_step,
                    compile_ms_cold, compile_ms_warm, peak_bytes
  --help            this text
Flags take their value as "--flag V" or "--flag=V".

Columns: speedup is against the workload's f32 eager row; ms/step is the
median over the timed steps; batches rotate through a
pool of 16 random batches drawn with a fixed seed. kernels/step is, for eager,
the ops the step dispatches (the compiled trace's ops_per_step) and, for
compiled, kernel launches per replay. compile cold and warm are measured in
two fresh child processes sharing a new, empty kernel cache directory: cold
is the first (every kernel compiled), warm the second (every kernel loaded
from the disk cache). Each is stats().compile_ms: tracing the step (one
eager step), the pass pipeline and code generation. peak is the CPU tensor
memory allocated above the steady state during one step.
)";

using bench::Workload;
using bench::WorkloadRun;

struct Flags {
  std::string workload;  // empty: all
  std::string compile_probe;  // internal: time one compile and print it
  std::vector<DType> amp = {DType::kF32};
  int64_t steps = 50;
  int64_t warmup = 5;
  bool json = false;
};

struct Result {
  std::string workload;
  std::string mode;
  std::string dtype = "f32";
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
    if (arg == "--help" || arg == "-h" || arg == "--json") {
      if (inline_value) return arg + " takes no value";
      help |= arg != "--json";
      f.json |= arg == "--json";
      continue;
    }
    if (arg != "--workload" && arg != "--steps" && arg != "--warmup" &&
        arg != "--compile-probe" && arg != "--amp") {
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
    int64_t& out = arg == "--steps" ? f.steps : f.warmup;
    const int64_t min = arg == "--steps" ? 1 : 0;
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

// Compiles the workload's step in this process and prints
// "<compile_ms> <cached_regions> <native_regions>".
int CompileProbe(const Workload& w) {
  WorkloadRun run(w, CompileOptions{});
  for (int64_t i = 0; i < run.StepsToWarm(); ++i) run.Step();
  const CompileStats s = run.stats();
  std::printf("%.3f %d %d\n", s.compile_ms, s.cached_regions, s.native_regions);
  return 0;
}

// Cold and warm compile times from two child processes sharing a fresh
// cache directory; -1 when a child failed.
std::pair<double, double> ColdWarmCompileMs(const Workload& w, const char* self) {
  char dir_template[] = "/tmp/stepjit-bench-cache-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (dir == nullptr) return {-1, -1};
  auto probe = [&]() -> double {
    const std::string cmd = absl::StrFormat("STEPJIT_CACHE_DIR='%s' '%s' --compile-probe %s", dir,
                                            self, w.name);
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
  const CompileOptions copts{.mode = compiled ? Mode::kCompiled : Mode::kEager, .amp = amp};
  WorkloadRun run(w, copts);
  // Compiled: warmup_steps eager calls, then one traced call, then a replay.
  const int64_t warmup = compiled ? std::max<int64_t>(f.warmup, run.StepsToWarm()) : f.warmup;
  for (int64_t i = 0; i < warmup; ++i) run.Step();

  Result r{.workload = w.name, .mode = compiled ? "compiled" : "eager",
           .dtype = std::string(ir::DTypeName(amp))};
  std::vector<double> ms;
  ms.reserve(f.steps);
  for (int64_t i = 0; i < f.steps; ++i) {
    const auto t0 = Clock::now();
    Tensor loss = run.Step();
    ms.push_back(Ms(Clock::now() - t0));
  }
  r.ms_per_step = Median(ms);

  // Everything the step returns is dropped first, so the peak measures only
  // the transient buffers of one step above the parameters and state.
  const int64_t steady = GetCpuMemoryStats().allocated_bytes;
  ResetCpuPeakMemory();
  run.Step();
  r.peak_bytes = GetCpuMemoryStats().peak_bytes - steady;

  if (compiled) {
    const CompileStats s = run.stats();
    r.kernels_per_step = s.kernels_per_step;
    r.ops_per_step = s.ops_per_step;
    if (amp == DType::kF32) std::tie(r.compile_ms_cold, r.compile_ms_warm) = ColdWarmCompileMs(w, self);
  }
  return r;
}

std::string Json(const Result& r) {
  return absl::StrFormat(
      "{\"workload\":\"%s\",\"mode\":\"%s\",\"dtype\":\"%s\","
      "\"ms_per_step\":%.4f,\"kernels_per_step\":%d,\"compile_ms_cold\":%.3f,"
      "\"compile_ms_warm\":%.3f,\"peak_bytes\":%d}",
      r.workload, r.mode, r.dtype, r.ms_per_step, r.kernels_per_step, r.compile_ms_cold,
      r.compile_ms_warm, r.peak_bytes);
}

void PrintHeader() {
  std::printf("%-22s %-9s %-5s %9s %8s %13s %12s %12s %9s\n", "workload",
              "mode", "dtype", "ms/step", "speedup", "kernels/step",
              "compile cold", "compile warm", "peak MB");
}

void PrintRow(const Result& r, double eager_ms) {
  std::printf("%-22s %-9s %-5s %9.3f %7.2fx %13d %10.1fms %10.1fms %9.2f\n",
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
  if (!f.compile_probe.empty()) return CompileProbe(*bench::FindWorkload(f.compile_probe));
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  if (!f.json) PrintHeader();
  for (const Workload& w : bench::Workloads()) {
    if (!f.workload.empty() && w.name != f.workload) continue;
    double f32_eager_ms = 0;
    for (DType amp : f.amp) {
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
  } catch (const stepjit::Error& e) {
    std::fprintf(stderr, "stepjit-bench: error: %s\n", e.what());
    return 1;
  }
}
