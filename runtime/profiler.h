// A per-node replay profiler: STEPJIT_PROFILE=1 (or EnableProfiling) makes the
// executor time every node it runs; the table prints at exit (or on demand).
#ifndef STEPJIT_RUNTIME_PROFILER_H_
#define STEPJIT_RUNTIME_PROFILER_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace stepjit::runtime {

struct ProfileEntry {
  std::string label;  // op or kernel name with its output shape
  int64_t calls = 0;
  double total_ms = 0;
};

// True when STEPJIT_PROFILE is set to a value other than 0, or after
// EnableProfiling(true).
bool ProfilingEnabled();
void EnableProfiling(bool on);

// Adds one timed call to `label`.
void RecordProfile(const std::string& label, double ms);

// The entries so far, most total time first; ResetProfile clears them.
std::vector<ProfileEntry> ProfileSnapshot();
void ResetProfile();
// The snapshot as a text table (label, calls, total ms, ms per call, share).
std::string FormatProfile();

}  // namespace stepjit::runtime

#endif  // STEPJIT_RUNTIME_PROFILER_H_
