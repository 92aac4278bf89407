// Whole-run capture on CUDA: one run of the replay loop recorded into a CUDA
// graph and replayed after with fresh inputs and fresh random draws.
#ifndef STEPJIT_PROGRAM_CUDA_CUDA_GRAPH_H_
#define STEPJIT_PROGRAM_CUDA_CUDA_GRAPH_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
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
  // ones, launches the graph on `stream` and returns the returns. A return
  // in a buffer of its own (gradients, the loss) is handed out as that
  // buffer, uncopied: the graph owns it. When the next replay finds the
  // last one's result still held (a .grad the caller kept, a loss in a
  // list), its holders get a copy first (Storage::SwapMemory), so that no
  // tensor changes under them. State is the caller's own; any other return
  // (one sharing a buffer) is copied out.
  std::vector<Tensor> Replay(Backend& b, Stream stream,
                             absl::Span<const Tensor> inputs);
  int64_t replays() const { return replays_; }
  // Bytes the replays copied: inputs in, results out, and held results
  // passed on.
  int64_t copied_bytes() const { return copied_bytes_; }
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
  // The captured run's returns (undefined where the graph owns the buffer).
  std::vector<Tensor> outputs_;
  std::vector<bool> output_is_state_;  // those are the caller's own buffers
  // Per return: its buffer when the graph owns it, held by nothing else of
  // the graph's (another reference: a replay's result is still held).
  struct Owned {
    std::shared_ptr<Storage> storage;
    ir::TensorType type;
    Shape strides;
    // The return as a tensor on `on` (its buffer, or a copy's).
    Tensor On(std::shared_ptr<Storage> on) const {
      return MakeTensor(std::move(on), type.shape, strides, 0, type.dtype);
    }
  };
  std::vector<std::optional<Owned>> owned_;
  int64_t copied_bytes_ = 0;
  std::vector<Tensor> keep_alive_;     // every value of the captured run
  std::vector<void*> held_;            // temporaries freed during capture
  int64_t replays_ = 0;
  bool profiled_ = false;
  std::vector<GraphSpan> spans_;  // their events are recorded in the graph
};

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_PROGRAM_CUDA_CUDA_GRAPH_H_
