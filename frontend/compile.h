// stepjit::compile(step): trace a training step once, then replay it behind guards.
#ifndef STEPJIT_FRONTEND_COMPILE_H_
#define STEPJIT_FRONTEND_COMPILE_H_

#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "runtime/dispatch.h"
#include "runtime/tensor.h"
#include "training/amp/grad_scaler.h"

namespace stepjit {

enum class Mode { kCompiled, kEager };

// When a compiled step runs its host code in recording mode (shape-only,
// frontend/verify.h) to check that the graph it replays is still what the
// step does: host values baked in as constants, captured tensors rebound,
// parameters frozen, a different path. Only kAlways keeps the promise that
// a replay never returns a stale result.
enum class Verify {
  kAlways,  // every replay (the default)
  // UNSAFE: the first `verify_first` replays of each specialization, then
  // every `verify_every`-th (and every call while the trace reads a captured
  // tensor no guard can see rebound). A change between two sampled calls
  // replays stale results until the next one.
  kSampledUnsafe,
  // UNSAFE: never (except for captured tensors no guard sees): a host value
  // or flag that changes after the trace is silently ignored.
  kOffUnsafe,
};

// How a call with new input sizes is compiled.
enum class Shapes {
  // A call whose arguments differ from a compiled specialization's only in
  // some dims (none of them 0 or 1 on either side) and whose recording
  // (taken on every call) is the same step at other sizes becomes a new
  // concrete shape of that specialization: those dims are symbolic, and
  // the call's recording is compiled for its sizes with no eager trace.
  // Such shapes do not count against max_traces; each specialization keeps
  // up to max_shapes of them compiled.
  kDynamic,
  // Every new input shape is a new specialization, traced eagerly, and
  // counts against max_traces.
  kStatic,
};

struct CompileOptions {
  // kEager turns compilation off: every call runs the step as written.
  Mode mode = Mode::kCompiled;
  // Calls that run eagerly before tracing (optimizers create state lazily).
  int warmup_steps = 1;
  // Traces of any cause (a new argument signature, a module's training
  // flag, a failed state guard, a re-trace that found a changed constant)
  // before calls that would need another one run eagerly (explain() says why).
  int max_traces = 8;
  Shapes shapes = Shapes::kDynamic;
  // With Shapes::kDynamic, the only dims that may be symbolic, each as
  // {argument index, dim} (a dim declared dynamic up front); empty: any
  // dim of any argument. A call whose other dims change is a new
  // specialization.
  std::vector<std::pair<int, int>> dynamic_dims = {};
  // Concrete shapes a specialization with symbolic dims keeps compiled; the
  // least recently used beyond this is dropped (and compiled again from the
  // call's recording if it comes back).
  int max_shapes = 64;
  Verify verify = Verify::kAlways;
  int verify_first = 3;
  int verify_every = 100;
  // The accuracy checker (also STEPJIT_CHECK=1, or =N for the first N
  // replays): the first `check_replays` replays of each specialization run
  // compiled and eagerly from the same state and compare every output and
  // state tensor; a divergence is bisected to the first fusion region that
  // computes differently (or to the graph itself) and reported through
  // check_report(), explain() and stderr. The eager result is kept.
  bool check = false;
  int check_replays = 3;
  std::string name = "train_step";
  // Passes run on each traced graph (STEPJIT_DISABLE=a,b skips some). A step
  // on CUDA also runs gemm-bgrad after the last fuse (the GEMM computes a
  // weight gradient's bias gradient; passes/gemm_bgrad.h).
  std::string pipeline =
      "canonicalize,cse,dce,fuse,dce,sink-regions,bucket-plan,memory-plan";
  // Mixed precision applied by the compiler to a plain f32 step: kBF16 or
  // kF16 runs the autocast pass (amp::Autocast's policy) before `pipeline`;
  // kF32 leaves the step as traced. The eager calls (warmup and tracing)
  // run as written.
  DType amp = DType::kF32;
  // Dynamic loss scaling by the grad-scaler pass: by default on for kF16
  // and off otherwise (bf16 has f32's range), as in PyTorch practice.
  std::optional<bool> loss_scaling = std::nullopt;
  // The scaler's constants (enabled is ignored: see loss_scaling).
  amp::GradScalerOptions scaler = {};
  // A step on CUDA tensors is captured into a CUDA graph on its second
  // replay and relaunched as one graph from then on, where every node can
  // be captured (explain() says why not otherwise).
  bool cuda_graphs = true;
  // On CUDA, runs of consecutive independent fusion regions (the optimizer's
  // per-parameter updates) launch as one multi-region kernel per phase.
  bool cuda_multi_region = true;
};

struct CompileStats {
  int64_t calls = 0;
  int64_t eager_calls = 0;      // warmup, tracing and fallback calls
  int64_t replays = 0;
  int64_t traces = 0;
  int64_t recompiles = 0;       // traces after the first
  int64_t fallbacks = 0;        // calls that ran eagerly after warmup, untraced
  int specializations = 0;      // compiled forms, one per concrete shape
  // Concrete shapes compiled from a call's recording for a specialization
  // with symbolic dims (Shapes::kDynamic; not traces), and those dropped
  // beyond max_shapes.
  int64_t shape_builds = 0;
  int64_t shapes_evicted = 0;
  // The region kernels those shapes run are shape-generic (they read their
  // sizes at run time): the distinct compiled kernels they use, and their
  // regions counted per shape. A new size reuses the code compiled for an
  // earlier one, so shape_kernels stays near one shape's region count.
  int64_t shape_kernels = 0;
  int64_t shape_regions = 0;
  double compile_ms = 0;        // total time spent tracing and building
  // The last trace's compile_ms in parts: the eager step under the tracer,
  // the pass pipeline, and code generation (wall time; regions compile on
  // several threads at once where the backend allows). STEPJIT_LOG=compile
  // prints them, with the slowest regions, at each trace.
  double trace_ms = 0, passes_ms = 0, codegen_wall_ms = 0;
  int ops_per_step = 0;         // ops the eager step dispatches (last trace)
  int kernels_per_step = 0;     // kernel launches per replay (last trace)
  int64_t planned_peak_bytes = 0;  // memory-plan's estimate (last trace)
  int native_regions = 0;       // fusion regions running as generated code (last trace)
  // Fusion regions run op by op (last trace; explain() says why).
  int interpreted_regions = 0;
  // With loss scaling: the current scale and the steps skipped for inf/NaN
  // grads so far (read from the device when stats() is called), else 0.
  double loss_scale = 0;
  int64_t skipped_steps = 0;
  int cached_regions = 0;       // of those, loaded from the kernel cache (last trace)
  double codegen_ms = 0;        // kernel lowering + compile or cache load (last trace)
  std::string passes;           // per-pass statistics (last trace)
  // Shape-only re-traces run, the time they took, and how many found the
  // step changed (each of those retraced).
  int64_t verifications = 0;
  double verify_ms = 0;
  // The ops those recordings compared, and of them the ops of library
  // routines (backward, optimizer steps) taken whole from the record: the
  // same routine on the same tensors with the same options does the same ops.
  int64_t verify_ops = 0;
  int64_t verify_routine_ops = 0;
  int64_t verify_mismatches = 0;
  // Of those mismatches, calls that matched another specialization of the
  // same signature (a path the step took before) and replayed it.
  int64_t sibling_hits = 0;
  // Recording calls after which the step kept tensors it created (a module
  // cache rebuilt, lazily created optimizer state): each ran its recording
  // op by op to give them their values.
  int64_t kept_calls = 0;
  // Accuracy-checker runs and how many found a divergence.
  int64_t checks = 0;
  int64_t check_failures = 0;
  // CPU: the threads the last trace's replays run on now, chosen by timing
  // them (program/team_tuner.h; 0 where not tuned: CUDA, one core,
  // STEPJIT_ADAPTIVE_THREADS=0), and how many times other counts were tried.
  int replay_threads = 0;
  int64_t thread_probes = 0;
};
std::ostream& operator<<(std::ostream& os, const CompileStats& s);

namespace frontend {

// The type-erased engine behind CompiledStep.
class StepCompiler {
 public:
  explicit StepCompiler(CompileOptions options);
  ~StepCompiler();

