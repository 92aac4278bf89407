// StepCompiler: warmup, tracing, guard checks, specializations, fallback and
// reports.
#include "frontend/compile.h"

#include <chrono>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "config/env.h"
#include "frontend/checker.h"
#include "frontend/event_log.h"
#include "frontend/guards.h"
#include "frontend/specialization.h"
#include "frontend/specializer.h"
#include "frontend/trace_record.h"
#include "frontend/tracer.h"
#include "frontend/verify.h"
#include "ir/parse_number.h"
#include "ir/printer.h"
#include "passes/grad_scaler.h"
#include "passes/pass_manager.h"
#include "program/executor.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/dispatch.h"
#include "runtime/profiler.h"
#include "runtime/thread_pool.h"

namespace stepjit {

std::ostream& operator<<(std::ostream& os, const CompileStats& s) {
  os << "calls " << s.calls << ", replays " << s.replays << ", eager calls "
     << s.eager_calls << " (fallbacks " << s.fallbacks << "), traces "
     << s.traces << " (recompiles " << s.recompiles << "), specializations "
     << s.specializations;
  if (s.shape_builds > 0) {
    os << " (" << s.shape_builds << " built for new sizes from a recording, "
       << s.shapes_evicted << " dropped; their " << s.shape_regions
       << " regions run " << s.shape_kernels << " shape-generic kernels)";
  }
  os << ", compile " << s.compile_ms << " ms, ops/step " << s.ops_per_step
     << ", kernels/step " << s.kernels_per_step << " (" << s.native_regions
     << " regions as native code, " << s.interpreted_regions << " interpreted, "
     << s.cached_regions << " from the kernel cache, codegen " << s.codegen_ms
     << " ms), planned peak " << s.planned_peak_bytes << " B";
  if (s.replay_threads > 0) {
    os << ", replays on " << s.replay_threads << " thread"
       << (s.replay_threads == 1 ? "" : "s") << " (" << s.thread_probes
       << " probes of other counts)";
  }
  return os;
}

namespace frontend {
namespace {

bool LogHas(const char* topic) {
  const std::vector<std::string> topics =
      config::ListOrThrow(config::Env::kLog);
  return absl::c_linear_search(topics, topic);
}
bool LogGuards() {
  static const bool on = LogHas("guards");
  return on;
}
// Writes a lifted number into its 0-d argument tensor.
void SetScalar(Tensor& t, double value) {
  if (t.device().is_cpu() && t.dtype() == DType::kF32) {
    *static_cast<float*>(t.data_ptr()) = static_cast<float>(value);
  } else if (t.device().is_cpu() && t.dtype() == DType::kF64) {
    *static_cast<double*>(t.data_ptr()) = value;
  } else {
    NoGradGuard no_grad;
    t.fill_(value);
  }
}

bool LogCompile() {
  static const bool on = LogHas("compile");
  return on;
}

// STEPJIT_LOG=compile: where one trace's compile time went.
void PrintCompileTimes(const std::string& name, double total_ms,
                       const CompileStats& s, const runtime::Program* program) {
  std::string line = absl::StrFormat(
      "stepjit[%s]: trace %d compiled in %.1f ms: the eager step under the "
      "tracer %.1f, passes %.1f, codegen %.1f, the rest %.1f",
      name, static_cast<int>(s.traces), total_ms, s.trace_ms, s.passes_ms,
      s.codegen_wall_ms,
      total_ms - s.trace_ms - s.passes_ms - s.codegen_wall_ms);
  if (program != nullptr) {
    const std::vector<runtime::RegionCompileTime> t =
        program->region_compile_times();
    absl::StrAppendFormat(&line,
                          " (%d regions, %d from the kernel cache, %.1f ms "
                          "summed over %d threads)",
                          static_cast<int>(t.size()), s.cached_regions,
                          s.codegen_ms, runtime::NumThreads());
    for (size_t i = 0; i < t.size() && i < 3; ++i) {
      absl::StrAppendFormat(&line, "%s %s %.1f ms%s",
                            i == 0 ? "; slowest:" : ",", t[i].kernel, t[i].ms,
                            t[i].cache_hit ? " (cached)" : "");
    }
  }
  std::cerr << line << "\n";
}

// A call's span in the profile (runtime/profiler.h), named at its end by
// what the call did; device spans are read before it ends, so that on CUDA
// it covers the call's device work.
class StepProfile {
 public:
  StepProfile(const std::string& name, const CompileStats& stats)
      : span_(runtime::kCatStep),
        name_(name),
        stats_(stats),
        replays_(stats.replays),
        traces_(stats.traces) {}
  ~StepProfile() {
    if (!span_.active() || std::uncaught_exceptions() > 0) return;
    runtime::FlushDeviceTimers();
    span_.set_name(absl::StrCat(name_, " (",
                                stats_.replays > replays_ ? "compiled"
                                : stats_.traces > traces_ ? "traced"
                                                          : "eager",
                                ")"));
  }

 private:
  runtime::ProfileSpan span_;
  const std::string& name_;
  const CompileStats& stats_;
  const int64_t replays_, traces_;
};

}  // namespace

struct StepCompiler::Impl {
  CompileOptions options;
  std::unique_ptr<Specializer> specializer;
  CompileStats stats;
  std::vector<std::unique_ptr<Specialization>> specs;
  const Specialization* last = nullptr;
  EventLog events;
  // The accuracy checker: replays of each new specialization to check
  // (options.check, STEPJIT_CHECK), replays asked for by check_next(), and
  // the last report.
  int check_replays = 0;
  int check_pending = 0;
  std::string check_report;
  // Set when a recording could not stand for a call in a way that would
  // repeat (the step keeps tensors it creates, then stops early): the step
  // then runs eagerly.
  std::string stopped_reason;
  int next_family = 0;
  // Per family: the compiled kernels (cache digests) of its shape-generic
  // shapes, and their regions counted per shape.
  absl::flat_hash_map<int, absl::flat_hash_set<std::string>> shape_kernels;
  absl::flat_hash_map<int, int64_t> shape_regions;
  bool dims_checked = false;  // options.dynamic_dims against the first call
  // The RunsEagerly causes already warned about.
  std::set<std::string> warned_causes;

  // Causes after which calls run eagerly: said on stderr the first time
  // each happens (the rest are counted: explain(), and a line when the step
  // is destroyed), so that a host read in the step is not silently slow.
  static bool RunsEagerly(const std::string& cause) {
    return cause == "eager-only" || cause == "trace limit";
  }

