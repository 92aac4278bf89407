// The pass registry, pipelines ("canonicalize,cse,dce"), per-pass statistics
// and IR dumps.
//
// Every pass is one row of the table in pass_manager.cc: its pipeline name,
// its entry point and a one-line summary. A pipeline is a comma-separated list
// of those names, run in order on one Graph. After each pass the manager can
// verify the IR (an error names the pass that broke it), write the IR to
// `<dump_dir>/NNN-<pass>.ir`, and call a hook (stepjit-opt's
// --print-after-all). STEPJIT_DUMP=<dir> and STEPJIT_DISABLE=<p1,p2> reach the
// manager through FromEnvironment().
#ifndef STEPJIT_PASSES_PASS_MANAGER_H_
#define STEPJIT_PASSES_PASS_MANAGER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ir/graph.h"

namespace stepjit::passes {

// What one pass did over all of its runs in a pipeline. Node counts are of
// the top-level graph (what the executor launches), summed over runs, so
// nodes_before - nodes_after is the pass's net effect.
struct PassStats {
  int64_t runs = 0;
  int64_t changed = 0;  // runs that reported a change
  int64_t skipped = 0;  // times it was disabled
  int64_t nodes_before = 0;
  int64_t nodes_after = 0;
  // Pass-specific counts ("nodes removed", "groups formed", "bytes saved").
  std::map<std::string, int64_t, std::less<>> counters;

  void Add(absl::string_view counter, int64_t n = 1);
  int64_t Get(absl::string_view counter) const;  // 0 when never added
};

// Statistics of a pipeline run, one entry per pass name in first-run order.
struct PipelineStats {
  std::vector<std::pair<std::string, PassStats>> passes;

  PassStats& For(absl::string_view pass);  // creates the entry if needed
  const PassStats* Find(absl::string_view pass) const;
  // One line per pass: "cse: runs=1 changed=1 nodes=12->9 nodes merged=3".
  std::string ToString() const;
};

// A pass: returns whether it changed the graph; records its counters.
using PassFn = absl::StatusOr<bool> (*)(ir::Graph& graph, PassStats& stats);

struct PassInfo {
  absl::string_view name;
  PassFn run;
  absl::string_view summary;
};

// Every registered pass, in table order.
std::vector<PassInfo> ListPasses();
// The registered pass called `name`, or nullptr.
const PassInfo* FindPass(absl::string_view name);

struct PipelineOptions {
  // Run ir::Verify after every pass; a failure names the pass.
  bool verify_each = true;
  // When non-empty, write the IR after each pass to `<dump_dir>/NNN-<pass>.ir`
  // (NNN is the pass's 1-based position in the pipeline; the tracer writes
  // 000-trace.ir). The directory is created if missing.
  std::string dump_dir;
  // Passes to skip (recorded as skipped in the stats); names must be known.
  std::vector<std::string> disabled;
  // Called after every pass that ran (stepjit-opt --print-after-all).
  std::function<void(absl::string_view pass, const ir::Graph& graph)>
      after_pass;
};

// Defaults plus STEPJIT_DUMP (dump_dir) and STEPJIT_DISABLE (comma list).
PipelineOptions FromEnvironment();

// Where a pipeline's result runs.
enum class Target { kCpu, kCuda };
// `pipeline` as it runs for `target`. On CUDA, gemm-bgrad follows the last
// fuse (unless the pipeline names it): cuBLASLt's BGRADB epilogue sums a
// weight gradient's bias gradient while it reads dY. On the CPU the sum
// stays a kernel of its own, keeping replays bit-identical to the eager step.
std::string PipelineForTarget(absl::string_view pipeline, Target target);

// Splits `pipeline` ("cse, dce" — spaces and empty entries are ignored) and
// looks each name up in `registry`; InvalidArgument listing the known passes
// for an unknown name.
absl::StatusOr<std::vector<const PassInfo*>> ParsePipeline(
    absl::string_view pipeline, absl::Span<const PassInfo> registry);
absl::StatusOr<std::vector<const PassInfo*>> ParsePipeline(
    absl::string_view pipeline);

// Runs `pipeline` on `graph`. Every name (pipeline and disabled) is checked
// before anything runs. Errors: a pass's own error prefixed "pass `<name>`: ",
// an invalid result "after pass `<name>`: <verifier message>" (Internal), an
// unwritable dump file (Internal). `stats` may be null. The overload taking a
// registry serves tests and tools that run passes outside the table.
absl::Status RunPipeline(ir::Graph& graph, absl::string_view pipeline,
                         const PipelineOptions& options, PipelineStats* stats);
absl::Status RunPipeline(ir::Graph& graph, absl::string_view pipeline,
                         const PipelineOptions& options, PipelineStats* stats,
                         absl::Span<const PassInfo> registry);

// Value replacement during a forward walk, shared by the rewriting passes:
// record `from -> to`, then apply the map to each later node's inputs (which
// covers assign operands) and finally to the graph's returns. Values of one
// graph only: a fusion body gets its own replacer.
class ValueReplacer {
 public:
  void Replace(ir::Value* from, ir::Value* to) { map_[from] = to; }
  // `v` after all recorded replacements (chains are followed).
  ir::Value* Resolve(ir::Value* v) const;
  // Rewrites the node's inputs; true if any changed.
  bool ApplyTo(ir::Node& node) const;
  // Rewrites the graph's returns; true if any changed.
  bool ApplyToReturns(ir::Graph& graph) const;
  bool empty() const { return map_.empty(); }

 private:
  absl::flat_hash_map<ir::Value*, ir::Value*> map_;
};

}  // namespace stepjit::passes

#endif  // STEPJIT_PASSES_PASS_MANAGER_H_
