// Graph queries and building shared by the mixed-precision passes
// (passes/autocast.h, passes/grad_scaler.h).
//
// Gradients, as both passes find them: the tracer returns each .grad that
// backward() bound; a returned value that depends on a gradient seed,
// followed back through the in-place ops that updated it (clip_grad_norm_'s
// mul_), leads to the op that computed the gradient. Clipping, the
// optimizer and the return read that value or a later version of it. A
// value computed from gradients (a returned norm) is not itself one.
//
#ifndef STEPJIT_PASSES_AMP_GRAPH_H_
#define STEPJIT_PASSES_AMP_GRAPH_H_

#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/graph.h"

namespace stepjit::passes {

// The attr value marking backward()'s gradient seed (attr `role`).
inline constexpr const char* kGradSeedRole = "grad_seed";

namespace amp_graph {

// Appends nodes at the end of the graph and remembers them for a final order.
class Builder {
 public:
  Builder(ir::Graph& g, std::vector<ir::Node*>& order) : g_(g), order_(order) {}

  absl::StatusOr<ir::Value*> Op(ir::OpId op, std::vector<ir::Value*> in,
                                ir::Attrs attrs = {});
  absl::StatusOr<ir::Value*> Const(double value, ir::DType dtype);
  absl::StatusOr<ir::Value*> Cast(ir::Value* v, ir::DType to);

 private:
  ir::Graph& g_;
  std::vector<ir::Node*>& order_;
};

// A cast from f16/bf16 to f32/f64: exact, and finite exactly when its input is.
bool IsExactWidening(ir::DType from, ir::DType to);

// The gradient seeds of the step's backward() calls, in order.
std::vector<const ir::Node*> GradSeeds(const ir::Graph& g);

// The gradients backward() bound to leaves' .grad, as the values that
// computed them. A seed is not one (backward() on a leaf binds it as the
// leaf's .grad).
absl::flat_hash_set<const ir::Value*> GradientRoots(const ir::Graph& g);

// FailedPrecondition naming `pass` when `g` already has fusion regions.
absl::Status RequireUnfused(const ir::Graph& g, absl::string_view pass);

}  // namespace amp_graph
}  // namespace stepjit::passes

#endif  // STEPJIT_PASSES_AMP_GRAPH_H_
