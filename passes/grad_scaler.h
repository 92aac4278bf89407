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
// The caller creates and binds the three new state params as
// GradScalerState (PipelineState) declares them. A step that
// calls backward() more than once is refused: the later calls add to
// .grad after the first part was unscaled and checked.
#ifndef STEPJIT_PASSES_GRAD_SCALER_H_
#define STEPJIT_PASSES_GRAD_SCALER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "passes/amp_graph.h"
#include "passes/pass_manager.h"

namespace stepjit::passes {

// The pass's options (pipeline text "grad-scaler{init_scale=65536
// growth_interval=2000}"; PyTorch's defaults): the initial value of
// %amp_scale and the constants of the scale update baked into the graph.
inline constexpr PassOptionInfo kGradScalerOptions[] = {
    {"init_scale", OptionType::kDouble, "65536",
     "initial loss scale (the value %amp_scale is created with)"},
    {"growth_factor", OptionType::kDouble, "2",
     "scale multiplier after growth_interval clean steps in a row"},
    {"backoff_factor", OptionType::kDouble, "0.5",
     "scale multiplier after a step with inf/NaN gradients"},
    {"growth_interval", OptionType::kInt, "2000",
     "clean steps in a row before the scale grows"},
    {"world_size", OptionType::kInt, "1",
     "data-parallel ranks: above 1, found_inf is all_reduce'd (max) so that "
     "every rank skips the same steps"},
};

// The options as a struct, and back as a pipeline entry.
struct GradScalerPassConfig {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  int64_t world_size = 1;

  static GradScalerPassConfig From(const PassOptions& options);
  // "grad-scaler{init_scale=... growth_factor=... backoff_factor=...
  // growth_interval=... world_size=...}".
  std::string PipelineEntry() const;
};

// The names of the state params grad-scaler adds, in the order it adds them.
inline constexpr const char* kAmpScaleParam = "amp_scale";
inline constexpr const char* kAmpGrowthParam = "amp_growth";
inline constexpr const char* kAmpSkippedParam = "amp_skipped";

// Its counters.
inline constexpr Statistic kGradientsUnscaled{"grad-scaler",
                                              "gradients unscaled"};
inline constexpr Statistic kStateUpdatesPredicated{"grad-scaler",
                                                   "state updates predicated"};

// %amp_scale (init_scale), %amp_growth and %amp_skipped (0): 0-d f32.
std::vector<StateParam> GradScalerState(const PassOptions& options);

// The pass with its options; InvalidArgument for values GradScaler refuses
// (a scale that is not positive, growth_factor <= 1, backoff_factor outside
// (0, 1), growth_interval < 1).
absl::StatusOr<bool> InsertGradScalerWith(ir::Graph& graph,
                                          const PassOptions& options,
                                          PassStats& stats);
// The same with the defaults.
absl::StatusOr<bool> InsertGradScaler(ir::Graph& graph, PassStats& stats);

}  // namespace stepjit::passes

#endif  // STEPJIT_PASSES_GRAD_SCALER_H_
