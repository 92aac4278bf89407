// grad-scaler: dynamic loss scaling inserted into a traced step, with
// GradScaler's semantics.
//
// Run before canonicalize (after autocast-*, whose gradients it unscales;
// gradients as passes/amp_graph.h finds them).
//
// Dynamic loss scaling around the traced backward and
// optimizer update, with GradScaler's semantics and no host read:
// - the gradient seed of backward() (a `full` with role "grad_seed") is
//   multiplied by the state param %amp_scale;
// - every gradient is multiplied by 1/scale where it is computed (after
//   autocast's cast back to f32), so that clipping, the optimizer and the
//   returned .grad read the unscaled value, as after GradScaler::unscale_;
//   found_inf = max over gradients of isnan(sum(g * 0)), read from the
//   scaled gradient (finite exactly when the unscaled one is);
// - every state write-back after the seed (the optimizer update, its step
//   count) becomes where(found_inf, old, new): a skipped step changes
//   nothing;
// - %amp_scale, %amp_growth (clean steps in a row) and %amp_skipped
//   (skipped steps so far) are updated as GradScaler::update does.
// The caller binds the three new state params (0-d f32). A step that
// calls backward() more than once is refused: the later calls add to
// .grad after the first part was unscaled and checked.
#ifndef STEPJIT_PASSES_GRAD_SCALER_H_
#define STEPJIT_PASSES_GRAD_SCALER_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "passes/amp_graph.h"
#include "passes/pass_manager.h"

namespace stepjit::passes {

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

absl::StatusOr<bool> InsertGradScaler(ir::Graph& graph, PassStats& stats);

}  // namespace stepjit::passes

#endif  // STEPJIT_PASSES_GRAD_SCALER_H_
