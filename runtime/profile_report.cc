// The profiler's outputs: the summary table, the Chrome trace file, the
// machine's peaks, and STEPJIT_PROFILE's parsing.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "config/env.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"
#include "runtime/machine_peaks.h"
#include "runtime/profiler.h"
#include "runtime/thread_pool.h"

namespace stepjit::runtime {
namespace {

// A positive number from `env`, or 0 when unset; an unusable value is
// reported and ignored.
double EnvPeak(config::Env env) {
  const absl::StatusOr<std::optional<double>> x = config::GetReal(env);
  if (!x.ok()) {
    std::fprintf(stderr, "stepjit: %s; measuring the peak instead\n",
                 std::string(x.status().message()).c_str());
    return 0;
  }
  return x->value_or(0);
}

std::string Rate(double work, double ms, double scale) {
  if (work <= 0 || ms <= 0) return "";
  return absl::StrFormat("%.1f", work / (ms / 1e3) / scale);
}

std::string Share(double work, double ms, double scale, double peak) {
  if (work <= 0 || ms <= 0 || peak <= 0) return "";
  return absl::StrFormat("%.1f%%", 100.0 * work / (ms / 1e3) / scale / peak);
}

}  // namespace

const MachinePeaks& GetMachinePeaks() {
  static const MachinePeaks peaks = [] {
    MachinePeaks p;
    const double gflops = EnvPeak(config::Env::kPeakGflops);
    const double gbs = EnvPeak(config::Env::kPeakGbs);
    const int threads = NumThreads();
    p.gflops = gflops > 0 ? gflops : MeasureFmaGflops(threads, 1 << 20, 3);
    // 3 arrays of 32 MiB per thread: larger than the caches.
    p.gb_per_s = gbs > 0 ? gbs : MeasureTriadGbPerS(threads, 8 << 20, 3);
    p.source = absl::StrFormat(
        "FLOP/s: %s; bytes/s: %s",
        gflops > 0 ? std::string("STEPJIT_PEAK_GFLOPS")
                   : absl::StrFormat("%s FMA loop on %d threads, measured",
                                     FmaIsa(), threads),
        gbs > 0
            ? std::string("STEPJIT_PEAK_GBS")
            : absl::StrFormat("STREAM triad on %d threads, measured", threads));
    return p;
  }();
  return peaks;
}

namespace {

// The table of `entries`: the top `top`, shares of `step_ms` (none when 0).
void AppendTable(std::string& out, const std::vector<ProfileEntry>& entries,
                 double step_ms, const MachinePeaks& peaks, int top) {
  absl::StrAppendFormat(&out, "  %-46s %7s %10s %9s %6s %8s %6s %8s %6s\n",
                        "kernel", "calls", "total ms", "ms/call", "%step",
                        "GFLOP/s", "%peak", "GB/s", "%peak");
  int shown = 0;
  for (const ProfileEntry& e : entries) {
    if (shown++ == top) {
      absl::StrAppendFormat(&out, "  ... and %d more\n",
                            static_cast<int>(entries.size()) - top);
      break;
    }
    absl::StrAppendFormat(
        &out, "  %-46s %7d %10.3f %9.4f %6s %8s %6s %8s %6s\n",
        e.device ? absl::StrCat(e.label, " @dev") : e.label, e.calls,
        e.total_ms, e.total_ms / static_cast<double>(e.calls),
        step_ms > 0 ? absl::StrFormat("%.1f%%", 100.0 * e.total_ms / step_ms)
                    : "",
        Rate(e.flops, e.total_ms, 1e9),
        Share(e.flops, e.total_ms, 1e9, peaks.gflops),
        Rate(e.bytes, e.total_ms, 1e9),
        Share(e.bytes, e.total_ms, 1e9, peaks.gb_per_s));
  }
}

}  // namespace

std::string FormatProfile(int top) {
  const std::vector<ProfileEntry> steps = SpanTotals(kCatStep);
  std::string out = "stepjit profile\n";
  for (const ProfileEntry& s : steps) {
    absl::StrAppendFormat(&out, "  %-44s %6d calls %11.3f ms %9.3f ms/call\n",
                          s.label, s.calls, s.total_ms,
                          s.total_ms / static_cast<double>(s.calls));
  }
  for (const ProfileEntry& w : SpanTotals(kCatData)) {
    absl::StrAppendFormat(&out, "  %-44s %6d waits %11.3f ms %9.3f ms/wait\n",
                          w.label, w.calls, w.total_ms,
                          w.total_ms / static_cast<double>(w.calls));
  }
  const MachinePeaks& peaks = GetMachinePeaks();
  bool device = false;
  for (const ProfileEntry& e : ProfileSnapshot()) device |= e.device;
  absl::StrAppendFormat(&out, "  peaks: %.1f GFLOP/s, %.1f GB/s (%s)\n",
                        peaks.gflops, peaks.gb_per_s, peaks.source);
  if (device) {
    absl::StrAppend(&out,
                    "  @dev: device time between CUDA events around the "
                    "kernel (the host emulator runs kernels on the cores "
                    "the peaks were measured on)\n");
  }
  if (const int64_t dropped = DroppedTraceEvents(); dropped > 0) {
    absl::StrAppendFormat(
        &out, "  the trace kept its first spans and dropped %d\n", dropped);
  }
  for (const auto& [step, entries] : ProfileByStep()) {
    double step_ms = 0, kernel_ms = 0;
    int64_t calls = 0;
    for (const ProfileEntry& s : steps) {
      if (s.label == step) {
        step_ms = s.total_ms;
        calls = s.calls;
      }
    }
    for (const ProfileEntry& e : entries) kernel_ms += e.total_ms;
    if (step.empty()) {
      absl::StrAppendFormat(
          &out, "outside step calls: kernels and ops %.3f ms\n", kernel_ms);
    } else {
      absl::StrAppendFormat(
          &out, "in %s (%d calls, %.3f ms): kernels and ops %.3f ms (%s)\n",
          step, calls, step_ms, kernel_ms,
          step_ms > 0 ? absl::StrFormat("%.1f%%", 100.0 * kernel_ms / step_ms)
                      : std::string("-"));
    }
    AppendTable(out, entries, step.empty() ? 0 : step_ms, peaks, top);
  }
  return out;
}

absl::Status CheckWritable(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot write the trace file '", path, "': ", std::strerror(errno)));
  }
  std::fclose(f);
  return absl::OkStatus();
}

