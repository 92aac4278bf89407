// The profiler's recording: the on/off flag, host spans and tracks, the
// span store and its aggregates, STEPJIT_PROFILE, and stepjit::Profiler.
#include "runtime/profiler.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "config/env.h"
#include "ir/shape.h"
#include "ir/status.h"
#include "runtime/device_runtime.h"

namespace stepjit::runtime {

std::atomic<bool> g_profiling{false};

namespace {

// Spans kept for the trace: beyond this many the trace stops growing (the
// summary still counts everything) and says so.
constexpr size_t kMaxTraceEvents = size_t{1} << 22;

struct Store {
  std::mutex mu;
  bool keep_trace = true;
  std::vector<TraceEvent> events;
  int64_t dropped = 0;
  absl::flat_hash_map<std::string, ProfileEntry> entries;
  // The counted spans by the name of the step call they ran in ("" for
  // none).
  absl::flat_hash_map<std::string,
                      absl::flat_hash_map<std::string, ProfileEntry>>
      by_step;
  absl::flat_hash_map<uint32_t, std::string> track_names;
  absl::flat_hash_map<uint64_t, uint32_t> device_tracks;
};

Store& GetStore() {
  static Store* store = new Store;
  return *store;
}

std::atomic<uint32_t> g_next_host_track{1};
thread_local uint32_t t_track = 0;
thread_local int t_kernel_depth = 0;
thread_local bool t_capture = false;
thread_local int t_step_depth = 0;

// The first device track; host tracks count up from 1.
constexpr uint32_t kFirstDeviceTrack = 1000;
// The counted spans of the step call running on this thread: which step it
// is (compiled, traced, eager) is known when it ends.
thread_local absl::flat_hash_map<std::string, ProfileEntry> t_step_entries;

void Accumulate(absl::flat_hash_map<std::string, ProfileEntry>& table,
                const TraceEvent& event) {
  ProfileEntry& e = table[event.name];
  if (e.label.empty()) e.label = event.name;
  ++e.calls;
  e.total_ms += static_cast<double>(event.dur_ns) / 1e6;
  e.kind = event.work.kind;
  e.flops += event.work.flops;
  e.bytes += event.work.bytes;
  e.device = event.tid >= kFirstDeviceTrack;
}

}  // namespace

ProfileWork OpWork(ir::OpId op, absl::Span<const ir::TensorType> inputs,
                   const ir::TensorType& out, const ir::Attrs& attrs) {
  ProfileWork w;
  auto bytes = [](const ir::TensorType& t) {
    return static_cast<double>(ir::NumElements(t.shape)) *
           static_cast<double>(ir::DTypeSize(t.dtype));
  };
  if (ir::GetOpInfo(op).kind == ir::OpKind::kView) return w;  // moves nothing
  for (const ir::TensorType& t : inputs) w.bytes += bytes(t);
  // An in-place op's result is its first operand, written where it was read.
  if (!ir::IsInplace(op)) w.bytes += bytes(out);
  if (op == ir::OpId::kMatmul && !inputs.empty()) {
    // [..., M, K] x [..., K, N] (op(A) under transpose_a): 2 * numel(C) * K.
    const ir::Shape& a = inputs[0].shape;
    const bool ta = attrs.GetBool(ir::AttrKey::kTransposeA);
    int64_t k = 1;
    if (a.size() == 1) {
      k = a[0];
    } else if (a.size() >= 2) {
      k = ta ? a[a.size() - 2] : a.back();
    }
    w.kind = ProfileKind::kGemm;
    w.flops = 2.0 * static_cast<double>(ir::NumElements(out.shape)) *
              static_cast<double>(k);
  }
  // Convolutions count as GEMMs (im2col's product, 2 per multiply-add):
  // each output of the forward is a dot product over C / groups * KH * KW
  // weights, and either gradient does as many multiply-adds.
  const bool conv = op == ir::OpId::kConv2d ||
                    op == ir::OpId::kConv2dBackwardInput ||
                    op == ir::OpId::kConv2dBackwardWeight;
  if (conv && inputs.size() >= 2) {
    // The forward's output, and its per-output dot length from the weight
    // [O, C / groups, KH, KW] (for the weight gradient, its own result).
    const ir::Shape& y = op == ir::OpId::kConv2d ? out.shape : inputs[0].shape;
    const ir::Shape& wt =
        op == ir::OpId::kConv2dBackwardWeight ? out.shape : inputs[1].shape;
    if (wt.size() == 4) {
      w.kind = ProfileKind::kGemm;
      w.flops = 2.0 * static_cast<double>(ir::NumElements(y)) *
                static_cast<double>(wt[1] * wt[2] * wt[3]);
    }
  }
  return w;
}

void EnableProfiling(bool on, bool keep_trace) {
  if (on) {
    Store& s = GetStore();
    std::lock_guard<std::mutex> lock(s.mu);
    s.keep_trace = keep_trace;
  }
  g_profiling.store(on);
}

int64_t ProfileNowNs() {
  static const auto epoch = std::chrono::steady_clock::now();
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now() - epoch)
      .count();
}

