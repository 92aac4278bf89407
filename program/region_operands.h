// Binding a generated region's operands and results, shared by the region
// backends: which inputs a region may overwrite, the pointers a launch
// takes, and the version bump of a donated input it wrote.
#ifndef STEPJIT_PROGRAM_REGION_OPERANDS_H_
#define STEPJIT_PROGRAM_REGION_OPERANDS_H_

#include <optional>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "runtime/device.h"
#include "runtime/tensor.h"

namespace stepjit::runtime {

// Which body parameter's buffer each return of an elementwise region may be
// written into: the return comes from an update chain that memory planning
// allowed to overwrite that (donated) parameter. -1: a fresh buffer.
std::vector<int> ReturnAliases(const ir::Graph& body);

// A generated region's bound operands: `in` made contiguous, the outputs
// (donated inputs where `return_alias` allows, fresh buffers otherwise), and
// the pointers a launch takes (params, then returns). nullopt when a dtype,
// shape or the device differs from the compiled ones.
struct GeneratedOperands {
  std::vector<void*> ptrs;
  std::vector<Tensor> out;
};
std::optional<GeneratedOperands> BindGenerated(
    const ir::Graph& body, const std::vector<int>& return_alias, Device device,
    std::vector<Tensor>& in);
// After the launch: bumps the version of each donated input written.
void FinishGenerated(const std::vector<int>& return_alias,
                     const std::vector<Tensor>& in, std::vector<Tensor>& out);

// Runs a generated region: operands are made contiguous first (a view's
// copy costs less than interpreting the region), outputs land in donated
// inputs where memory planning allowed it, and `launch` runs the kernel over
// the operand and output pointers. nullopt: dtypes, shapes or the device
// differ from the ones compiled for, and the caller interprets the region.
template <typename Launch>
std::optional<std::vector<Tensor>> RunGenerated(
    const ir::Graph& body, const std::vector<int>& return_alias, Device device,
    std::vector<Tensor>& in, Launch launch) {
  std::optional<GeneratedOperands> ops =
      BindGenerated(body, return_alias, device, in);
  if (!ops) return std::nullopt;
  launch(std::move(ops->ptrs));
  FinishGenerated(return_alias, in, ops->out);
  return std::move(ops->out);
}

}  // namespace stepjit::runtime

#endif  // STEPJIT_PROGRAM_REGION_OPERANDS_H_