  // One call of the step on `inputs`. Returns the replayed outputs, or
  // nullopt after running `eager` (whose outputs it may have traced).
  std::optional<std::vector<Tensor>> Call(
      const std::vector<Tensor>& inputs,
      const std::function<std::vector<Tensor>()>& eager);

  CompileStats stats() const;
  std::string explain() const;
  void dump_ir(std::ostream& os) const;
  // The accuracy checker's last report ("" before any check ran).
  std::string check_report() const;
  // Runs the accuracy checker on the next `replays` replays.
  void check_next(int replays);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

template <typename>
inline constexpr bool kNotAStepResult = false;
// What a step may return: nothing, a Tensor, or tensors as a std::pair,
// std::tuple or std::vector (whose length may differ from call to call: a
// different length is a different step, traced again).
template <typename R>
struct StepResult {
  static_assert(kNotAStepResult<R>,
                "a compiled step returns void, a Tensor, std::pair<Tensor, "
                "Tensor>, std::tuple<Tensor, ...> or std::vector<Tensor>");
};
template <>
struct StepResult<void> {
  static std::vector<Tensor> Flatten() { return {}; }
};
template <>
struct StepResult<Tensor> {
  static std::vector<Tensor> Flatten(const Tensor& t) { return {t}; }
  static Tensor Unflatten(const std::vector<Tensor>& v) { return v.at(0); }
};
template <>
struct StepResult<std::pair<Tensor, Tensor>> {
  static std::vector<Tensor> Flatten(const std::pair<Tensor, Tensor>& p) {
    return {p.first, p.second};
  }
  static std::pair<Tensor, Tensor> Unflatten(const std::vector<Tensor>& v) {
    return {v.at(0), v.at(1)};
  }
};
template <>
struct StepResult<std::vector<Tensor>> {
  static std::vector<Tensor> Flatten(const std::vector<Tensor>& v) { return v; }
  static std::vector<Tensor> Unflatten(const std::vector<Tensor>& v) {
    return v;
  }
};
template <typename... Ts>
struct StepResult<std::tuple<Ts...>> {
  static_assert((std::is_same_v<Ts, Tensor> && ...), "a step returns tensors");
  static std::vector<Tensor> Flatten(const std::tuple<Ts...>& t) {
    return std::apply([](const auto&... x) { return std::vector<Tensor>{x...}; }, t);
  }
  static std::tuple<Ts...> Unflatten(const std::vector<Tensor>& v) {
    return [&]<size_t... I>(std::index_sequence<I...>) {
      return std::tuple<Ts...>(v.at(I)...);
    }(std::index_sequence_for<Ts...>{});
  }
};

}  // namespace frontend

// A compiled step: call it like the step it wraps.
template <typename F>
class CompiledStep {
 public:
  CompiledStep(F step, CompileOptions options)
      : step_(std::move(step)),
        core_(std::make_shared<frontend::StepCompiler>(std::move(options))) {}

