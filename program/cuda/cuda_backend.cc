// The CUDA region backend: compiles regions with NVRTC, groups them, and
// runs the program on its own stream, captured into a CUDA graph.
#include "program/cuda/cuda_backend.h"

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "devices/cuda/backend.h"
#include "ir/status.h"
#include "program/cuda/cuda_graph.h"
#include "program/cuda/region_groups.h"
#include "runtime/dispatch.h"
#include "runtime/profiler.h"

namespace stepjit::runtime::cuda {

namespace {

void Require(const absl::Status& st, const char* what) {
  SJ_REQUIRE(st.ok(), "compiled step on CUDA: ", what, ": ", st.message());
}

// The program's CUDA stream and the two events that order it after the
// caller's stream and the caller's after it; made at the first run,
// destroyed with the program.
class ProgramStream {
 public:
  ProgramStream() = default;
  ProgramStream(const ProgramStream&) = delete;
  ProgramStream& operator=(const ProgramStream&) = delete;
  ~ProgramStream() {
    if (stream_ == 0) return;
    if (Backend* b = GetBackend()) {
      (void)b->SynchronizeStream(stream_);
      b->DestroyEvent(after_caller_);
      b->DestroyEvent(after_program_);
      (void)b->DestroyStream(stream_);
    }
  }

  // Begin of a run: the program's stream starts after the caller's queued
  // work (which made the inputs). Returns the caller's stream.
  Stream Begin(Backend& b) {
    if (stream_ == 0) {
      after_caller_ = ValueOrThrow(b.CreateEvent(Backend::EventTiming::kOff));
      after_program_ = ValueOrThrow(b.CreateEvent(Backend::EventTiming::kOff));
      stream_ = ValueOrThrow(b.CreateStream());
    }
    const Stream caller = CurrentStream();
    Join(b, stream_, caller, after_caller_);
    return caller;
  }
  // End of a run: the caller's stream continues after the program's.
  void End(Backend& b, Stream caller) {
    Join(b, caller, stream_, after_program_);
  }
  Stream stream() const { return stream_; }

 private:
  // A wait takes the event's latest record, so the events are recorded anew
  // each run.
  static void Join(Backend& b, Stream waiter, Stream on, Event e) {
    Require(b.RecordEvent(e, on), "recording an event");
    Require(b.StreamWaitEvent(waiter, e), "ordering streams");
  }

  Stream stream_ = 0;
  Event after_caller_ = 0, after_program_ = 0;
};

class CudaRegionBackend final : public RegionBackend {
 public:
  CudaRegionBackend(const ir::Graph& graph, const ProgramOptions& options,
                    Backend& backend)
      : graph_(graph),
        options_(options),
        block_(backend.Limits().preferred_block),
        build_start_(std::chrono::steady_clock::now()) {}

  absl::StatusOr<std::unique_ptr<CompiledRegion>> Compile(
      const RegionToCompile& region) override {
    // A compile failure stops the build: the caller runs the step eagerly.
    const auto start = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(std::unique_ptr<CudaRegion> r,
                     CompileCudaRegion(region, block_, options_.shape_generic));
    compiled_[region.node] = r.get();
    // The region's name identifies its code (a shape-generic region's name
    // is derived from its source).
    stats_.region_times.push_back({r->label(),
                                   std::chrono::duration<double, std::milli>(
                                       std::chrono::steady_clock::now() - start)
                                       .count(),
                                   false, r->loaded().source.name});
    return r;
  }

  void FinishBuild() override {
    // Shape-generic regions launch one by one: a multi-region kernel
    // compiles its members' sizes in.
    if (options_.cuda_multi_region && !options_.shape_generic) GroupRegions();
    stats_.codegen_ms = std::chrono::duration<double, std::milli>(
                            std::chrono::steady_clock::now() - build_start_)
                            .count();
    stats_.capture_reason = options_.cuda_graphs
                                ? NotCapturable(graph_, compiled_)
                                : "turned off (cuda_graphs = false)";
    stats_.replays_captured_run = stats_.capture_reason.empty();
  }

