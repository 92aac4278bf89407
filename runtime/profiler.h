// The trace profiler: spans with a begin time and a duration for every eager
// op (Dispatch), every replayed kernel (the replay loop), the calls of a
// compiled step, its tracing and compilation, and the data loader's waits;
// work a device runs asynchronously (CUDA) is timed on the device's own
// clock by its DeviceTimer. Written as a Chrome trace (Perfetto,
// chrome://tracing) and summarized as a table of kernels.
//
//   stepjit::Profiler profile("trace.json");  // STEPJIT_PROFILE=trace.json
//   for (...) compiled(x, y);
//   profile.Stop();                    // writes the trace
//   std::cerr << profile.Summary();
//
// STEPJIT_PROFILE=1 prints the summary at exit; a value ending in .json also
// writes the trace there. When profiling is off every recording site costs
// one relaxed atomic load and a branch.
#ifndef STEPJIT_RUNTIME_PROFILER_H_
#define STEPJIT_RUNTIME_PROFILER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ir/attrs.h"
#include "ir/infer.h"
#include "ir/op.h"

namespace stepjit::runtime {

// What a span is, and the work one call of it does: the FLOPs of a GEMM
// (2 per multiply-add; other ops count none) and the bytes of every tensor
// it reads and writes once (its operands and results at their sizes: the
// least it must move).
enum class ProfileKind : uint8_t { kOp, kGemm, kRegion };
struct ProfileWork {
  ProfileKind kind = ProfileKind::kOp;
  double flops = 0;
  double bytes = 0;
};

// The work of one eager op on operands of `inputs` giving `out`.
ProfileWork OpWork(ir::OpId op, absl::Span<const ir::TensorType> inputs,
                   const ir::TensorType& out, const ir::Attrs& attrs);

// Span categories (the trace's "cat").
inline constexpr char kCatStep[] = "step";        // a call of a compiled step
inline constexpr char kCatCompile[] = "compile";  // tracing, passes, codegen
inline constexpr char kCatKernel[] = "kernel";    // a replayed node
inline constexpr char kCatOp[] = "op";            // an eager op
inline constexpr char kCatData[] = "data";        // waiting for a batch
inline constexpr char kCatGraph[] = "graph";      // a CUDA graph launch
inline constexpr char kCatComm[] = "comm";  // a collective, or waiting for one
// (A device's spans have the category of the work they time, on the track
// of the device's stream.)

// One span. Times are nanoseconds since the profiler's epoch.
struct TraceEvent {
  std::string name;
  const char* cat = kCatOp;
  int64_t begin_ns = 0;
  int64_t dur_ns = 0;
  // The track: a host thread (1, 2, ...) or a device stream (DeviceTrack).
  uint32_t tid = 0;
  ProfileWork work;
  std::string shape;  // the result's shape, when the span has one
  // Counted in the summary's kernel table: the leaves that do the work
  // (host spans of CPU work, device spans of CUDA work), not the spans that
  // enclose others or only launch work on a device.
  bool counted = false;
  // Recorded outside any step call (a device span is recorded when read,
  // at the end of the next step call; its timer says where it started).
  bool outside_step = false;
};

// Profiling is on (the cheap check every recording site makes).
extern std::atomic<bool> g_profiling;
inline bool ProfilingEnabled() {
  return g_profiling.load(std::memory_order_relaxed);
}
// Turns recording on or off (what Profiler and STEPJIT_PROFILE use); events
// are kept for the trace only when `keep_trace`.
void EnableProfiling(bool on, bool keep_trace = true);

int64_t ProfileNowNs();
// This thread's track.
uint32_t HostTrack();
// The track of a device's stream, named `name` ("cuda stream 3").
uint32_t DeviceTrack(uint64_t key, const std::string& name);

// Records a finished span (from any thread).
void RecordEvent(TraceEvent event);

// Host spans nest per thread: the spans a replayed node encloses are not
// counted again in the summary (InsideKernel() is then true).
bool InsideKernel();
// Whether a step call is running on this thread.
bool InsideStep();

// A host span from construction to destruction, recorded when profiling was
// on at construction and a name was set.
class ProfileSpan {
 public:
  explicit ProfileSpan(const char* cat, bool kernel = false);
  ~ProfileSpan();
  ProfileSpan(const ProfileSpan&) = delete;
  ProfileSpan& operator=(const ProfileSpan&) = delete;
  bool active() const { return active_; }
  void set_name(std::string name) { event_.name = std::move(name); }
  void set_work(const ProfileWork& work, std::string shape) {
    event_.work = work;
    event_.shape = std::move(shape);
  }
  void set_counted(bool counted) { event_.counted = counted; }
  // Ends the span now (the destructor then does nothing).
  void End();
  // Records nothing (the work it spans did not run).
  void Cancel() { active_ = false; }

