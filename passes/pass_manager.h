// The pass registry, pipelines ("canonicalize,cse,dce"), per-pass statistics
// and IR dumps.
//
// Every pass is one row of the table in pass_manager.cc: its pipeline name,
// its entry point, a one-line summary and, for a pass with settings, the
// options it declares. A pipeline is a comma-separated list of those names,
// run in order on one Graph; a pass's options follow its name in braces,
// MLIR-style: "dce,grad-scaler{init_scale=65536 growth_interval=2000},cse".
// After each pass the manager can verify the IR (an error names the pass that
// broke it), write the IR to
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
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ir/graph.h"

namespace stepjit::passes {

// A counter a pass declares in its header, so that readers (the frontend,
// tests) name it by a constant of that pass rather than by a string.
struct Statistic {
  absl::string_view pass;  // the pipeline name of the pass that counts it
  absl::string_view name;  // as printed: "planned peak bytes"
};

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
  void Add(const Statistic& counter, int64_t n) { Add(counter.name, n); }
  int64_t Get(absl::string_view counter) const;  // 0 when never added
};

// Statistics of a pipeline run, one entry per pass name in first-run order.
struct PipelineStats {
  std::vector<std::pair<std::string, PassStats>> passes;

  PassStats& For(absl::string_view pass);  // creates the entry if needed
  const PassStats* Find(absl::string_view pass) const;
  // The counter summed over the runs of its pass; 0 when the pass never ran.
  int64_t Get(const Statistic& counter) const;
  // One line per pass: "cse: runs=1 changed=1 nodes=12->9 nodes merged=3".
  std::string ToString() const;
};

// An option a pass declares: its name in the pipeline text, its type, its
// default (written as in the pipeline text) and a line of help.
enum class OptionType { kInt, kDouble, kBool };
struct PassOptionInfo {
  absl::string_view name;
  OptionType type;
  absl::string_view default_value;
  absl::string_view help;
};

// The option values of one pass in a pipeline: the defaults its table row
// declares, overridden by those the pipeline text sets.
class PassOptions {
 public:
  using Value = std::variant<int64_t, double, bool>;

  PassOptions() = default;
  explicit PassOptions(absl::Span<const PassOptionInfo> declared);

  // Parses `text` as option `name`'s value; InvalidArgument saying what was
  // expected (the caller names the pass).
  absl::Status Set(absl::string_view name, absl::string_view text);
  void Set(absl::string_view name, Value value);  // checked: declared, typed

  // A declared option's value (checked: declared with that type).
  int64_t Int(absl::string_view name) const;
  double Double(absl::string_view name) const;
  bool Bool(absl::string_view name) const;

  // The options the text set, in declaration order: "a=1 b=0.5"; "" if none.
  std::string ToString() const;
  absl::Span<const PassOptionInfo> declared() const { return declared_; }

 private:
  int Index(absl::string_view name) const;  // -1 when not declared

  absl::Span<const PassOptionInfo> declared_;
  std::vector<Value> values_;  // one per declared option
  std::vector<bool> set_;      // whether the pipeline text set it
};

// A state tensor a pass adds to the graph as a state param: the caller
// creates one tensor of this type filled with `initial` and binds it, after
// the traced state, in the order the pipeline declares them.
struct StateParam {
  std::string name;
  ir::TensorType type;
  double initial = 0.0;
};

// A pass: returns whether it changed the graph; records its counters.
using PassFn = absl::StatusOr<bool> (*)(ir::Graph& graph, PassStats& stats);
// A pass with options (PassInfo::options) gets their values.
using ConfiguredPassFn = absl::StatusOr<bool> (*)(ir::Graph& graph,
                                                  const PassOptions& options,
                                                  PassStats& stats);
// The state params a pass adds, for these option values.
using StateFn = std::vector<StateParam> (*)(const PassOptions& options);

struct PassInfo {
  absl::string_view name;
  PassFn run;  // the pass with its options' defaults
  absl::string_view summary;
  absl::Span<const PassOptionInfo> options = {};
  ConfiguredPassFn run_configured = nullptr;  // set when `options` is
  StateFn state = nullptr;                    // set when it adds state
};

// One pass of a parsed pipeline with its option values.
struct PipelineEntry {
  const PassInfo* pass = nullptr;
  PassOptions options;
  // "name" or "name{a=1 b=2}" (the options the text set).
  std::string ToString() const;
};
struct Pipeline {
  std::vector<PipelineEntry> entries;
  // Comma-separated entries; parsing it gives back the same pipeline.
  std::string ToString() const;
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

// Parses `pipeline` ("cse, grad-scaler{growth_interval=5}" — spaces and
// empty entries are ignored) with `registry`. InvalidArgument for an unknown
// pass (listing the known ones), options on a pass that declares none, an
// unknown or repeated option (listing the pass's options), a value of the
// wrong type, a missing '=' or unbalanced braces.
absl::StatusOr<Pipeline> ParsePipelineText(absl::string_view pipeline,
                                           absl::Span<const PassInfo> registry);
absl::StatusOr<Pipeline> ParsePipelineText(absl::string_view pipeline);

// The state params the pipeline's passes add, in pipeline order.
std::vector<StateParam> PipelineState(const Pipeline& pipeline);

// The pass's options, one line each: "  name=<type> (default d): help".
std::string DescribeOptions(const PassInfo& pass);

// A pass entry for pipeline text, with these option values (all printed).
std::string FormatPassEntry(
    absl::string_view pass,
    absl::Span<const std::pair<absl::string_view, PassOptions::Value>> values);

// The passes of `pipeline` (ParsePipelineText's checks).
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

}  // namespace stepjit::passes

#endif  // STEPJIT_PASSES_PASS_MANAGER_H_
