// A per-node replay profiler: STEPJIT_PROFILE=1 (or EnableProfiling) makes the
// executor time every node it runs; the table prints at exit (or on demand).
#ifndef STEPJIT_RUNTIME_PROFILER_H_
#define STEPJIT_RUNTIME_PROFILER_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace stepjit::runtime {

// What a node is, and the work one call of it does: the FLOPs of a GEMM
// (2 per multiply-add) and the bytes of every tensor it reads and writes
// once (its operands and results at their sizes: the least it must move).
enum class ProfileKind : uint8_t { kOp, kGemm, kRegion };
struct ProfileWork {
  ProfileKind kind = ProfileKind::kOp;
  double flops = 0;
  double bytes = 0;
};

struct ProfileEntry {
  std::string label;  // op or kernel name with its output shape
  int64_t calls = 0;
  double total_ms = 0;
  ProfileKind kind = ProfileKind::kOp;
  double flops = 0, bytes = 0;  // summed over the calls
};

// True when STEPJIT_PROFILE is set to a value other than 0, or after
// EnableProfiling(true).
bool ProfilingEnabled();
void EnableProfiling(bool on);

// Adds one timed call to `label`.
void RecordProfile(const std::string& label, double ms,
                   const ProfileWork& work = {});

// The entries so far, most total time first; ResetProfile clears them.
std::vector<ProfileEntry> ProfileSnapshot();
void ResetProfile();
// The snapshot as a text table (label, calls, total ms, ms per call, share,
// and the achieved GFLOP/s of GEMMs and GB/s of every node with bytes).
std::string FormatProfile();

}  // namespace stepjit::runtime

#endif  // STEPJIT_RUNTIME_PROFILER_H_