absl::StatusOr<ProfileEnv> ParseProfileEnv(const char* value) {
  ProfileEnv env;
  if (value == nullptr || *value == '\0' || std::strcmp(value, "0") == 0)
    return env;
  env.on = true;
  if (std::strcmp(value, "1") == 0) return env;
  if (!absl::EndsWith(value, ".json")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "STEPJIT_PROFILE: expected 0 (off), 1 (a summary at exit) or a trace "
        "file name ending in .json, got '",
        value, "'"));
  }
  env.trace_path = value;
  if (absl::Status st = CheckWritable(env.trace_path); !st.ok())
    return absl::InvalidArgumentError(
        absl::StrCat("STEPJIT_PROFILE: ", st.message()));
  return env;
}

absl::Status WriteChromeTrace(const std::string& path) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec, llvm::sys::fs::OF_Text);
  if (ec) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot write the trace file '", path, "': ", ec.message()));
  }
  const std::vector<TraceEvent> events = TraceSnapshot();
  llvm::json::OStream j(os);
  j.object([&] {
    j.attribute("displayTimeUnit", "ms");
    j.attributeArray("traceEvents", [&] {
      j.object([&] {
        j.attribute("name", "process_name");
        j.attribute("ph", "M");
        j.attribute("pid", 1);
        j.attributeObject("args", [&] { j.attribute("name", "stepjit"); });
      });
      for (const auto& [tid, name] : TrackNames()) {
        j.object([&] {
          j.attribute("name", "thread_name");
          j.attribute("ph", "M");
          j.attribute("pid", 1);
          j.attribute("tid", static_cast<int64_t>(tid));
          j.attributeObject("args", [&] { j.attribute("name", name); });
        });
      }
      for (const TraceEvent& e : events) {
        j.object([&] {
          j.attribute("name", e.name);
          j.attribute("cat", e.cat);
          j.attribute("ph", "X");
          // Microseconds with nanosecond digits.
          j.attribute("ts", static_cast<double>(e.begin_ns) / 1e3);
          j.attribute("dur", static_cast<double>(e.dur_ns) / 1e3);
          j.attribute("pid", 1);
          j.attribute("tid", static_cast<int64_t>(e.tid));
          j.attributeObject("args", [&] {
            if (e.work.flops > 0) j.attribute("flops", e.work.flops);
            if (e.work.bytes > 0) j.attribute("bytes", e.work.bytes);
            if (!e.shape.empty()) j.attribute("shape", e.shape);
            if (e.counted) j.attribute("counted", true);
          });
        });
      }
    });
  });
  os << "\n";
  os.close();
  if (os.has_error()) {
    const std::string why = os.error().message();
    os.clear_error();
    return absl::InternalError(
        absl::StrCat("writing the trace file '", path, "': ", why));
  }
  return absl::OkStatus();
}

}  // namespace stepjit::runtime