  void Event(const std::string& cause, std::string what) {
    if (LogGuards()) {
      std::cerr << "stepjit[" << options.name << "]: " << what << "\n";
    } else if (RunsEagerly(cause) && warned_causes.insert(cause).second) {
      std::cerr << "stepjit[" << options.name << "]: warning: " << what
                << " (calls like this one run eagerly; said once, counted in "
                   "explain())\n";
    }
    events.Add(cause, std::move(what));
  }

  ~Impl() {
    if (warned_causes.empty() || stats.fallbacks == 0) return;
    std::cerr << "stepjit[" << options.name << "]: " << stats.fallbacks
              << " of " << stats.calls << " calls ran eagerly after tracing (";
    const char* sep = "";
    for (const std::string& cause : warned_causes) {
      std::cerr << sep << cause << ": " << events.count(cause);
      sep = ", ";
    }
    std::cerr << "); explain() says why\n";
  }

  // max_traces counts specializations; replacing one (a state guard that
  // failed for good) counts against a bound of its own, so that a step that
  // rebinds a parameter every call stops retracing.
  int Families() const {
    absl::flat_hash_set<int> seen;
    for (const auto& s : specs) seen.insert(s->family);
    return static_cast<int>(seen.size());
  }
  std::string TraceLimitText() const {
    return Families() >= options.max_traces
               ? absl::StrCat(Families(),
                              " specializations already made (max_traces)")
               : absl::StrCat(stats.traces,
                              " traces already made (2 x max_traces, when "
                              "specializations were replaced)");
  }
  bool TraceLimitReached() const {
    return Families() >= options.max_traces ||
           stats.traces >= 2 * static_cast<int64_t>(options.max_traces);
  }

  // Runs the step eagerly under the tracer and compiles what it recorded.
  std::vector<Tensor> TraceCall(
      Signature signature, const std::vector<Tensor>& inputs,
      const std::function<std::vector<Tensor>()>& eager,
      Specialization* replace) {
    const auto start = std::chrono::steady_clock::now();
    runtime::ProfileSpan trace_span(runtime::kCatCompile);
    if (trace_span.active())
      trace_span.set_name(absl::StrCat("trace ", options.name));
    Tracer tracer(options.name);
    tracer.Begin(inputs);
    std::vector<Tensor> outputs;
    try {
      outputs = eager();
    } catch (...) {
      tracer.End({});
      throw;
    }
    Trace trace = tracer.End(outputs);
    trace_span.End();
    stats.trace_ms = std::chrono::duration<double, std::milli>(
                         std::chrono::steady_clock::now() - start)
                         .count();
    const Device device = StepDevice(trace, inputs);
    runtime::ProfileSpan build_span(runtime::kCatCompile);
    if (build_span.active())
      build_span.set_name(absl::StrCat("compile ", options.name));
    Install(Build(std::move(signature), std::move(trace), device), replace,
            start);
    return outputs;
  }

  std::unique_ptr<Specialization> Build(Signature signature, Trace trace,
                                        Device device,
                                        bool shape_generic = false) {
    auto spec =
        specializer->Build(std::move(signature), std::move(trace), device,
                           static_cast<size_t>(stats.traces), shape_generic);
    if (spec->program) spec->check_left = check_replays;
    return spec;
  }

  // Adds `spec` (in place of `replace` when set) and accounts for the trace.
  // `family` >= 0: a new concrete shape of that family (built from a
  // recording, not traced); the family's least recently used shape beyond
  // max_shapes is dropped (never `keep`). Else the spec heads a family of
  // its own, or takes the one of the spec it replaces.
  Specialization* Install(std::unique_ptr<Specialization> spec,
                          Specialization* replace,
                          std::chrono::steady_clock::time_point start,
                          int family = -1,
                          const Specialization* keep = nullptr) {
    const double this_ms = std::chrono::duration<double, std::milli>(
                               std::chrono::steady_clock::now() - start)
                               .count();
    stats.compile_ms += this_ms;
    if (family >= 0) {
      spec->family = family;
      // (In place of `replace`: a shape rebuilt, not a new one.)
      if (replace == nullptr) ++stats.shape_builds;
    } else {
      spec->family = replace != nullptr ? replace->family : next_family++;
      ++stats.traces;
      if (stats.traces > 1) ++stats.recompiles;
    }
    spec->last_used = stats.calls;
    if (spec->shape_generic && spec->program) {
      for (const runtime::RegionCompileTime& r :
           spec->program->region_compile_times()) {
        if (!r.cache_key.empty() &&
            shape_kernels[spec->family].insert(r.cache_key).second)
          ++stats.shape_kernels;
      }
      shape_regions[spec->family] += spec->program->compiled_regions();
      stats.shape_regions += spec->program->compiled_regions();
    }
    stats.ops_per_step = spec->trace.num_ops;
    if (!spec->pass_stats.empty()) {
      stats.passes = spec->pass_stats;
      stats.planned_peak_bytes = spec->planned_peak_bytes;
    }
    if (spec->program) {
      stats.kernels_per_step = spec->program->kernels_per_run();
      stats.native_regions = spec->program->compiled_regions();
      stats.interpreted_regions =
          static_cast<int>(spec->program->interpreted_regions().size());
      stats.cached_regions = spec->program->cached_regions();
      stats.codegen_ms = spec->program->codegen_ms();
    }
    stats.passes_ms = spec->passes_ms;
    stats.codegen_wall_ms =
        spec->program ? spec->program->codegen_wall_ms() : spec->build_ms;
    if (LogCompile())
      PrintCompileTimes(options.name, this_ms, stats,
                        spec->program ? &*spec->program : nullptr);
    if (spec->eager_only)
      Event("eager-only", absl::StrCat("marked eager-only: ", spec->reason));
    size_t index;
    if (replace != nullptr) {
      for (index = 0; specs[index].get() != replace; ++index) {
      }
      specs[index] = std::move(spec);
    } else {
      index = specs.size();
      specs.push_back(std::move(spec));
    }
    Specialization* installed = specs[index].get();
    last = installed;
    if (family >= 0) EvictShapes(family, installed, keep);
    stats.specializations = static_cast<int>(specs.size());
    return installed;
  }

  // Drops the least recently used concrete shapes of `family` beyond
  // max_shapes, except `a` and `b`.
  void EvictShapes(int family, const Specialization* a,
                   const Specialization* b) {
    for (;;) {
      int count = 0;
      size_t oldest = specs.size();
      for (size_t i = 0; i < specs.size(); ++i) {
        const Specialization& t = *specs[i];
        if (t.family != family) continue;
        ++count;
        if (&t != a && &t != b &&
            (oldest == specs.size() || t.last_used < specs[oldest]->last_used))
          oldest = i;
      }
      if (count <= options.max_shapes || oldest == specs.size()) return;
      if (last == specs[oldest].get()) last = nullptr;
      specs.erase(specs.begin() + static_cast<std::ptrdiff_t>(oldest));
      ++stats.shapes_evicted;
    }
  }