  std::vector<Tensor> Run(absl::Span<const Tensor> inputs,
                          absl::Span<const Tensor> state,
                          const ReplayLoop& loop) override {
    Backend& b = *ValueOrThrow(RequireBackend());
    const Stream caller = stream_.Begin(b);
    std::vector<Tensor> out;
    {
      StreamGuard on_stream(stream_.stream());
      FactoryDeviceGuard factories(options_.device);
      out = RunOnStream(b, inputs, state, loop);
    }
    stream_.End(b, caller);
    return out;
  }

  // As the first run, on the caller's stream: no capture, and host reads
  // wait for the kernels they read.
  std::vector<Tensor> RunUncaptured(absl::Span<const Tensor> inputs,
                                    absl::Span<const Tensor> state,
                                    const ReplayLoop& loop) override {
    FactoryDeviceGuard factories(options_.device);
    return loop(inputs, state, RunHooks());
  }

  absl::Span<const ir::Node* const> GroupStartingAt(
      const ir::Node& first) const override {
    auto it = groups_.find(&first);
    if (it == groups_.end()) return {};
    return it->second->members;
  }

  std::optional<std::vector<std::vector<Tensor>>> LaunchGroup(
      const ir::Node& first, std::vector<std::vector<Tensor>>& ins) override {
    return LaunchRegionGroup(*groups_.at(&first), ins);
  }

 private:
  void GroupRegions() {
    for (std::shared_ptr<const RegionGroup>& g :
         BuildRegionGroups(graph_, compiled_, block_, options_.dump_dir,
                           options_.cuda_ptx_arch)) {
      ++stats_.region_groups;
      stats_.grouped_regions += static_cast<int>(g->members.size());
      groups_[g->members.front()] = std::move(g);
    }
  }

  // The first run runs the loop as it is; the second captures it into a
  // CUDA graph (again whenever state is bound elsewhere) and every run from
  // then on replays the graph, unless the graph cannot be captured or the
  // inputs are on another device.
  std::vector<Tensor> RunOnStream(Backend& b, absl::Span<const Tensor> inputs,
                                  absl::Span<const Tensor> state,
                                  const ReplayLoop& loop) {
    ++runs_;
    bool inputs_on_device = true;
    for (const Tensor& t : inputs)
      inputs_on_device &= t.device() == options_.device;
    if (!stats_.replays_captured_run || runs_ == 1 || !inputs_on_device) {
      return loop(inputs, state, RunHooks());
    }
    if (graph_replay_ == nullptr || !graph_replay_->SameState(state) ||
        graph_replay_->profiled() != ProfilingEnabled()) {
      graph_replay_.reset();
      stats_.captured_replays = 0;
      stats_.captured_copy_bytes = 0;
      absl::StatusOr<std::unique_ptr<CudaGraphReplay>> captured =
          CudaGraphReplay::Capture(b, stream_.stream(), inputs, state, loop);
      if (!captured.ok()) {
        stats_.replays_captured_run = false;
        stats_.capture_reason = std::string(captured.status().message());
        return loop(inputs, state, RunHooks());
      }
      graph_replay_ = *std::move(captured);
    }
    std::vector<Tensor> out =
        graph_replay_->Replay(b, stream_.stream(), inputs);
    stats_.captured_replays = graph_replay_->replays();
    stats_.captured_copy_bytes = graph_replay_->copied_bytes();
    return out;
  }

  const ir::Graph& graph_;
  const ProgramOptions options_;
  const int block_;
  const std::chrono::steady_clock::time_point build_start_;
  CudaRegions compiled_;
  // By each group's first member.
  absl::flat_hash_map<const ir::Node*, std::shared_ptr<const RegionGroup>>
      groups_;
  int64_t runs_ = 0;
  // Destroyed before the stream: the graph's destructor waits for the
  // device.
  ProgramStream stream_;
  std::unique_ptr<CudaGraphReplay> graph_replay_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<RegionBackend>> MakeCudaRegionBackend(
    const ir::Graph& graph, const ProgramOptions& options) {
  ASSIGN_OR_RETURN(Backend * backend, RequireBackend());
  return std::make_unique<CudaRegionBackend>(graph, options, *backend);
}

}  // namespace stepjit::runtime::cuda
