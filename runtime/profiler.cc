// Replay profiler storage and its table.
#include "runtime/profiler.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"

namespace stepjit::runtime {
namespace {

struct Store {
  std::mutex mu;
  absl::flat_hash_map<std::string, ProfileEntry> entries;
};

Store& GetStore() {
  static Store* store = new Store;
  return *store;
}

bool EnvEnabled() {
  const char* v = std::getenv("STEPJIT_PROFILE");
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

std::atomic<bool>& Flag() {
  static std::atomic<bool> flag{[] {
    const bool on = EnvEnabled();
    if (on) {
      std::atexit([] { std::fputs(FormatProfile().c_str(), stderr); });
    }
    return on;
  }()};
  return flag;
}

}  // namespace

bool ProfilingEnabled() { return Flag().load(std::memory_order_relaxed); }
void EnableProfiling(bool on) { Flag().store(on); }

void RecordProfile(const std::string& label, double ms,
                   const ProfileWork& work) {
  Store& s = GetStore();
  std::lock_guard<std::mutex> lock(s.mu);
  ProfileEntry& e = s.entries[label];
  if (e.label.empty()) e.label = label;
  ++e.calls;
  e.total_ms += ms;
  e.kind = work.kind;
  e.flops += work.flops;
  e.bytes += work.bytes;
}

std::vector<ProfileEntry> ProfileSnapshot() {
  Store& s = GetStore();
  std::vector<ProfileEntry> out;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    for (const auto& [label, e] : s.entries) out.push_back(e);
  }
  std::sort(out.begin(), out.end(), [](const ProfileEntry& a, const ProfileEntry& b) {
    return a.total_ms != b.total_ms ? a.total_ms > b.total_ms : a.label < b.label;
  });
  return out;
}

void ResetProfile() {
  Store& s = GetStore();
  std::lock_guard<std::mutex> lock(s.mu);
  s.entries.clear();
}

std::string FormatProfile() {
  const std::vector<ProfileEntry> entries = ProfileSnapshot();
  double total = 0;
  for (const ProfileEntry& e : entries) total += e.total_ms;
  std::string out = absl::StrFormat("stepjit profile (replayed nodes): %.3f ms in all\n", total);
  absl::StrAppendFormat(&out, "%-48s %8s %11s %10s %6s %9s %8s\n", "node",
                        "calls", "total ms", "ms/call", "share", "GFLOP/s",
                        "GB/s");
  for (const ProfileEntry& e : entries) {
    const double seconds = e.total_ms / 1e3;
    absl::StrAppendFormat(&out, "%-48s %8d %11.3f %10.4f %5.1f%% %9s %8s\n",
                          e.label, e.calls, e.total_ms,
                          e.total_ms / static_cast<double>(e.calls),
                          total > 0 ? 100.0 * e.total_ms / total : 0.0,
                          e.flops > 0 && seconds > 0
                              ? absl::StrFormat("%.1f", e.flops / seconds / 1e9)
                              : "",
                          e.bytes > 0 && seconds > 0
                              ? absl::StrFormat("%.2f", e.bytes / seconds / 1e9)
                              : "");
  }
  return out;
}

}  // namespace stepjit::runtime