  // Whether a call with `sig` may be a new concrete shape of `t`: shapes
  // are dynamic, `t` replays, and the call differs from it only in input
  // sizes that may be symbolic.
  bool SizesOnlyDiffer(const Specialization& t, const Signature& sig) const {
    return options.shapes == Shapes::kDynamic && !t.eager_only &&
           !DimsOnlyDiff(t.signature, sig, options.dynamic_dims).empty();
  }
  // ... and its recording `now` is `t`'s step at other sizes.
  bool IsShapeOf(const Specialization& t, const Signature& sig,
                 const TraceRecord& now) const {
    return SizesOnlyDiffer(t, sig) && SameUpToSizes(t.record, now);
  }
  // The specialization whose family a build from `now` joins: `s`, else
  // another one the call is a new shape of; null when none (a call with
  // `s`'s own signature that recorded something new is a new path).
  Specialization* ShapeSource(Specialization& s, const Signature& sig,
                              const TraceRecord& now) {
    if (IsShapeOf(s, sig, now)) return &s;
    if (s.signature == sig) return nullptr;
    for (auto& t : specs) {
      if (t.get() != &s && CheckFlagGuards(t->trace).empty() &&
          IsShapeOf(*t, sig, now))
        return t.get();
    }
    return nullptr;
  }

  // A new concrete shape of `s`'s family from the recording `now` (which it
  // takes): the host numbers `s` lifted stay arguments.
  Specialization* BuildShape(const Specialization& s, Signature sig,
                             ShapeOnlyTrace& now,
                             const std::vector<Tensor>& inputs,
                             std::chrono::steady_clock::time_point start) {
    TraceRecord& record = now.trace.record;
    // The numbers the family takes as arguments, and those whose value
    // differs from `s`'s (a number changing with the shape).
    for (size_t i : FamilyLifted(s.family)) {
      if (IsLiftable(record.nodes[i])) record.nodes[i].lifted = true;
    }
    for (size_t i = 0; i < record.nodes.size(); ++i) {
      TraceRecord::Node& n = record.nodes[i];
      const TraceRecord::Node& was = s.record.nodes[i];
      if (!n.lifted && IsLiftable(n) && IsLiftable(was) &&
          n.attrs.GetDouble(ir::AttrKey::kValue) !=
              was.attrs.GetDouble(ir::AttrKey::kValue))
        n.lifted = true;
    }
    Event("new shape",
          absl::StrCat("a concrete shape of specialization ", Head(s.family),
                       " compiled for ", DescribeSignature(sig),
                       " from the call's recording (symbolic dims: ",
                       DescribeDims(DimsOnlyDiff(s.signature, sig,
                                                 options.dynamic_dims)),
                       ")"));
    const Device device = StepDevice(now.trace, inputs);
    return Install(Build(std::move(sig), std::move(now.trace), device,
                         /*shape_generic=*/true),
                   nullptr, start, s.family, &s);
  }

  // The record nodes any specialization of `family` takes as arguments.
  std::vector<size_t> FamilyLifted(int family) const {
    std::vector<size_t> all;
    for (const auto& t : specs) {
      if (t->family != family) continue;
      for (size_t i : t->lifted) {
        if (!absl::c_linear_search(all, i)) all.push_back(i);
      }
    }
    absl::c_sort(all);
    return all;
  }

  // Why a call with other sizes than `s` was not a new shape of it.
  std::string ShapeTextFor(const Specialization& s,
                           const Signature& sig) const {
    if (DimsOnlyDiff(s.signature, sig, {}).empty()) return "";
    if (options.shapes == Shapes::kStatic)
      return " (Shapes::kStatic: each input shape is a specialization)";
    if (DimsOnlyDiff(s.signature, sig, options.dynamic_dims).empty())
      return " (a dim outside CompileOptions::dynamic_dims changed)";
    return " (at these sizes the step records other ops: a host branch on "
           "a size, so a specialization of its own)";
  }

  // A compiled specialization the call differs from only in sizes that may
  // be symbolic (the last one replayed first), whose flags hold: the call
  // may be a new concrete shape of it. Null when none.
  Specialization* ShapeCandidate(const Signature& sig) {
    auto fits = [&](const Specialization& t) {
      return SizesOnlyDiffer(t, sig) && CheckFlagGuards(t.trace).empty();
    };
    if (last != nullptr && fits(*last))
      return const_cast<Specialization*>(last);
    for (auto& t : specs) {
      if (fits(*t)) return t.get();
    }
    return nullptr;
  }

  // For the head of a family with more than one concrete shape, a line
  // naming its symbolic dims, the sizes seen and the shapes kept.
  std::string SymbolicDimsText(size_t head) const {
    const Specialization& h = *specs[head];
    std::map<std::pair<int, int>, std::pair<int64_t, int64_t>> range;
    int shapes = 0;
    for (const auto& t : specs) {
      if (t->family != h.family) continue;
      ++shapes;
      for (const auto& at : DimsOnlyDiff(h.signature, t->signature, {})) {
        const int64_t a = h.signature.inputs[at.first].shape[at.second];
        const int64_t b = t->signature.inputs[at.first].shape[at.second];
        auto [it, fresh] =
            range.try_emplace(at, std::min(a, b), std::max(a, b));
        if (!fresh) {
          it->second.first = std::min(it->second.first, b);
          it->second.second = std::max(it->second.second, b);
        }
      }
    }
    if (range.empty()) return "";
    std::vector<std::string> dims;
    for (const auto& [at, r] : range) {
      dims.push_back(absl::StrCat("x", at.first, " dim ", at.second, " (",
                                  r.first, "..", r.second, ")"));
    }
    std::string kernels;
    if (auto it = shape_kernels.find(h.family); it != shape_kernels.end()) {
      kernels = absl::StrCat(
          "; the shapes built from recordings run shape-generic kernels "
          "(sizes read at run time): ",
          it->second.size(), " compiled kernels for their ",
          shape_regions.at(h.family), " regions");
    }
    return absl::StrCat(
        "  symbolic dims: ", absl::StrJoin(dims, ", "), "; ", shapes,
        " concrete shapes compiled (each from its first recording; at most ",
        options.max_shapes, " kept, least recently used dropped)", kernels,
        "\n");
  }