uint32_t HostTrack() {
  if (t_track == 0) {
    t_track = g_next_host_track.fetch_add(1);
    Store& s = GetStore();
    std::lock_guard<std::mutex> lock(s.mu);
    s.track_names[t_track] = absl::StrCat("host thread ", t_track);
  }
  return t_track;
}

uint32_t DeviceTrack(uint64_t key, const std::string& name) {
  Store& s = GetStore();
  std::lock_guard<std::mutex> lock(s.mu);
  auto [it, added] = s.device_tracks.try_emplace(
      key, kFirstDeviceTrack + static_cast<uint32_t>(s.device_tracks.size()));
  if (added) s.track_names[it->second] = name;
  return it->second;
}

void RecordEvent(TraceEvent event) {
  Store& s = GetStore();
  std::lock_guard<std::mutex> lock(s.mu);
  if (event.counted) {
    Accumulate(s.entries, event);
    Accumulate(t_step_depth > 0 && !event.outside_step ? t_step_entries
                                                       : s.by_step[""],
               event);
  }
  if (event.cat == kCatStep || event.cat == kCatData) {
    // The summary's step and wait totals, by name.
    ProfileEntry& e = s.entries[absl::StrCat("\x01", event.cat, event.name)];
    e.label = event.name;
    ++e.calls;
    e.total_ms += static_cast<double>(event.dur_ns) / 1e6;
  }
  if (!s.keep_trace) return;
  if (s.events.size() >= kMaxTraceEvents) {
    ++s.dropped;
    return;
  }
  s.events.push_back(std::move(event));
}

bool InsideKernel() { return t_kernel_depth > 0; }
bool InsideStep() { return t_step_depth > 0; }

// A kernel span counts in the depth also under a capture: the ops a
// captured node runs are the node's (their device spans are not counted).
ProfileSpan::ProfileSpan(const char* cat, bool kernel)
    : active_(ProfilingEnabled() && !t_capture),
      kernel_(kernel && ProfilingEnabled()) {
  if (kernel_) ++t_kernel_depth;
  if (!active_) return;
  event_.cat = cat;
  event_.tid = HostTrack();
  if (cat == kCatStep) ++t_step_depth;
  event_.begin_ns = ProfileNowNs();
}

void ProfileSpan::End() {
  if (kernel_) --t_kernel_depth;
  kernel_ = false;
  if (!active_) return;
  active_ = false;
  if (event_.cat == kCatStep && --t_step_depth == 0) {
    Store& s = GetStore();
    std::lock_guard<std::mutex> lock(s.mu);
    auto& table = s.by_step[event_.name];
    for (const auto& [label, e] : t_step_entries) {
      ProfileEntry& sum = table[label];
      if (sum.label.empty())
        sum = e;
      else {
        sum.calls += e.calls;
        sum.total_ms += e.total_ms;
        sum.flops += e.flops;
        sum.bytes += e.bytes;
      }
    }
    t_step_entries.clear();
  }
  if (event_.name.empty()) return;
  event_.dur_ns = ProfileNowNs() - event_.begin_ns;
  RecordEvent(std::move(event_));
}

ProfileSpan::~ProfileSpan() {
  if (active_ || kernel_) End();
}

ProfileCaptureScope::ProfileCaptureScope() : previous_(t_capture) {
  t_capture = true;
}
ProfileCaptureScope::~ProfileCaptureScope() { t_capture = previous_; }
bool InProfileCapture() { return t_capture; }

void FlushDeviceTimers() {
  for (DeviceType type : {DeviceType::kCPU, DeviceType::kCUDA}) {
    if (DeviceTimer* t = GetDeviceRuntime(type).timer) t->Flush();
  }
}

std::vector<ProfileEntry> ProfileSnapshot() {
  Store& s = GetStore();
  std::vector<ProfileEntry> out;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    for (const auto& [key, e] : s.entries) {
      if (key[0] != '\x01') out.push_back(e);
    }
  }
  std::sort(out.begin(), out.end(),
            [](const ProfileEntry& a, const ProfileEntry& b) {
              return a.total_ms != b.total_ms ? a.total_ms > b.total_ms
                                              : a.label < b.label;
            });
  return out;
}

// Step and data-wait totals: (name, calls, ms) of `cat`.
std::vector<ProfileEntry> SpanTotals(const char* cat) {
  Store& s = GetStore();
  const std::string prefix = absl::StrCat("\x01", cat);
  std::vector<ProfileEntry> out;
  std::lock_guard<std::mutex> lock(s.mu);
  for (const auto& [key, e] : s.entries) {
    if (key.compare(0, prefix.size(), prefix) == 0 &&
        key.size() == prefix.size() + e.label.size()) {
      out.push_back(e);
    }
  }
  std::sort(out.begin(), out.end(),
            [](const ProfileEntry& a, const ProfileEntry& b) {
              return a.label < b.label;
            });
  return out;
}

