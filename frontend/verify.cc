// Shape-only re-trace: meta dispatch under a tracer, then undo what the run
// touched.
#include "frontend/verify.h"

#include <exception>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/status.h"
#include "ir/verifier.h"
#include "passes/pass_manager.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/dispatch.h"
#include "runtime/executor.h"
#include "runtime/generator.h"

namespace stepjit::frontend {

ShapeOnlyTrace TraceShapesOnly(
    const std::string& name, const std::vector<Tensor>& inputs,
    const std::function<std::vector<Tensor>()>& step) {
  ShapeOnlyTrace out;
  Generator& generator = default_generator();
  const uint64_t offset = generator.offset();
  {
    Tracer tracer(name, /*remember_grads=*/true);
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
    if (out.trace.graph == nullptr)
      std::tie(out.trace.graph, out.trace.state) = tracer.TakePartial();
    // Autograd bound shape-only gradients to leaves: put the real ones back.
    for (const GradBefore& g : out.trace.grad_before) g.leaf.set_grad(g.grad);
    out.trace.grad_before.clear();
    outputs.clear();
    out.kept = tracer.KeptMetaTensors();
  }
  generator.set_offset(offset);
  if (out.inconclusive.empty() && !out.trace.break_reason.empty()) {
    out.inconclusive = absl::StrCat(
        "the shape-only re-trace hit a graph break: ", out.trace.break_reason);
  }
  return out;
}

namespace {

// Runs a copy of `trace`'s graph op by op whose returns are the graph's own
// (with `effects`; else none, and no write-back) followed by the kept
// values, and makes each kept tensor real with its value. Returns the
// graph's own returns.
absl::StatusOr<std::vector<Tensor>> RunWithKept(
    const Trace& trace, const std::vector<Tracer::Kept>& kept,
    const std::vector<Tensor>& inputs, Device device, bool effects) {
  if (trace.graph == nullptr)
    return absl::FailedPreconditionError("nothing was recorded");
  ir::Graph& graph = *trace.graph;
  const std::vector<ir::Value*> returns = graph.returns();
  std::vector<ir::Value*> with_kept;
  if (effects) with_kept = returns;
  const size_t first_kept = with_kept.size();
  for (const Tracer::Kept& k : kept) {
    if (k.value == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the step kept a ", ir::DTypeName(k.tensor.dtype()),
          ir::ShapeToString(k.tensor.shape()),
          " tensor it created and wrote through another view"));
    }
    with_kept.push_back(const_cast<ir::Value*>(k.value));
  }
  graph.SetReturns(with_kept);
  const std::string text = ir::Print(graph);
  graph.SetReturns(returns);
  ASSIGN_OR_RETURN(std::unique_ptr<ir::Graph> copy,
                   ir::ParseGraph(text, "recorded call"));
  if (!effects) {
    // Only what the kept values need: no write-back, no dead work.
    copy->EraseNodesIf(
        [](const ir::Node* n) { return n->kind() == ir::NodeKind::kAssign; });
    RETURN_IF_ERROR(passes::RunPipeline(*copy, "dce", passes::PipelineOptions{}, nullptr));
  }
  RETURN_IF_ERROR(ir::Verify(*copy));
  runtime::ProgramOptions options;
  options.codegen = false;
  options.use_cache = false;
  options.cuda_graphs = false;
  options.device = device;
  ASSIGN_OR_RETURN(runtime::Program program,
                   runtime::Program::Build(*copy, options));
  Generator& generator = default_generator();
  const uint64_t offset = generator.offset();
  std::vector<Tensor> out = program.Run(inputs, trace.state);
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
    const ShapeOnlyTrace& recorded, const std::vector<Tensor>& inputs,
    Device device) {
  if (!recorded.inconclusive.empty())
    return absl::FailedPreconditionError(recorded.inconclusive);
  const Trace& trace = recorded.trace;
  ASSIGN_OR_RETURN(
      std::vector<Tensor> out,
      RunWithKept(trace, recorded.kept, inputs, device, /*effects=*/true));
  for (const GradBinding& b : trace.grad_bindings) {
    b.leaf.set_grad(b.return_index >= 0 ? out[b.return_index] : Tensor());
  }
  out.resize(trace.num_outputs);
  return out;
}

absl::Status MakeKeptReal(const ShapeOnlyTrace& recorded,
                          const std::vector<Tensor>& inputs, Device device) {
  return RunWithKept(recorded.trace, recorded.kept, inputs, device,
                     /*effects=*/false)
      .status();
}

}  // namespace stepjit::frontend