  static std::string DescribeDims(const std::vector<std::pair<int, int>>& d) {
    std::vector<std::string> parts;
    for (const auto& [arg, dim] : d)
      parts.push_back(absl::StrCat("x", arg, " dim ", dim));
    return absl::StrJoin(parts, ", ");
  }

  // A call that needs a new trace (`cause`, `what`): traces it, or runs it
  // eagerly once max_traces traces exist.
  std::optional<std::vector<Tensor>> Retrace(
      const std::string& cause, const std::string& what, Signature sig,
      const std::vector<Tensor>& inputs,
      const std::function<std::vector<Tensor>()>& eager,
      Specialization* replace) {
    ++stats.eager_calls;
    if (TraceLimitReached()) {
      Event("trace limit",
            absl::StrCat("running eagerly: ", what, "; ", TraceLimitText()));
      ++stats.fallbacks;
      eager();
      return std::nullopt;
    }
    if (!what.empty()) Event(cause, absl::StrCat("recompiling: ", what));
    TraceCall(std::move(sig), inputs, eager, replace);
    return std::nullopt;
  }

  bool ShouldVerify(const Specialization& s) const {
    if (!s.unguarded.empty()) return true;
    switch (options.verify) {
      case Verify::kAlways:
        return true;
      case Verify::kOffUnsafe:
        return false;
      case Verify::kSampledUnsafe:
        return s.replays < options.verify_first ||
               (options.verify_every > 0 &&
                s.replays % options.verify_every == 0);
    }
    return true;
  }

  // Whether `t` (not `except`) is compiled for `sig` and its flag and state
  // guards hold now: one the call could replay if its record fits.
  static bool Replayable(const Specialization& t, const Signature& sig,
                         const Specialization* except) {
    return &t != except && !t.eager_only && t.signature == sig &&
           CheckFlagGuards(t.trace).empty() &&
           CheckStateGuards(t.trace, t.state_guards).empty();
  }

  // Another specialization with `sig` whose guards hold and whose record is
  // what the step did now (a path the step took before), or nullptr.
  Specialization* Sibling(const Signature& sig, const TraceRecord& now,
                          const Specialization* except) {
    for (auto& t : specs) {
      if (Replayable(*t, sig, except) && DiffTraces(t->record, now).empty())
        return t.get();
    }
    return nullptr;
  }

  // Writes this call's values of `t`'s lifted numbers, from the recording,
  // into the tensors its program reads them from.
  static void SetLifted(Specialization& t, ShapeOnlyTrace& now) {
    if (t.lifted.empty()) return;
    size_t k = 0;
    auto set = [&](const ir::Attrs& attrs) {
      SJ_CHECK(k < t.lifted_inputs.size(), "more lifted values than the ",
               t.lifted_inputs.size(), " arguments");
      SetScalar(t.lifted_inputs[k++], attrs.GetDouble(ir::AttrKey::kValue));
    };
    if (now.trace.matched && now.expected == &t.record) {
      // Matched: the values are among the attributes kept for the nodes
      // the record left out.
      for (const auto& [index, attrs] : now.trace.unfilled_live) {
        if (t.record.nodes[index].lifted) set(attrs);
      }
    } else {
      const TraceRecord& r = FullRecord(now);
      for (size_t index : t.lifted) set(r.nodes[index].attrs);
    }
    SJ_CHECK(k == t.lifted_inputs.size(), "lifted values: ", k, " for ",
             t.lifted_inputs.size(), " arguments");
  }

  // The call recorded what `s` (or another specialization of `sig`)
  // compiled except for the values of some host numbers: rebuilds it with
  // those (and the ones it lifted before) as arguments, in its place, from
  // the recording (which it takes). Null when there is no such
  // specialization or no trace left to make.
  Specialization* Lift(Specialization& s, const Signature& sig,
                       ShapeOnlyTrace& now, const std::vector<Tensor>& inputs,
                       std::chrono::steady_clock::time_point start) {
    TraceRecord& record = now.trace.record;
    FullRecord(now);
    Specialization* from = nullptr;
    std::vector<size_t> changed = ScalarOnlyDiff(s.record, record);
    if (!changed.empty()) from = &s;
    for (size_t i = 0; from == nullptr && i < specs.size(); ++i) {
      Specialization* c = specs[i].get();
      if (!Replayable(*c, sig, &s)) continue;
      changed = ScalarOnlyDiff(c->record, record);
      if (!changed.empty()) from = c;
    }
    if (from == nullptr) return nullptr;
    // The first lift in a family rebuilds as a trace; later ones (another
    // concrete shape meeting the change) as new shapes of the family.
    const bool family_lifted = !FamilyLifted(from->family).empty();
    if (!family_lifted && TraceLimitReached()) return nullptr;
    std::string what;
    for (size_t i : changed) {
      record.nodes[i].lifted = true;
      absl::StrAppend(
          &what, what.empty() ? "" : ", ", "op #", i, " (",
          ir::OpName(record.nodes[i].op), " -> ",
          ir::PrintType(record.nodes[i].type), ") ",
          from->record.nodes[i].attrs.GetDouble(ir::AttrKey::kValue), " -> ",
          record.nodes[i].attrs.GetDouble(ir::AttrKey::kValue));
    }
    for (size_t i : FamilyLifted(from->family)) {
      if (IsLiftable(record.nodes[i])) record.nodes[i].lifted = true;
    }
    const size_t index = Index(*from);
    Event("lifted host numbers",
          absl::StrCat("specialization ", index,
                       " takes host numbers that changed as arguments "
                       "(rebuilt once): ",
                       what));
    const Device device = StepDevice(now.trace, inputs);
    return Install(
        Build(sig, std::move(now.trace), device, from->shape_generic), from,
        start, family_lifted ? from->family : -1);
  }

