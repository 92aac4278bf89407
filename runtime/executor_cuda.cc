// The executor's CUDA path: regions as NVRTC kernels, runs on the program's
// stream, and CUDA-graph capture and replay.
#include <chrono>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "codegen/cuda/cuda_emitter.h"
#include "codegen/cuda/dump.h"
#include "codegen/cuda/multi_region.h"
#include "ir/status.h"
#include "runtime/cuda/backend.h"
#include "runtime/cuda/ops.h"
#include "runtime/cuda/kernels/random_ops.h"
#include "runtime/dispatch.h"
#include "runtime/executor.h"
#include "runtime/region_groups.h"
#include "runtime/testing_hooks.h"

namespace stepjit::runtime {

using ir::NodeKind;

namespace {

// Why a CUDA run of `g` cannot be captured into a CUDA graph ("" when it can):
// host round trips synchronize, which capture forbids. (Random ops are
// captured reading their seed and offset from device slots.)
std::string NotCapturable(const ir::Graph& g, const CudaRegionMap& compiled) {
  for (const auto& n : g.nodes()) {
    if (n->kind() == NodeKind::kFusion) {
      if (compiled.contains(n.get())) continue;
      std::string why = NotCapturable(*n->body(), compiled);
      if (!why.empty()) return why;
    } else if (n->kind() == NodeKind::kOp) {
      if (ir::GetOpInfo(n->op()).kind == ir::OpKind::kRandom) {
        if (!cuda::RunsOnDeviceAsRandom(n->op(), n->output()->type().dtype)) {
          return absl::StrCat("random op ", ir::OpName(n->op()), " in ",
                              ir::DTypeName(n->output()->type().dtype),
                              " has no CUDA kernel and runs on the host");
        }
        continue;
      }
      if (!cuda::RunsOnDevice(n->op())) {
        return absl::StrCat(ir::OpName(n->op()), " has no CUDA kernel and runs on the host");
      }
    }
  }
  return "";
}

// The random nodes a run of `g` dispatches, in order (compiled regions hold
// none: the emitter does not lower random ops).
void CollectRandomNodes(const ir::Graph& g, const CudaRegionMap& compiled,
                        std::vector<const ir::Node*>& out) {
  for (const auto& n : g.nodes()) {
    if (n->kind() == NodeKind::kFusion && !compiled.contains(n.get())) {
      CollectRandomNodes(*n->body(), compiled, out);
    } else if (n->kind() == NodeKind::kOp &&
               ir::GetOpInfo(n->op()).kind == ir::OpKind::kRandom) {
      out.push_back(n.get());
    }
  }
}

}  // namespace

bool RunCudaGroup(const CudaRegionGroup& group, std::vector<Tensor>& env,
                  std::vector<Tensor>* keep_alive) {
  const Device device = FactoryDevice();
  std::vector<std::vector<Tensor>> ins;
  std::vector<GeneratedOperands> ops;
  for (size_t m = 0; m < group.members.size(); ++m) {
    const ir::Node* node = group.members[m];
    ins.emplace_back();
    for (const ir::Value* v : node->inputs()) ins.back().push_back(env[v->id()]);
    std::optional<GeneratedOperands> bound =
        BindGenerated(*node->body(), group.regions[m].return_alias, device, ins.back());
    if (!bound) return false;
    ops.push_back(*std::move(bound));
  }
  // Members run concurrently: a buffer one writes in place must be no other
  // member's operand or result.
  for (size_t m = 0; m < ops.size(); ++m) {
    const std::vector<int>& alias = group.regions[m].return_alias;
    for (size_t r = 0; r < ops[m].out.size(); ++r) {
      if (alias[r] < 0 || !ops[m].out[r].is_same(ins[m][alias[r]])) continue;
      const auto& written = ops[m].out[r].storage();
      for (size_t o = 0; o < ops.size(); ++o) {
        if (o == m) continue;
        for (const Tensor& t : ins[o]) if (t.storage() == written) return false;
        for (const Tensor& t : ops[o].out) if (t.storage() == written) return false;
      }
    }
  }
  std::vector<std::vector<void*>> ptrs;
  for (GeneratedOperands& o : ops) ptrs.push_back(o.ptrs);
  ThrowIfError(cuda::LaunchMultiRegion(*group.module, group.layouts, ptrs, cuda::CurrentStream()));
  for (size_t m = 0; m < group.members.size(); ++m) {
    FinishGenerated(group.regions[m].return_alias, ins[m], ops[m].out);
    const ir::Node* node = group.members[m];
    for (size_t i = 0; i < ops[m].out.size(); ++i) env[node->outputs()[i]->id()] = ops[m].out[i];
    if (keep_alive != nullptr) {
      keep_alive->insert(keep_alive->end(), ins[m].begin(), ins[m].end());
      keep_alive->insert(keep_alive->end(), ops[m].out.begin(), ops[m].out.end());
    }
  }
  return true;
}

struct CudaGraphReplay {
  cuda::GraphHandle graph = 0;
  std::vector<Tensor> static_inputs;
  std::vector<const void*> state_ptrs;
  std::vector<Tensor> outputs;      // the captured run's returns
  std::vector<bool> output_is_state;  // those are the caller's own buffers
  std::vector<Tensor> keep_alive;   // every value of the captured run
  std::vector<void*> held;          // temporaries freed during capture
  // (seed, offset) per Philox slot: pinned staging, the device slots, and
  // the copy between them that must finish before the staging is reused.
  Tensor philox_host, philox_device;
  cuda::Event philox_copied = 0;
  int64_t replays = 0;