 private:
  bool active_;
  bool kernel_;
  TraceEvent event_;
};

// While alive on a thread, host spans of ops and kernels are not recorded:
// a CUDA graph capture runs the replay loop without running anything.
class ProfileCaptureScope {
 public:
  ProfileCaptureScope();
  ~ProfileCaptureScope();
  ProfileCaptureScope(const ProfileCaptureScope&) = delete;
  ProfileCaptureScope& operator=(const ProfileCaptureScope&) = delete;

 private:
  bool previous_;
};
bool InProfileCapture();

// Times work a device queues asynchronously on the device's clock (CUDA:
// events on the calling thread's current stream); a device with one sets
// DeviceRuntime::timer. Start marks where the work queued next begins and
// returns a handle; Stop marks its end and keeps `event` (name, work,
// counted) until Flush waits for the device and records every pending span
// on the stream's track.
class DeviceTimer {
 public:
  virtual ~DeviceTimer() = default;
  virtual uint64_t Start() = 0;
  virtual void Stop(uint64_t start, TraceEvent event) = 0;
  virtual void Flush() = 0;
};
// Flushes every device's timer (the end of a step, the end of profiling).
void FlushDeviceTimers();

// The aggregated table: one entry per label of the counted spans.
struct ProfileEntry {
  std::string label;  // op or kernel name with its output shape
  int64_t calls = 0;
  double total_ms = 0;
  ProfileKind kind = ProfileKind::kOp;
  double flops = 0, bytes = 0;  // summed over the calls
  bool device = false;          // timed on a device's clock
};
// The entries so far, most total time first; ResetProfile clears them and
// the trace.
std::vector<ProfileEntry> ProfileSnapshot();
void ResetProfile();
// The recorded spans, in recording order, and how many the trace dropped
// for its size limit.
std::vector<TraceEvent> TraceSnapshot();
int64_t DroppedTraceEvents();
// The counted spans aggregated per name of the step call they ran in
// ("train_step (compiled)"; "" for those outside any step call), each list
// sorted as ProfileSnapshot's; compiled steps first, "" last.
std::vector<std::pair<std::string, std::vector<ProfileEntry>>> ProfileByStep();
// The calls and total time of the spans of category `cat` (kCatStep,
// kCatData) by name.
std::vector<ProfileEntry> SpanTotals(const char* cat);
// Each track's name ("host thread 1", "cuda stream 3").
absl::flat_hash_map<uint32_t, std::string> TrackNames();

// The machine's peaks the summary compares against: STEPJIT_PEAK_GFLOPS
// and STEPJIT_PEAK_GBS when set, else measured once per process (an FMA
// loop on every thread; a STREAM triad over arrays larger than the caches).
struct MachinePeaks {
  double gflops = 0;
  double gb_per_s = 0;
  std::string source;  // how they were obtained
};
const MachinePeaks& GetMachinePeaks();

// The summary: the calls of each step and the data loader's waits, the
// peaks, and for each kind of step call (and outside them) the top `top`
// kernels by total time with calls, share of that step's time, and
// achieved GFLOP/s and GB/s against the peaks.
std::string FormatProfile(int top = 25);

// Writes the recorded spans as Chrome trace JSON to `path`.
absl::Status WriteChromeTrace(const std::string& path);

// STEPJIT_PROFILE's value: "" or "0" (off), "1" (summary at exit), or a
// path ending in .json (summary and trace). InvalidArgument for anything
// else; a .json path that cannot be opened for writing is an error naming
// it and why.
struct ProfileEnv {
  bool on = false;
  std::string trace_path;
};
absl::StatusOr<ProfileEnv> ParseProfileEnv(const char* value);
// Checks that `path` can be written (creates or truncates it).
absl::Status CheckWritable(const std::string& path);

}  // namespace stepjit::runtime

namespace stepjit {

// Profiles everything that runs while alive: every eager op, every kernel
// of a replayed step (with device times on CUDA, kernels of CUDA graph
// replays included), step calls, tracing and compilation, and data loader
// waits. One session at a time (STEPJIT_PROFILE is one). Throws
// stepjit::Error when `trace_path` cannot be written or another session is
// on.
class Profiler {
 public:
  explicit Profiler(std::string trace_path = "");
  // Stops; writes the trace when a path was given (an error is printed).
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // Stops recording and writes the trace (throws Error when writing fails).
  void Stop();
  // Stops and resumes recording within the session (around an evaluation
  // that should not be in the profile, say).
  void Pause();
  void Resume();
  // The summary of what this session recorded so far.
  std::string Summary(int top = 25) const;
  // The recorded spans.
  std::vector<runtime::TraceEvent> Events() const;

  // Whether a session (a Profiler or STEPJIT_PROFILE) is on.
  static bool Active();

 private:
  std::string trace_path_;
  bool stopped_ = false;
};

}  // namespace stepjit

#endif  // STEPJIT_RUNTIME_PROFILER_H_