  // Runs the step's host code in recording mode (frontend/verify.h) and
  // replays `s` when it recorded what `s` compiled; another specialization
  // of the same signature when it recorded that one (a path taken before);
  // else compiles what it recorded, as a new specialization beside `s`, and
  // replays that. The host code runs once per call on every one of these
  // paths.
  std::optional<std::vector<Tensor>> VerifiedReplay(
      Specialization& s, Signature sig, const std::vector<Tensor>& inputs,
      const std::function<std::vector<Tensor>()>& eager) {
    const auto start = std::chrono::steady_clock::now();
    runtime::ProfileSpan verify_span(runtime::kCatCompile);
    if (verify_span.active())
      verify_span.set_name(absl::StrCat("recording check ", options.name));
    ShapeOnlyTrace now =
        TraceShapesOnly(options.name, inputs, eager, &s.record, s.trace.state);
    verify_span.End();
    const bool complete = now.inconclusive.empty();
    std::string diff;
    if (complete && !now.trace.matched)
      diff = DiffTraces(s.record, FullRecord(now));
    ++stats.verifications;
    stats.verify_ops += now.trace.num_ops;
    stats.verify_routine_ops += now.trace.routine_ops;
    stats.verify_ms += std::chrono::duration<double, std::milli>(
                           std::chrono::steady_clock::now() - start)
                           .count();
    // The specialization that recorded what the step did now: `s`, or a
    // sibling (a path the step took before).
    Specialization* target = nullptr;
    if (complete) {
      target = diff.empty() ? &s : Sibling(sig, FullRecord(now), &s);
      if (!diff.empty()) ++stats.verify_mismatches;
      if (!diff.empty() && target != nullptr) ++stats.sibling_hits;
      if (target != nullptr) SetLifted(*target, now);
      // Only host numbers changed: they become arguments (one rebuild).
      if (target == nullptr && now.kept.empty()) {
        if (Specialization* lifted = Lift(s, sig, now, inputs, start)) {
          if (!lifted->eager_only) return Replay(*lifted, inputs, eager);
          // Nothing to replay, and the call has not run for real yet.
          ++stats.eager_calls;
          eager();
          return std::nullopt;
        }
      }
    }
    Specialization* source = target == nullptr && complete
                                 ? ShapeSource(s, sig, now.trace.record)
                                 : nullptr;
    if (source != nullptr) {
      // New sizes of `s`'s step: compiled for them from this recording and
      // replayed. What the step kept becomes real first (the build takes
      // the recording).
      if (!now.kept.empty()) {
        ++stats.kept_calls;
        const absl::Status made =
            MakeKeptReal(now, inputs, StepDevice(now.trace, inputs));
        if (!made.ok()) return KeptTensorsLost(*source, made.message(), eager);
      }
      Specialization* fresh =
          BuildShape(*source, std::move(sig), now, inputs, start);
      if (fresh->eager_only) {
        // Nothing to replay, and the call has not run for real yet.
        ++stats.eager_calls;
        eager();
        return std::nullopt;
      }
      return Replay(*fresh, inputs, eager);
    }
    if (!now.kept.empty()) {
      if (target != nullptr) {
        // What the step keeps is what it returns (a loss history): the
        // replay's results give it.
        ++stats.kept_calls;
        if (std::optional<std::vector<int>> at = KeptReturns(now))
          return Replay(*target, inputs, &now.kept, &*at);
        // Else (a module's cache rebuilt, lazily made state) the ops that
        // give the kept tensors their values run alone, then the replay.
        const absl::Status made =
            MakeKeptReal(now, inputs, StepDevice(now.trace, inputs));
        if (!made.ok()) return KeptTensorsLost(s, made.message(), eager);
        return Replay(*target, inputs, eager);
      }
      if (complete) {
        return RunKeptCall(s, std::move(sig), now, inputs, eager,
                           target != nullptr ? "" : diff);
      }
      const absl::Status made =
          MakeKeptReal(now, inputs, StepDevice(now.trace, inputs));
      if (!made.ok()) return KeptTensorsLost(s, made.message(), eager);
    }
    // A call with other input sizes retraces beside `s`, not in its place.
    Specialization* replace = s.signature == sig ? &s : nullptr;
    if (!complete) {
      // The step itself still runs as written: eagerly, traced again.
      return Retrace("inconclusive re-trace", now.inconclusive, std::move(sig),
                     inputs, eager, replace);
    }
    if (target != nullptr) return Replay(*target, inputs, eager);
    Specialization* fresh = nullptr;
    {
      const std::string what =
          s.signature == sig
              ? absl::StrCat("the recording check found the step changed: ",
                             diff)
              : absl::StrCat(
                    "no specialization matches ", DescribeSignature(sig),
                    "; closest: ", DescribeSignatureDiff(s.signature, sig),
                    ShapeTextFor(s, sig));
      if (TraceLimitReached())
        return Retrace("re-trace found a change", what, std::move(sig), inputs,
                       eager, replace);
      Event("re-trace found a change",
            absl::StrCat("new specialization beside ", Index(s), ": ", what));
      const Device device = StepDevice(now.trace, inputs);
      fresh = Install(Build(std::move(sig), std::move(now.trace), device),
                      nullptr, start);
    }
    if (fresh->eager_only) {
      // Nothing to replay, and the call has not run for real yet.
      ++stats.eager_calls;
      eager();
      return std::nullopt;
    }
    return Replay(*fresh, inputs, eager);
  }

  // A recording call after which the step keeps shape-only tensors it made
  // (GPT's positions rebuilt for a new length, lazily created optimizer
  // state): the recorded call itself runs op by op on the real tensors, so
  // that what the step keeps is real and holds what eager would have put
  // there; the host code is not run again. A recording that changed
  // (`diff`) is also compiled for the calls that follow.
  std::optional<std::vector<Tensor>> RunKeptCall(
      Specialization& s, Signature sig, ShapeOnlyTrace& now,
      const std::vector<Tensor>& inputs,
      const std::function<std::vector<Tensor>()>& eager,
      const std::string& diff) {
    const auto start = std::chrono::steady_clock::now();
    const Device device = StepDevice(now.trace, inputs);
    absl::StatusOr<std::vector<Tensor>> out = RunRecorded(now, inputs, device);
    ++stats.eager_calls;
    ++stats.kept_calls;
    last = &s;
    if (!out.ok()) {
      --stats.eager_calls;
      return KeptTensorsLost(s, out.status().message(), eager);
    }
    if (!diff.empty() && !TraceLimitReached()) {
      Event("re-trace found a change",
            absl::StrCat("new specialization beside ", Index(s),
                         " (the step kept tensors it made; this call ran its "
                         "recording op by op): ",
                         diff));
      Install(Build(std::move(sig), std::move(now.trace), device), nullptr,
              start);
    }
    return *std::move(out);
  }

  // The step kept shape-only tensors whose values the recording cannot give
  // (`why`): they stay shape-only, and the step runs eagerly from now on,
  // where reading one throws a clear error instead of replaying anything.
  std::optional<std::vector<Tensor>> KeptTensorsLost(
      Specialization& s, absl::string_view why,
      const std::function<std::vector<Tensor>()>& eager) {
    stopped_reason = absl::StrCat(
        "the step kept tensors it created during a recording call whose "
        "values cannot be computed (",
        why, ")");
    std::cerr << "stepjit[" << options.name << "]: warning: " << stopped_reason
              << "; the step runs eagerly from now on\n";
    Event("recording check", stopped_reason);
    for (auto& t : specs) {
      t->eager_only = true;
      t->reason = stopped_reason;
    }
    ++stats.eager_calls;
    ++stats.fallbacks;
    last = &s;
    eager();
    return std::nullopt;
  }