void ResetProfile() {
  Store& s = GetStore();
  std::lock_guard<std::mutex> lock(s.mu);
  s.entries.clear();
  s.by_step.clear();
  s.events.clear();
  s.dropped = 0;
}

std::vector<TraceEvent> TraceSnapshot() {
  Store& s = GetStore();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.events;
}

std::vector<std::pair<std::string, std::vector<ProfileEntry>>> ProfileByStep() {
  Store& s = GetStore();
  std::vector<std::pair<std::string, std::vector<ProfileEntry>>> out;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    for (const auto& [step, table] : s.by_step) {
      out.emplace_back(step, std::vector<ProfileEntry>());
      for (const auto& [label, e] : table) out.back().second.push_back(e);
    }
  }
  for (auto& [step, entries] : out) {
    std::sort(entries.begin(), entries.end(),
              [](const ProfileEntry& a, const ProfileEntry& b) {
                return a.total_ms != b.total_ms ? a.total_ms > b.total_ms
                                                : a.label < b.label;
              });
  }
  // Compiled steps first, then the other calls by name, then what ran
  // outside any step.
  auto rank = [](const std::string& step) {
    if (step.empty()) return 2;
    return step.find("(compiled)") != std::string::npos ? 0 : 1;
  };
  std::sort(out.begin(), out.end(), [&](const auto& a, const auto& b) {
    return rank(a.first) != rank(b.first) ? rank(a.first) < rank(b.first)
                                          : a.first < b.first;
  });
  return out;
}

int64_t DroppedTraceEvents() {
  Store& s = GetStore();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.dropped;
}

absl::flat_hash_map<uint32_t, std::string> TrackNames() {
  Store& s = GetStore();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.track_names;
}

namespace {

// STEPJIT_PROFILE: a session from the start of the process to its exit.
bool StartEnvSession() {
  const absl::StatusOr<ProfileEnv> env =
      ParseProfileEnv(config::Get(config::Env::kProfile).value_or("").c_str());
  if (!env.ok()) {
    std::fprintf(stderr, "stepjit: %s; profiling is off\n",
                 std::string(env.status().message()).c_str());
    return false;
  }
  if (!env->on) return false;
  static std::string* trace_path = new std::string(env->trace_path);
  EnableProfiling(true, !trace_path->empty());
  std::atexit([] {
    EnableProfiling(false);
    std::fputs(FormatProfile().c_str(), stderr);
    if (trace_path->empty()) return;
    const absl::Status st = WriteChromeTrace(*trace_path);
    if (st.ok()) {
      std::fprintf(stderr, "stepjit: profile trace written to %s\n",
                   trace_path->c_str());
    } else {
      std::fprintf(stderr, "stepjit: STEPJIT_PROFILE: %s\n",
                   std::string(st.message()).c_str());
    }
  });
  return true;
}

const bool g_env_session = StartEnvSession();

}  // namespace

}  // namespace stepjit::runtime

namespace stepjit {

Profiler::Profiler(std::string trace_path)
    : trace_path_(std::move(trace_path)) {
  SJ_REQUIRE(!Active(),
             "stepjit::Profiler: profiling is already on (STEPJIT_PROFILE, or "
             "another Profiler that has not stopped); one session at a time");
  if (!trace_path_.empty()) {
    const absl::Status st = runtime::CheckWritable(trace_path_);
    SJ_REQUIRE(st.ok(), "stepjit::Profiler: ", st.message());
  }
  runtime::ResetProfile();
  runtime::EnableProfiling(true);
}

Profiler::~Profiler() {
  if (stopped_) return;
  try {
    Stop();
  } catch (const Error& e) {
    std::fprintf(stderr, "stepjit: %s\n", e.what());
  }
}

void Profiler::Stop() {
  if (stopped_) return;
  stopped_ = true;
  runtime::FlushDeviceTimers();
  runtime::EnableProfiling(false);
  if (trace_path_.empty()) return;
  const absl::Status st = runtime::WriteChromeTrace(trace_path_);
  SJ_REQUIRE(st.ok(), "stepjit::Profiler: ", st.message());
}

void Profiler::Pause() {
  if (stopped_) return;
  runtime::FlushDeviceTimers();
  runtime::EnableProfiling(false);
}

void Profiler::Resume() {
  if (!stopped_) runtime::EnableProfiling(true);
}

std::string Profiler::Summary(int top) const {
  if (!stopped_) runtime::FlushDeviceTimers();
  return runtime::FormatProfile(top);
}

std::vector<runtime::TraceEvent> Profiler::Events() const {
  if (!stopped_) runtime::FlushDeviceTimers();
  return runtime::TraceSnapshot();
}

bool Profiler::Active() { return runtime::ProfilingEnabled(); }

}  // namespace stepjit
