// Shape-only re-trace: meta dispatch under a tracer, then undo what the run
// touched.
#include "frontend/verify.h"

#include <exception>

#include "absl/strings/str_cat.h"
#include "ir/status.h"
#include "ir/verifier.h"
#include "passes/pass_manager.h"
#include "program/executor.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/dispatch.h"
#include "runtime/generator.h"

namespace stepjit::frontend {

ShapeOnlyTrace TraceShapesOnly(const std::string& name,
                               const std::vector<Tensor>& inputs,
                               const std::function<std::vector<Tensor>()>& step,
                               const TraceRecord* expected,
                               absl::Span<const Tensor> expected_state) {
  ShapeOnlyTrace out;
  out.expected = expected;
  Generator& generator = default_generator();
  const uint64_t offset = generator.offset();
  {
    Tracer tracer(name, /*remember_grads=*/true, expected, expected_state);
    std::vector<Tensor> outputs;
    {
      runtime::MetaModeGuard meta;
      tracer.Begin(inputs);
      try {
        outputs = step();
      } catch (const std::exception& e) {
        out.inconclusive = absl::StrCat(
            "the step threw during the shape-only re-trace: ", e.what());
      }
      out.trace = tracer.End(outputs);
    }
    // Autograd bound shape-only gradients to leaves: put the real ones back.
    // (The bindings were the leaves' own: no checks. What was only set
    // need not be held any longer; what was read first guards a replay of
    // what this call recorded, unless it matched its expected record.)
    const bool guards = !out.trace.matched;
    for (GradTouch& g : out.trace.grad_touched) {
      std::unique_ptr<AutogradMeta>& meta = g.leaf.impl()->autograd;
      if (meta == nullptr && g.before == nullptr) continue;
      if (meta == nullptr) meta = std::make_unique<AutogradMeta>();
      meta->grad = guards && g.read_first ? g.before : std::move(g.before);
    }
    if (!guards) out.trace.grad_touched.clear();
    outputs.clear();
    out.kept = tracer.KeptMetaTensors();
  }
  // Only a matching call that kept nothing replays its specialization
  // without the state it borrowed.
  if (!out.trace.matched || !out.kept.empty()) FillState(out.trace);
  generator.set_offset(offset);
  if (out.inconclusive.empty() && !out.trace.break_reason.empty()) {
    out.inconclusive = absl::StrCat(
        "the shape-only re-trace hit a graph break: ", out.trace.break_reason);
  }
  if (!out.inconclusive.empty()) out.trace.matched = false;
  return out;
}

const TraceRecord& FullRecord(ShapeOnlyTrace& recorded) {
  FillState(recorded.trace);
  if (recorded.trace.unfilled > 0 || recorded.trace.unfilled_params > 0) {
    SJ_CHECK(recorded.expected != nullptr,
             "FullRecord: a partial record without its expected record");
    FillRecord(recorded.trace, *recorded.expected);
  }
  return recorded.trace.record;
}

namespace {

// Runs the recorded call's graph op by op and makes each kept tensor real
// with its value. With `effects` the run is the call (write-back included)
// and returns the record's returns; without, it computes only the kept
// values, writes nothing and returns nothing.
absl::StatusOr<std::vector<Tensor>> RunWithKept(
    ShapeOnlyTrace& recorded, const std::vector<Tensor>& inputs, Device device,
    bool effects) {
  const TraceRecord& record = FullRecord(recorded);
  const std::vector<Tracer::Kept>& kept = recorded.kept;
  std::vector<int> kept_values;
  for (const Tracer::Kept& k : kept) {
    if (k.value == Tracer::kUnknown) {
      return absl::FailedPreconditionError(
          absl::StrCat("the step kept a ", ir::DTypeName(k.tensor.dtype()),
                       ir::ShapeToString(k.tensor.shape()),
                       " tensor it created and wrote through another view"));
    }
    kept_values.push_back(k.value);
  }
  const size_t first_kept = effects ? record.returns.size() : 0;
  std::unique_ptr<ir::Graph> graph =
      BuildGraph(record, "recorded_call", kept_values,
                 {.lift = false, .write_back = effects, .returns = effects});
  if (!effects) {
    // Only what the kept values need: no dead work.
    RETURN_IF_ERROR(
        passes::RunPipeline(*graph, "dce", passes::PipelineOptions{}, nullptr));
  }
  RETURN_IF_ERROR(ir::Verify(*graph));
  runtime::ProgramOptions options;
  options.codegen = false;
  options.use_cache = false;
  options.cuda_graphs = false;
  options.device = device;
  ASSIGN_OR_RETURN(runtime::Program program,
                   runtime::Program::Build(*graph, options));
  Generator& generator = default_generator();
  const uint64_t offset = generator.offset();
  std::vector<Tensor> out = program.Run(inputs, recorded.trace.state);
  if (!effects) generator.set_offset(offset);
  NoGradGuard no_grad;
  for (size_t i = 0; i < kept.size(); ++i) {
    const Tensor& t = kept[i].tensor;
    if (t.storage()->is_meta()) t.storage()->Materialize();
    Tensor(t).copy_(out[first_kept + i]);
  }
  out.resize(first_kept);
  return out;
}

}  // namespace

absl::StatusOr<std::vector<Tensor>> RunRecorded(
    ShapeOnlyTrace& recorded, const std::vector<Tensor>& inputs,
    Device device) {
  if (!recorded.inconclusive.empty())
    return absl::FailedPreconditionError(recorded.inconclusive);
  ASSIGN_OR_RETURN(std::vector<Tensor> out,
                   RunWithKept(recorded, inputs, device, /*effects=*/true));
  for (const GradBinding& b : recorded.trace.grad_bindings) {
    b.leaf.set_grad(b.return_index >= 0 ? out[b.return_index] : Tensor());
  }
  out.resize(recorded.trace.num_outputs);
  return out;
}

absl::Status MakeKeptReal(ShapeOnlyTrace& recorded,
                          const std::vector<Tensor>& inputs, Device device) {
  return RunWithKept(recorded, inputs, device, /*effects=*/false).status();
}

}  // namespace stepjit::frontend