  // The first specialization of `family`.
  size_t Head(int family) const {
    size_t i = 0;
    while (i < specs.size() && specs[i]->family != family) ++i;
    return i;
  }

  size_t Index(const Specialization& s) const {
    for (size_t i = 0; i < specs.size(); ++i) {
      if (specs[i].get() == &s) return i;
    }
    return specs.size();
  }

  // Replays `s`, or runs the call through the accuracy checker when one is due.
  std::optional<std::vector<Tensor>> Replay(
      Specialization& s, const std::vector<Tensor>& inputs,
      const std::function<std::vector<Tensor>()>& eager) {
    if (s.check_left <= 0 && check_pending <= 0) return Replay(s, inputs);
    if (s.check_left > 0) {
      --s.check_left;
    } else {
      --check_pending;
    }
    ++stats.checks;
    ++stats.eager_calls;
    last = &s;
    const std::vector<Tensor>& program_inputs = ProgramInputs(s, inputs);
    const PassBisection bisection =
        specializer->BisectionFor(s, program_inputs);
    // The checked run starts from copies that match the state; the state
    // it leaves was written outside a replay.
    RefreshStateCopies(s.state_copies, s.trace.state);
    for (StateCopy& c : s.state_copies) c.current = false;
    CheckResult r = CheckCall(
        absl::StrCat(options.name, ", call ", stats.calls), *s.program, s.trace,
        s.traced_state, options.amp, program_inputs, eager, &bisection);
    s.program_inputs.clear();
    check_report = std::move(r.report);
    if (r.diverged) {
      ++stats.check_failures;
      std::cerr << check_report;
      // Never replay what was seen computing wrong results.
      s.eager_only = true;
      s.reason = absl::StrCat(
          "the accuracy checker found the compiled step diverging: ",
          check_report.substr(0, check_report.find('\n')));
      Event("accuracy check", s.reason);
    }
    return std::nullopt;
  }

  // The program's inputs: the step's, then the lifted numbers'.
  static const std::vector<Tensor>& ProgramInputs(
      Specialization& s, const std::vector<Tensor>& inputs) {
    if (s.lifted_inputs.empty()) return inputs;
    s.program_inputs.assign(inputs.begin(), inputs.end());
    s.program_inputs.insert(s.program_inputs.end(), s.lifted_inputs.begin(),
                            s.lifted_inputs.end());
    return s.program_inputs;
  }

  // For each tensor the step kept, the graph return that holds its value,
  // when every one is a return.
  static std::optional<std::vector<int>> KeptReturns(
      const ShapeOnlyTrace& now) {
    const std::vector<int>& returns = now.trace.record.returns;
    std::vector<int> at;
    for (const Tracer::Kept& k : now.kept) {
      auto it = absl::c_find(returns, k.value);
      if (it == returns.end()) return std::nullopt;
      at.push_back(static_cast<int>(it - returns.begin()));
    }
    return at;
  }

