// Mixed-precision passes over a traced f32 step (run before canonicalize),
// with PyTorch AMP's semantics: parameters and their grads stay f32, every
// reader of a gradient sees the unscaled f32 value, optimizer math is f32.
//
// Gradients, as both passes find them: the tracer returns each .grad that
// backward() bound; a returned value that depends on a gradient seed,
// followed back through the in-place ops that updated it (clip_grad_norm_'s
// mul_), leads to the op that computed the gradient. Clipping, the
// optimizer and the return read that value or a later version of it. A
// value computed from gradients (a returned norm) is not itself one.
//
// autocast-bf16 / autocast-f16: inserts casts by the op table's AmpPolicy,
//   as eager amp::Autocast would have: kLower ops (matmuls, forward and
//   backward) read low-precision copies of their f32 inputs (one cast per
//   value, so a weight is cast once per step however often it is used);
//   kFp32 ops (exp, log, pow, softmax, sums, norms, losses) read f32. Output
//   types are re-inferred down the graph (promotion widens mixed inputs
//   again). A gradient computed in low precision (a weight's, by a backward
//   matmul) is cast back to its leaf's dtype right where it is computed, as
//   the backward of eager autocast's cast gives it, and every reader uses
//   that copy. State write-backs and the other returns (the loss) are cast
//   back to their traced dtypes.
// grad-scaler: dynamic loss scaling around the traced backward and
//   optimizer update, with GradScaler's semantics and no host read:
//   - the gradient seed of backward() (a `full` with role "grad_seed") is
//     multiplied by the state param %amp_scale;
//   - every gradient is multiplied by 1/scale where it is computed (after
//     autocast's cast back to f32), so that clipping, the optimizer and the
//     returned .grad read the unscaled value, as after GradScaler::unscale_;
//     found_inf = max over gradients of isnan(sum(g * 0)), read from the
//     scaled gradient (finite exactly when the unscaled one is);
//   - every state write-back after the seed (the optimizer update, its step
//     count) becomes where(found_inf, old, new): a skipped step changes
//     nothing;
//   - %amp_scale, %amp_growth (clean steps in a row) and %amp_skipped
//     (skipped steps so far) are updated as GradScaler::update does.
//   The caller binds the three new state params (0-d f32). A step that
//   calls backward() more than once is refused: the later calls add to
//   .grad after the first part was unscaled and checked.
#ifndef STEPJIT_PASSES_AMP_H_
#define STEPJIT_PASSES_AMP_H_

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "passes/pass_manager.h"

namespace stepjit::passes {

absl::StatusOr<bool> AutocastGraph(ir::Graph& graph, ir::DType low, PassStats& stats);
absl::StatusOr<bool> AutocastBf16(ir::Graph& graph, PassStats& stats);
absl::StatusOr<bool> AutocastF16(ir::Graph& graph, PassStats& stats);

// Constants of the scale update baked into the graph (PyTorch's defaults).
struct GradScalerPassConfig {
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};
// Runs `grad-scaler` with this config on the calling thread while alive.
class ScopedGradScalerConfig {
 public:
  explicit ScopedGradScalerConfig(GradScalerPassConfig config);
  ~ScopedGradScalerConfig();

 private:
  GradScalerPassConfig prev_;
};

// The names of the state params grad-scaler adds, in the order it adds them.
inline constexpr const char* kAmpScaleParam = "amp_scale";
inline constexpr const char* kAmpGrowthParam = "amp_growth";
inline constexpr const char* kAmpSkippedParam = "amp_skipped";
// The attr value marking backward()'s gradient seed (attr `role`).
inline constexpr const char* kGradSeedRole = "grad_seed";

absl::StatusOr<bool> InsertGradScaler(ir::Graph& graph, PassStats& stats);

}  // namespace stepjit::passes

#endif  // STEPJIT_PASSES_AMP_H_
