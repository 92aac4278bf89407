// Whole-run capture on CUDA: one run of the replay loop recorded into a CUDA
// graph and replayed after with fresh inputs and fresh random draws.
#ifndef STEPJIT_PROGRAM_CUDA_CUDA_GRAPH_H_
#define STEPJIT_PROGRAM_CUDA_CUDA_GRAPH_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "devices/cuda/backend.h"
#include "devices/cuda/profile_timer.h"
#include "ir/graph.h"
#include "program/cuda/cuda_region.h"
#include "program/random_layout.h"
#include "program/region_backend.h"
#include "runtime/tensor.h"

namespace stepjit::runtime::cuda {

// Why a CUDA run of `g` cannot be captured into a CUDA graph ("" when it
// can): host round trips synchronize, which capture forbids. (Random ops
// read the graph's random state, a captured input refreshed per replay.)
std::string NotCapturable(const ir::Graph& g, const CudaRegions& compiled);

// A run captured into a CUDA graph, with the buffers it reads and writes.
class CudaGraphReplay {
 public:
  // Records `loop` over copies of `inputs` (the graph's random state among
  // them) and the caller's `state` on `stream` (current, with the factory
  // device set). An error says why capture failed ("capture failed: ...");
  // what the recorded work would have used is freed.
  static absl::StatusOr<std::unique_ptr<CudaGraphReplay>> Capture(
      Backend& b, Stream stream, absl::Span<const Tensor> inputs,
      absl::Span<const Tensor> state, const ReplayLoop& loop);
  ~CudaGraphReplay();

  // Whether `state` is bound at the addresses the capture used.
  bool SameState(absl::Span<const Tensor> state) const;
  // Copies `inputs` (this run's random state among them) into the captured
  // ones, launches the graph on `stream` and returns the returns: copies
  // (the next replay overwrites the captured buffers), except of state,
  // which is the caller's own.
  std::vector<Tensor> Replay(Backend& b, Stream stream,
                             absl::Span<const Tensor> inputs);
  int64_t replays() const { return replays_; }
  // Captured while profiling: the graph holds an event before and after
  // each kernel (devices/cuda/profile_timer.h), and each replay's kernels
  // are profiled with the device time they took in it. A program captures
  // again when profiling is turned on or off.
  bool profiled() const { return profiled_; }

 private:
  CudaGraphReplay() = default;
  // Launches the graph on `stream`; when profiled, with its spans.
  void Launch(Backend& b, Stream stream);

  GraphHandle graph_ = 0;
  std::vector<Tensor> static_inputs_;
  std::vector<const void*> state_ptrs_;
  std::vector<Tensor> outputs_;        // the captured run's returns
  std::vector<bool> output_is_state_;  // those are the caller's own buffers
  std::vector<Tensor> keep_alive_;     // every value of the captured run
  std::vector<void*> held_;            // temporaries freed during capture
  int64_t replays_ = 0;
  bool profiled_ = false;
  std::vector<GraphSpan> spans_;  // their events are recorded in the graph
};

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_PROGRAM_CUDA_CUDA_GRAPH_H_