  // Replays `s`; each `kept` tensor (shape-only, kept by the step during its
  // recording) becomes real with the value of return `kept_at[i]`.
  std::optional<std::vector<Tensor>> Replay(
      Specialization& s, const std::vector<Tensor>& inputs,
      const std::vector<Tracer::Kept>* kept = nullptr,
      const std::vector<int>* kept_at = nullptr) {
    RefreshStateCopies(s.state_copies, s.trace.state);
    // The .grads the step binds are let go first, as the step's own
    // zero_grad would (a binding the step makes without reading the old
    // .grad; one it reads is state): the last replay's results are then
    // free for this one to reuse (a CUDA graph's buffers, the allocator's
    // blocks) instead of held while it runs.
    for (const GradBinding& b : s.trace.grad_bindings)
      b.leaf.set_grad(Tensor());
    std::vector<Tensor> outputs =
        s.program->Run(ProgramInputs(s, inputs), s.trace.state);
    s.program_inputs.clear();  // holds the call's arguments
    MarkStateCopiesCurrent(s.state_copies, s.trace.state);
    for (size_t i = 0; kept != nullptr && i < kept->size(); ++i) {
      const Tensor& t = (*kept)[i].tensor;
      if (t.storage()->is_meta()) t.storage()->Materialize();
      NoGradGuard no_grad;
      Tensor(t).copy_(outputs[(*kept_at)[i]]);
    }
    for (const GradBinding& b : s.trace.grad_bindings) {
      b.leaf.set_grad(b.return_index >= 0 ? outputs[b.return_index] : Tensor());
    }
    outputs.resize(s.trace.num_outputs);
    ++stats.replays;
    ++s.replays;
    s.last_used = stats.calls;
    last = &s;
    return outputs;
  }
};

StepCompiler::StepCompiler(CompileOptions options)
    : impl_(std::make_unique<Impl>()) {
  SJ_REQUIRE(options.warmup_steps >= 0,
             "compile: warmup_steps must be >= 0, got ", options.warmup_steps);
  SJ_REQUIRE(options.max_traces >= 1, "compile: max_traces must be >= 1, got ",
             options.max_traces);
  SJ_REQUIRE(options.verify_first >= 0,
             "compile: verify_first must be >= 0, got ", options.verify_first);
  SJ_REQUIRE(options.verify_every >= 0,
             "compile: verify_every must be >= 0 (0: never "
             "periodically), got ",
             options.verify_every);
  SJ_REQUIRE(options.max_shapes >= 1, "compile: max_shapes must be >= 1, got ",
             options.max_shapes);
  for (const auto& [arg, dim] : options.dynamic_dims) {
    SJ_REQUIRE(arg >= 0 && dim >= 0,
               "compile: dynamic_dims holds {argument, dim} pairs, both >= 0; "
               "got {",
               arg, ", ", dim, "}");
  }
  SJ_REQUIRE(options.check_replays >= 0,
             "compile: check_replays must be >= 0, got ",
             options.check_replays);
  SJ_REQUIRE(options.amp == DType::kF32 || options.amp == DType::kBF16 ||
                 options.amp == DType::kF16,
             "compile: amp must be f32 (off), bf16 or f16, got ",
             ir::DTypeName(options.amp));
  // A misspelt pass name must not silently compile nothing.
  for (const std::string& name : passes::FromEnvironment().disabled) {
    const absl::StatusOr<std::vector<const passes::PassInfo*>> known =
        passes::ParsePipeline(name);
    SJ_REQUIRE(known.ok(), "STEPJIT_DISABLE: ", known.status().message());
  }
  Impl& m = *impl_;
  m.specializer = std::make_unique<Specializer>(options);
  m.check_replays = options.check ? options.check_replays : 0;
  if (const std::optional<std::string> env = config::Get(config::Env::kCheck)) {
    const absl::StatusOr<int64_t> parsed =
        ir::ParseInteger("", *env, 0, std::numeric_limits<int>::max());
    SJ_REQUIRE(
        parsed.ok(),
        config::Invalid(
            config::Env::kCheck, *env,
            absl::StrCat("0 (off), 1 (check the first ", options.check_replays,
                         " replays of each specialization) or N (the "
                         "first N)")));
    const int n = static_cast<int>(*parsed);
    m.check_replays = n == 0   ? 0
                      : n == 1 ? std::max(options.check_replays, 1)
                               : n;
  }
  m.options = std::move(options);
}

StepCompiler::~StepCompiler() = default;

std::optional<std::vector<Tensor>> StepCompiler::Call(
    const std::vector<Tensor>& inputs,
    const std::function<std::vector<Tensor>()>& eager) {
  Impl& m = *impl_;
  if (!m.dims_checked) {
    // Declared dynamic dims must name dims the step's arguments have.
    for (const auto& [arg, dim] : m.options.dynamic_dims) {
      SJ_REQUIRE(arg < static_cast<int>(inputs.size()),
                 "compile: dynamic_dims names argument ", arg,
                 ", but the step "
                 "takes ",
                 inputs.size(), " tensor argument",
                 inputs.size() == 1 ? "" : "s");
      SJ_REQUIRE(dim < static_cast<int>(inputs[arg].dim()),
                 "compile: dynamic_dims names dim ", dim, " of argument ", arg,
                 ", which has ", inputs[arg].dim(), " dims (shape ",
                 ir::ShapeToString(inputs[arg].shape()), ")");
    }
    m.dims_checked = true;
  }
  std::optional<StepProfile> profile;
  if (runtime::ProfilingEnabled()) profile.emplace(m.options.name, m.stats);
  ++m.stats.calls;
  if (m.options.mode == Mode::kEager ||
      m.stats.calls <= m.options.warmup_steps) {
    ++m.stats.eager_calls;
    eager();
    return std::nullopt;
  }
  if (!m.stopped_reason.empty()) {
    ++m.stats.eager_calls;
    ++m.stats.fallbacks;
    eager();
    return std::nullopt;
  }
  if (runtime::GetDispatchObserver() != nullptr || runtime::InMetaMode()) {
    // Called while another compiled step traces or checks its host code (a
    // compiled function inside a compiled step): a replay launches kernels
    // the outer tracer cannot see, so the host code runs as written and the
    // outer step records its ops as its own.
    ++m.stats.eager_calls;
    eager();
    return std::nullopt;
  }
  Signature sig = MakeSignature(inputs);
  // The first specialization with this signature whose flags (module
  // training modes) hold; flags select among specializations, so that
  // alternating train() and eval() replays both.
  Specialization* match = nullptr;
  std::string flag_miss;
  // The specialization the last call replayed comes first: a step that
  // changed path keeps to its new one.
  if (m.last != nullptr && !m.last->eager_only && m.last->signature == sig &&
      CheckFlagGuards(m.last->trace).empty())
    match = const_cast<Specialization*>(m.last);
  for (auto& s : m.specs) {
    if (match != nullptr) break;
    if (!(s->signature == sig)) continue;
    if (std::string miss = CheckFlagGuards(s->trace); !miss.empty()) {
      if (flag_miss.empty()) flag_miss = std::move(miss);
      continue;
    }
    match = s.get();
    break;
  }
  if (match == nullptr && flag_miss.empty()) {
    // New sizes of a compiled step: its recording, compiled for them.
    if (Specialization* like = m.ShapeCandidate(sig))
      return m.VerifiedReplay(*like, std::move(sig), inputs, eager);
  }
  if (match == nullptr) {
    std::string what;
    if (!flag_miss.empty()) {
      what = flag_miss;
    } else if (!m.specs.empty()) {
      what = absl::StrCat(
          "no specialization matches ", DescribeSignature(sig),
          "; closest: ", DescribeSignatureDiff(m.specs.back()->signature, sig),
          m.ShapeTextFor(*m.specs.back(), sig));
    }
    return m.Retrace(flag_miss.empty() ? "new signature" : "module flag", what,
                     std::move(sig), inputs, eager, nullptr);
  }
  if (match->eager_only) {
    ++m.stats.eager_calls;
    ++m.stats.fallbacks;
    m.last = match;
    eager();
    return std::nullopt;
  }
  if (std::string miss = CheckStateGuards(match->trace, match->state_guards);
      !miss.empty()) {
    if (match->settled_after_miss) {
      return m.Retrace("state guard", miss, std::move(sig), inputs, eager,
                       match);
    }
    // New state (a replaced parameter) gets its lazily created companions
    // (its .grad, optimizer moments) on its first step: one eager call lets
    // them settle, so that one trace, on the next call, covers what follows.
    match->settled_after_miss = true;
    m.Event("state guard",
            absl::StrCat("running eagerly, tracing on the next call: ", miss));
    ++m.stats.eager_calls;
    m.last = match;
    eager();
    return std::nullopt;
  }
  if (m.ShouldVerify(*match))
    return m.VerifiedReplay(*match, std::move(sig), inputs, eager);
  return m.Replay(*match, inputs, eager);
}

CompileStats StepCompiler::stats() const {
  CompileStats s = impl_->stats;
  const Specializer& sp = *impl_->specializer;
  if (const Tensor* scale = sp.CompilerState(passes::kAmpScaleParam)) {
    s.loss_scale = scale->item();
  }
  if (const Tensor* skipped = sp.CompilerState(passes::kAmpSkippedParam)) {
    s.skipped_steps = static_cast<int64_t>(skipped->item());
  }
  if (const Specialization* last = impl_->last;
      last != nullptr && last->program && last->program->team_tuner()) {
    s.replay_threads = last->program->team_tuner()->chosen();
    s.thread_probes = last->program->team_tuner()->probes();
  }
  return s;
}

std::string StepCompiler::explain() const {
  const Impl& m = *impl_;
  std::ostringstream os;
  os << "stepjit: step '" << m.options.name << "' — " << m.stats << "\n";
  if (m.options.mode == Mode::kEager)
    os << "compilation is off (mode = eager)\n";
  if (m.options.amp != DType::kF32 || m.specializer->loss_scaling()) {
    os << "mixed precision: "
       << (m.options.amp == DType::kF32
               ? std::string("off")
               : absl::StrCat("autocast-", ir::DTypeName(m.options.amp),
                              " pass"));
    if (m.specializer->loss_scaling()) {
      const CompileStats s = stats();
      os << ", loss scaling (grad-scaler pass): scale " << s.loss_scale << ", "
         << s.skipped_steps << " steps skipped for inf/NaN grads";
    }
    os << "\n";
  }
  for (size_t i = 0; i < m.specs.size(); ++i) {
    const Specialization& s = *m.specs[i];
    // Specializations of one signature are the paths the step took (the
    // tree's branches): the first of them heads the group.
    size_t first = 0;
    while (!(m.specs[first]->signature == s.signature)) ++first;
    // Specializations of one family are one step at other sizes: the first
    // of them heads it.
    size_t head = 0;
    while (m.specs[head]->family != s.family) ++head;
    os << "specialization " << i << ": " << DescribeSignature(s.signature)
       << ": " << (s.eager_only ? "eager-only (" + s.reason + ")" : "compiled")
       << (first < i ? absl::StrCat(", another path of specialization ", first)
                     : "")
       << (head < i && first == i
               ? absl::StrCat(", a concrete shape of specialization ", head)
               : "")
       << ", " << s.replays << " replays\n";
    if (s.program && s.program->device().is_cuda()) {
      os << "  on " << s.program->device().str() << ": "
         << (s.program->uses_cuda_graph()
                 ? absl::StrCat("replayed as a CUDA graph (",
                                s.program->cuda_graph_replays(),
                                " graph launches, ",
                                s.program->cuda_graph_replays() > 0
                                    ? s.program->cuda_graph_copied_bytes() /
                                          s.program->cuda_graph_replays()
                                    : 0,
                                " bytes copied per launch)")
                 : absl::StrCat("no CUDA graph: ",
                                s.program->cuda_graph_reason()))
         << "; "
         << (s.program->cuda_region_groups() > 0
                 ? absl::StrCat(s.program->cuda_grouped_regions(),
                                " regions launched as ",
                                s.program->cuda_region_groups(),
                                s.program->cuda_region_groups() == 1
                                    ? " multi-region kernel group"
                                    : " multi-region kernel groups")
                 : std::string("no multi-region kernels"))
         << "\n";
    }
    if (s.program) {
      const auto& interpreted = s.program->interpreted_regions();
      os << "  " << s.program->compiled_regions()
         << " regions run as generated code, " << interpreted.size()
         << " interpreted\n";
      for (const auto& r : interpreted)
        os << "  region " << r.region << " runs interpreted: " << r.reason
           << "\n";
    }
    if (head == i) os << m.SymbolicDimsText(i);
  }
  for (size_t i = 0; i < m.specs.size(); ++i) {
    const Specialization& s = *m.specs[i];
    if (!s.trace.flag_guards.empty()) {
      os << "  specialization " << i << " is guarded on "
         << s.trace.flag_guards.size() << " module training flag(s)\n";
    }
    if (!s.lifted.empty()) {
      os << "  specialization " << i << " takes " << s.lifted.size()
         << " lifted host number" << (s.lifted.size() == 1 ? "" : "s")
         << " as arguments (%c0..):";
      for (size_t k = 0; k < s.lifted.size(); ++k) {
        const TraceRecord::Node& n = s.record.nodes[s.lifted[k]];
        os << (k == 0 ? " " : ", ") << "op #" << s.lifted[k] << " ("
           << ir::OpName(n.op) << " -> " << ir::PrintType(n.type)
           << ") = " << s.lifted_inputs[k].to(Device::cpu()).item();
      }
      os << "\n";
    }
    if (!s.unguarded.empty()) {
      os << "  specialization " << i << " reads " << s.unguarded.size()
         << " tensor(s) captured from outside that no guard can see rebound ("
         << absl::StrJoin(s.unguarded, ", ")
         << "): every replay is re-traced shape-only to check them; pass them "
            "as step "
            "arguments to avoid that cost\n";
    }
  }
  os << "verification: "
     << (!m.stopped_reason.empty() ? "stopped: " + m.stopped_reason
         : m.options.verify == Verify::kAlways
             ? std::string("the step's host code is recorded and checked on "
                           "every replay")
         : m.options.verify == Verify::kOffUnsafe
             ? std::string("UNSAFE: off (Verify::kOffUnsafe): a host value "
                           "or flag changed after the trace is ignored")
             : absl::StrCat("UNSAFE: sampled (Verify::kSampledUnsafe): the "
                            "first ",
                            m.options.verify_first,
                            " replays of each specialization, then every ",
                            m.options.verify_every,
                            "th; a change in between replays stale results"))
     << "; " << m.stats.verifications << " recording checks ("
     << absl::StrFormat("%.3f", m.stats.verify_ms) << " ms"
     << (m.stats.verifications > 0
             ? absl::StrFormat(
                   ", %.1f us per call; %d ops per call, %d of them taken "
                   "whole from the record (library module forwards, backward, the "
                   "optimizer's step)",
                   1000 * m.stats.verify_ms / m.stats.verifications,
                   m.stats.verify_ops / m.stats.verifications,
                   m.stats.verify_routine_ops / m.stats.verifications)
             : std::string())
     << "), " << m.stats.verify_mismatches << " found the step changed ("
     << m.stats.sibling_hits << " matched another specialization), "
     << m.stats.kept_calls << " kept tensors the step created (run op by op)\n";
  if (m.stats.checks > 0) {
    os << "accuracy checks: " << m.stats.checks << " run, "
       << m.stats.check_failures << " diverged; last: "
       << m.check_report.substr(0, m.check_report.find('\n')) << "\n";
  }
  if (!m.stats.passes.empty()) os << "passes (last trace):\n" << m.stats.passes;
  os << m.events.ToString();
  return os.str();
}

void StepCompiler::dump_ir(std::ostream& os) const {
  const Specialization* s = impl_->last;
  if (s == nullptr || !s->trace.graph) {
    os << "// stepjit: no traced graph for '" << impl_->options.name
       << "' yet\n";
    return;
  }
  ir::Print(*s->trace.graph, os);
}

std::string StepCompiler::check_report() const { return impl_->check_report; }

void StepCompiler::check_next(int replays) {
  SJ_REQUIRE(replays >= 0, "check_next: replays must be >= 0, got ", replays);
  impl_->check_pending += replays;
}

}  // namespace frontend
}  // namespace stepjit