  template <typename... Args>
  auto operator()(const Args&... args) {
    static_assert((std::is_convertible_v<const Args&, const Tensor&> && ...),
                  "compiled steps take tensor arguments");
    using R = std::decay_t<std::invoke_result_t<F&, const Args&...>>;
    std::vector<Tensor> inputs = {args...};
    if constexpr (std::is_void_v<R>) {
      core_->Call(inputs, [&] {
        step_(args...);
        return std::vector<Tensor>{};
      });
    } else {
      std::optional<R> eager_result;
      // Called inside another compiled step's shape-only re-trace, the call
      // itself is shape-only (it then runs as written).
      const bool shape_only_call = runtime::InMetaMode();
      auto replayed = core_->Call(inputs, [&] {
        R result = step_(args...);
        std::vector<Tensor> flat = frontend::StepResult<R>::Flatten(result);
        // A shape-only re-trace's results are not the call's.
        if (shape_only_call || !runtime::InMetaMode())
          eager_result.emplace(std::move(result));
        return flat;
      });
      if (replayed) return frontend::StepResult<R>::Unflatten(*replayed);
      return *std::move(eager_result);
    }
  }

  CompileStats stats() const { return core_->stats(); }
  std::string explain() const { return core_->explain(); }
  void dump_ir(std::ostream& os) const { core_->dump_ir(os); }
  std::string check_report() const { return core_->check_report(); }
  void check_next(int replays = 1) { core_->check_next(replays); }

 private:
  F step_;
  std::shared_ptr<frontend::StepCompiler> core_;
};

template <typename F>
CompiledStep<F> compile(F step, CompileOptions options = {}) {
  return CompiledStep<F>(std::move(step), std::move(options));
}

}  // namespace stepjit

#endif  // STEPJIT_FRONTEND_COMPILE_H_
