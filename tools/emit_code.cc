// stepjit-opt --emit: the generated code of every fusion region (see
// emit_code.h).
#include "tools/emit_code.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "codegen/cpu/region_kernel.h"
#include "codegen/cuda/cuda_emitter.h"

namespace stepjit::tools {
namespace {

// The region bodies of `graph`: its fusion nodes' bodies, or the graph itself.
std::vector<const ir::Graph*> RegionBodies(const ir::Graph& graph) {
  std::vector<const ir::Graph*> bodies;
  for (const auto& n : graph.nodes()) {
    if (n->kind() == ir::NodeKind::kFusion) bodies.push_back(n->body());
  }
  if (bodies.empty()) bodies.push_back(&graph);
  return bodies;
}

// Whether `status` says that `backend` does not lower `body`; then `out`
// gets a comment line (opening with `header`) saying so and why.
bool NotLowered(const absl::Status& status, absl::string_view header,
                absl::string_view backend, const ir::Graph& body,
                std::string& out) {
  if (!absl::IsUnimplemented(status)) return false;
  absl::StrAppend(&out, header, body.name(), ": not lowered by the ", backend,
                  " backend, interpreted op by op: ", status.message(), "\n");
  return true;
}

absl::Status EmitLlvm(const ir::Graph& body, bool shape_generic,
                      std::string& out) {
  // Not through the kernel cache: the IR is lowered afresh, and a tool that
  // prints code leaves no cache entries behind.
  absl::StatusOr<codegen::cpu::RegionKernel> kernel =
      codegen::cpu::CompileRegion(
          body, {.use_cache = false, .shape_generic = shape_generic});
  if (NotLowered(kernel.status(), "; region @", "CPU", body, out))
    return absl::OkStatus();
  if (!kernel.ok()) return kernel.status();
  absl::StrAppend(&out, "; region @", body.name(), ": kernel ", kernel->name,
                  "\n");
  if (shape_generic) {
    absl::StrAppend(&out, "; sizes at run time: [",
                    absl::StrJoin(kernel->dims, ", "), "]\n");
  }
  absl::StrAppend(&out, kernel->llvm_ir_raw);
  return absl::OkStatus();
}

absl::Status EmitCuda(const ir::Graph& body, std::string& out) {
  absl::StatusOr<codegen::cuda::RegionSource> source =
      codegen::cuda::EmitRegion(body);
  if (NotLowered(source.status(), "// region @", "CUDA", body, out))
    return absl::OkStatus();
  if (!source.ok()) return source.status();
  absl::StrAppend(&out, "// region @", body.name(), "\n", source->source);
  return absl::OkStatus();
}

}  // namespace

absl::Status EmitRegionCode(const ir::Graph& graph, EmitTarget target,
                            std::string& out, bool shape_generic) {
  for (const ir::Graph* body : RegionBodies(graph)) {
    absl::Status status = target == EmitTarget::kLlvm
                              ? EmitLlvm(*body, shape_generic, out)
                              : EmitCuda(*body, out);
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat("region @", body->name(),
                                                      ": ", status.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace stepjit::tools
