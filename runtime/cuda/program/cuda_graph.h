// Whole-run capture on CUDA: one run of the replay loop recorded into a CUDA
// graph and replayed after with fresh inputs and fresh random draws.
#ifndef STEPJIT_RUNTIME_CUDA_PROGRAM_CUDA_GRAPH_H_
#define STEPJIT_RUNTIME_CUDA_PROGRAM_CUDA_GRAPH_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ir/graph.h"
#include "runtime/cuda/backend.h"
#include "runtime/cuda/profile_timer.h"
#include "runtime/cuda/program/cuda_region.h"
#include "runtime/program/random_remap.h"
#include "runtime/program/region_backend.h"
#include "runtime/tensor.h"

namespace stepjit::runtime::cuda {

// Why a CUDA run of `g` cannot be captured into a CUDA graph ("" when it
// can): host round trips synchronize, which capture forbids. (Random ops are
// captured reading their seed and offset from device slots.)
std::string NotCapturable(const ir::Graph& g, const CudaRegions& compiled);

// Where a captured run's random nodes read their seed and offset: the random
// nodes a run of the graph dispatches, in order (compiled regions hold none:
// the emitter does not lower random ops), and each distinct traced offset's
// slot.
struct PhiloxSlots {
  PhiloxSlots(const ir::Graph& g, const CudaRegions& compiled,
              RandomLayout layout);
  std::vector<const ir::Node*> random_nodes;
  RandomLayout layout;  // ProgramOptions::random_layout, else the nodes'
  absl::flat_hash_map<int64_t, int> slots;
};

// A run captured into a CUDA graph, with the buffers it reads and writes.
class CudaGraphReplay {
 public:
  // Records `loop` over copies of `inputs` and the caller's `state` on
  // `stream` (current, with the factory device set), random nodes reading
  // `philox`'s device slots. An error says why capture failed ("capture
  // failed: ..."); what the recorded work would have used is freed.
  static absl::StatusOr<std::unique_ptr<CudaGraphReplay>> Capture(
      Backend& b, Stream stream, Device device, const PhiloxSlots& philox,
      absl::Span<const Tensor> inputs, absl::Span<const Tensor> state,
      const ReplayLoop& loop);
  ~CudaGraphReplay();

  // Whether `state` is bound at the addresses the capture used.
  bool SameState(absl::Span<const Tensor> state) const;
  // Copies `inputs` into the captured ones, draws this replay's seeds and
  // offsets into the Philox slots, launches the graph on `stream` and
  // returns the returns: copies (the next replay overwrites the captured
  // buffers), except of state, which is the caller's own.
  std::vector<Tensor> Replay(Backend& b, Stream stream,
                             absl::Span<const Tensor> inputs,
                             const PhiloxSlots& philox);
  int64_t replays() const { return replays_; }
  // Captured while profiling: the graph holds an event before and after
  // each kernel (runtime/cuda/profile_timer.h), and each replay's kernels
  // are profiled with the device time they took in it. A program captures
  // again when profiling is turned on or off.
  bool profiled() const { return profiled_; }

 private:
  CudaGraphReplay() = default;
  // Launches the graph on `stream`; when profiled, with its spans.
  void Launch(Backend& b, Stream stream);
  // Before a graph launch: draws this replay's seeds and offsets and copies
  // them to the graph's Philox slots.
  void RefreshPhiloxSlots(Backend& b, Stream stream, const PhiloxSlots& philox);

  GraphHandle graph_ = 0;
  std::vector<Tensor> static_inputs_;
  std::vector<const void*> state_ptrs_;
  std::vector<Tensor> outputs_;        // the captured run's returns
  std::vector<bool> output_is_state_;  // those are the caller's own buffers
  std::vector<Tensor> keep_alive_;     // every value of the captured run
  std::vector<void*> held_;            // temporaries freed during capture
  // (seed, offset) per Philox slot: pinned staging, the device slots, and
  // the copy between them that must finish before the staging is reused.
  Tensor philox_host_, philox_device_;
  Event philox_copied_ = 0;
  int64_t replays_ = 0;
  bool profiled_ = false;
  std::vector<GraphSpan> spans_;  // their events are recorded in the graph
};

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_RUNTIME_CUDA_PROGRAM_CUDA_GRAPH_H_