  ~CudaGraphReplay() {
    if (cuda::Backend* b = cuda::GetBackend()) {
      (void)b->SynchronizeDevice();
      if (graph != 0) b->DestroyGraph(graph);
      if (philox_copied != 0) b->DestroyEvent(philox_copied);
      for (void* p : held) (void)cuda::DeviceAllocator().Free(p);
    }
  }
};

// Here, where CudaGraphReplay is complete (the members' destructors need it).
Program::Program(const ir::Graph* graph) : graph_(graph) {}

Program::CudaStreamState::~CudaStreamState() {
  if (stream == 0) return;
  if (cuda::Backend* b = cuda::GetBackend()) {
    (void)b->SynchronizeStream(stream);
    b->DestroyEvent(after_caller);
    b->DestroyEvent(after_program);
    (void)b->DestroyStream(stream);
  }
}
Program::Program(Program&&) noexcept = default;
Program& Program::operator=(Program&&) noexcept = default;
Program::~Program() = default;

int64_t Program::cuda_graph_replays() const {
  return cuda_graph_ != nullptr ? cuda_graph_->replays : 0;
}

absl::Status Program::BuildCuda() {
  ASSIGN_OR_RETURN(cuda::Backend * backend, cuda::RequireBackend());
  const auto start = std::chrono::steady_clock::now();
  for (const auto& n : graph_->nodes()) {
    if (!options_.codegen || n->kind() != NodeKind::kFusion) continue;
    // Test-only (runtime/testing_hooks.h): a wrong kernel.
    const std::unique_ptr<ir::Graph> miscompiled = MiscompiledBodyForTesting(*graph_, *n);
    absl::StatusOr<codegen::cuda::RegionSource> src = codegen::cuda::EmitRegion(
        miscompiled ? *miscompiled : *n->body(), {.block = backend->Limits().preferred_block});
    if (!src.ok()) {
      if (absl::IsUnimplemented(src.status())) continue;  // interpreted
      return src.status();
    }
    // A compile failure stops the build: the caller runs the step eagerly.
    ASSIGN_OR_RETURN(std::shared_ptr<const cuda::LoadedRegion> region, cuda::LoadRegion(*src));
    cuda_regions_[n.get()] = CudaRegion{std::move(region), ReturnAliases(*n->body())};
  }
  if (options_.cuda_multi_region) GroupCudaRegions(backend->Limits().preferred_block);
  codegen_ms_ = std::chrono::duration<double, std::milli>(
                      std::chrono::steady_clock::now() - start).count();
  graph_reason_ = options_.cuda_graphs ? NotCapturable(*graph_, cuda_regions_)
                                        : "turned off (cuda_graphs = false)";
  graphable_ = graph_reason_.empty();
  CollectRandomNodes(*graph_, cuda_regions_, random_nodes_);
  for (const ir::Node* n : random_nodes_) {
    philox_slots_.emplace(n->attrs().GetInt(ir::AttrKey::kOffset),
                          static_cast<int>(philox_slots_.size()));
  }
  return absl::OkStatus();
}

void Program::GroupCudaRegions(int block) {
  absl::flat_hash_map<const ir::Node*, int64_t> arg_bytes;
  for (const auto& [node, region] : cuda_regions_)
    arg_bytes[node] = codegen::cuda::MultiArgBytes(region.region->source);
  for (const std::vector<const ir::Node*>& run :
       IndependentRegionRuns(*graph_, arg_bytes, codegen::cuda::kMaxMultiArgBytes)) {
    std::vector<const ir::Graph*> bodies;
    std::vector<std::unique_ptr<ir::Graph>> miscompiled;  // test-only, as in BuildCuda
    for (const ir::Node* n : run) {
      miscompiled.push_back(MiscompiledBodyForTesting(*graph_, *n));
      bodies.push_back(miscompiled.back() ? miscompiled.back().get() : n->body());
    }
    // A group that does not build leaves its members to launch alone.
    absl::StatusOr<codegen::cuda::MultiRegionSource> src =
        codegen::cuda::EmitMultiRegion(bodies, {.block = block});
    if (!src.ok()) continue;
    if (!options_.dump_dir.empty()) {
      // Its CUDA C beside the regions' (and PTX when STEPJIT_DUMP_CUDA asks).
      const codegen::cuda::NvrtcOptions ptx{.arch = options_.cuda_ptx_arch, .want_ptx = true};
      absl::Status st = codegen::cuda::DumpRegion(
          options_.dump_dir, src->combined, options_.cuda_ptx_arch.empty() ? nullptr : &ptx);
      if (!st.ok()) std::cerr << "stepjit: STEPJIT_DUMP: " << st.message() << "\n";
    }
    absl::StatusOr<std::shared_ptr<const cuda::LoadedRegion>> module = cuda::LoadRegion(src->combined);
    if (!module.ok()) continue;
    auto group = std::make_shared<CudaRegionGroup>();
    group->members = run;
    for (const ir::Node* n : run) group->regions.push_back(cuda_regions_.at(n));
    group->module = *std::move(module);
    group->layouts = std::move(src->members);
    for (const ir::Node* n : run) cuda_groups_[n] = group;
    ++cuda_region_groups_;
    cuda_grouped_regions_ += static_cast<int>(run.size());
    kernels_per_run_ -= static_cast<int>(run.size()) - 1;
  }
}

std::vector<Tensor> Program::RunCuda(absl::Span<const Tensor> inputs,
                                     absl::Span<const Tensor> state) const {
  cuda::Backend& b = *ValueOrThrow(cuda::RequireBackend());
  auto check = [](const absl::Status& st, const char* what) {
    SJ_REQUIRE(st.ok(), "compiled step on CUDA: ", what, ": ", st.message());
  };
  if (stream_.stream == 0) {
    stream_.after_caller = ValueOrThrow(b.CreateEvent());
    stream_.after_program = ValueOrThrow(b.CreateEvent());
    stream_.stream = ValueOrThrow(b.CreateStream());
  }
  // The program's stream starts after the caller's queued work (which made
  // the inputs) and the caller's stream continues after the program's. A
  // wait takes the event's latest record, so the events are recorded anew
  // each run.
  const cuda::Stream caller = cuda::CurrentStream();
  auto join = [&](cuda::Stream waiter, cuda::Stream on, cuda::Event e) {
    check(b.RecordEvent(e, on), "recording an event");
    check(b.StreamWaitEvent(waiter, e), "ordering streams");
  };
  join(stream_.stream, caller, stream_.after_caller);
  std::vector<Tensor> out;
  {
    cuda::StreamGuard on_stream(stream_.stream);
    FactoryDeviceGuard factories(options_.device);
    ++runs_;
    bool same_state = cuda_graph_ != nullptr && cuda_graph_->state_ptrs.size() == state.size();
    for (size_t i = 0; same_state && i < state.size(); ++i) {
      same_state = state[i].data_ptr() == cuda_graph_->state_ptrs[i];
    }
    bool inputs_on_device = true;
    for (const Tensor& t : inputs) inputs_on_device &= t.device() == options_.device;
    if (!graphable_ || runs_ == 1 || !inputs_on_device) {
      out = RunOnce(inputs, state, nullptr, nullptr);
    } else {
      if (!same_state) Capture(inputs, state);
      if (cuda_graph_ == nullptr) {
        out = RunOnce(inputs, state, nullptr, nullptr);  // capture failed: graph_reason_ says why
      } else {
        CudaGraphReplay& g = *cuda_graph_;
        for (size_t i = 0; i < inputs.size(); ++i) {
          if (!inputs[i].is_same(g.static_inputs[i])) cuda::CopyInto(g.static_inputs[i], inputs[i]);
        }
        RefreshPhiloxSlots(g);
        check(b.LaunchGraph(g.graph, stream_.stream), "launching the CUDA graph");
        ++g.replays;
        // The captured buffers are overwritten by the next replay: hand out
        // copies, except of state, which is the caller's own.
        for (size_t i = 0; i < g.outputs.size(); ++i) {
          const Tensor& o = g.outputs[i];
          if (g.output_is_state[i]) {
            out.push_back(o);
          } else {
            Tensor c = empty(o.shape(), {.dtype = o.dtype(), .device = o.device()});
            cuda::CopyInto(c, o);
            out.push_back(c);
          }
        }
      }
    }
  }
  join(caller, stream_.stream, stream_.after_program);
  return out;
}

void Program::Capture(absl::Span<const Tensor> inputs, absl::Span<const Tensor> state) const {
  cuda::Backend& b = *ValueOrThrow(cuda::RequireBackend());
  cuda_graph_.reset();
  auto g = std::make_unique<CudaGraphReplay>();
  for (const Tensor& t : inputs) {
    Tensor s = empty(t.shape(), {.dtype = t.dtype(), .device = t.device()});
    cuda::CopyInto(s, t);
    g->static_inputs.push_back(s);
  }
  for (const Tensor& t : state) g->state_ptrs.push_back(t.data_ptr());
  if (!philox_slots_.empty()) {
    const int64_t n = 2 * static_cast<int64_t>(philox_slots_.size());
    g->philox_host = empty({n}, {.dtype = DType::kI64}).pin_memory();
    g->philox_device = empty({n}, {.dtype = DType::kI64, .device = options_.device});
  }
  const uint64_t* philox =
      g->philox_device.defined() ? static_cast<const uint64_t*>(g->philox_device.data_ptr())
                                 : nullptr;
  {
    cuda::FreeHold hold;
    absl::Status st = b.BeginCapture(stream_.stream);
    if (!st.ok()) {
      graphable_ = false;
      graph_reason_ = absl::StrCat("capture failed to start: ", st.message());
      return;
    }
    std::string failure;
    try {
      g->outputs = RunOnce(g->static_inputs, state, &g->keep_alive, philox);
    } catch (const std::exception& e) {
      failure = e.what();
    }
    absl::StatusOr<cuda::GraphHandle> graph = b.EndCapture(stream_.stream);
    if (failure.empty() && !graph.ok()) failure = std::string(graph.status().message());
    if (!failure.empty()) {
      if (graph.ok()) b.DestroyGraph(*graph);
      graphable_ = false;
      graph_reason_ = absl::StrCat("capture failed: ", failure);
      return;  // `hold` frees what the recorded work would have used
    }
    g->graph = *graph;
    g->held = hold.Take();
    for (const Tensor& o : g->outputs) {
      bool is_state = false;
      for (const Tensor& t : state) is_state |= o.storage() == t.storage();
      g->output_is_state.push_back(is_state);
    }
  }
  cuda_graph_ = std::move(g);
}

void Program::RefreshPhiloxSlots(CudaGraphReplay& g) const {
  if (philox_slots_.empty()) return;
  cuda::Backend& b = *ValueOrThrow(cuda::RequireBackend());
  if (g.philox_copied != 0) {
    ThrowIfError(b.SynchronizeEvent(g.philox_copied));
  } else {
    g.philox_copied = ValueOrThrow(b.CreateEvent());
  }
  uint64_t* host = static_cast<uint64_t*>(g.philox_host.data_ptr());
  RandomRemap remap;
  for (const ir::Node* n : random_nodes_) {
    const int64_t traced = n->attrs().GetInt(ir::AttrKey::kOffset);
    const auto [seed, offset] = remap.Draw(traced, RandomWords(*n));
    const int slot = philox_slots_.at(traced);
    host[2 * slot] = seed;
    host[2 * slot + 1] = offset;
  }
  ThrowIfError(b.Copy(g.philox_device.data_ptr(), host, g.philox_host.numel() * sizeof(uint64_t),
                      cuda::CopyKind::kHostToDevice, stream_.stream));
  ThrowIfError(b.RecordEvent(g.philox_copied, stream_.stream));
}

}  // namespace stepjit::runtime
