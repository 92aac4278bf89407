// CUDA-graph capture and replay of a whole run. Random ops read the graph's
// random state, an input like any other: each replay copies this run's into
// the captured one, so it draws fresh numbers.
#include "program/cuda/cuda_graph.h"

#include <exception>
#include <optional>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "devices/cuda/kernels/collective_ops.h"
#include "devices/cuda/kernels/random_ops.h"
#include "devices/cuda/ops.h"
#include "ir/status.h"
#include "program/random_layout.h"
#include "runtime/dispatch.h"

namespace stepjit::runtime::cuda {

using ir::NodeKind;

std::string NotCapturable(const ir::Graph& g, const CudaRegions& compiled) {
  for (const auto& n : g.nodes()) {
    if (n->kind() == NodeKind::kFusion) {
      if (compiled.contains(n.get())) continue;
      std::string why = NotCapturable(*n->body(), compiled);
      if (!why.empty()) return why;
    } else if (n->kind() == NodeKind::kOp) {
      if (ir::GetOpInfo(n->op()).kind == ir::OpKind::kRandom) {
        if (!RunsOnDeviceAsRandom(n->op(), n->output()->type().dtype)) {
          return absl::StrCat("random op ", ir::OpName(n->op()), " in ",
                              ir::DTypeName(n->output()->type().dtype),
                              " has no CUDA kernel and runs on the host");
        }
        continue;
      }
      if (ir::IsCollective(n->op())) {
        std::string why = CollectiveNotCapturable(n->op());
        if (!why.empty()) return why;
        continue;
      }
      if (!RunsOnDevice(n->op())) {
        return absl::StrCat(ir::OpName(n->op()),
                            " has no CUDA kernel and runs on the host");
      }
    }
  }
  return "";
}

absl::StatusOr<std::unique_ptr<CudaGraphReplay>> CudaGraphReplay::Capture(
    Backend& b, Stream stream, absl::Span<const Tensor> inputs,
    absl::Span<const Tensor> state, const ReplayLoop& loop) {
  std::unique_ptr<CudaGraphReplay> g(new CudaGraphReplay);
  for (const Tensor& t : inputs) {
    Tensor s = empty(t.shape(), {.dtype = t.dtype(), .device = t.device()});
    CopyInto(s, t);
    g->static_inputs_.push_back(s);
  }
  for (const Tensor& t : state) g->state_ptrs_.push_back(t.data_ptr());
  RunHooks hooks;
  hooks.keep_alive = &g->keep_alive_;
  FreeHold hold;
  if (absl::Status st = b.BeginCapture(stream); !st.ok()) {
    return absl::InternalError(
        absl::StrCat("capture failed to start: ", st.message()));
  }
  std::string failure;
  g->profiled_ = ProfilingEnabled();
  {
    ProfileSpan span(kCatGraph);
    span.set_name("capture cuda graph");
    std::optional<GraphSpanCapture> spans;
    // Nothing runs while capturing: no host spans of kernels or ops.
    ProfileCaptureScope no_host_spans;
    if (g->profiled_) spans.emplace(&g->spans_);
    try {
      g->outputs_ = loop(g->static_inputs_, state, hooks);
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  absl::StatusOr<GraphHandle> graph = b.EndCapture(stream);
  if (failure.empty() && !graph.ok())
    failure = std::string(graph.status().message());
  if (!failure.empty()) {
    if (graph.ok()) b.DestroyGraph(*graph);
    // `hold` frees what the recorded work would have used.
    return absl::InternalError(absl::StrCat("capture failed: ", failure));
  }
  g->graph_ = *graph;
  g->held_ = hold.Take();
  const size_t n = g->outputs_.size();
  g->owned_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const Tensor& o = g->outputs_[i];
    bool is_state = false;
    for (const Tensor& t : state) is_state |= o.storage() == t.storage();
    g->output_is_state_.push_back(is_state);
    // Owned: a return alone in its buffer, which it fills.
    bool alone = !is_state && o.offset() == 0 && o.is_contiguous() &&
                 o.storage()->nbytes() == o.numel() * o.element_size();
    for (size_t j = 0; j < n && alone; ++j)
      alone = j == i || g->outputs_[j].storage() != o.storage();
    for (const Tensor& t : g->static_inputs_)
      alone &= t.storage() != o.storage();
    if (alone) {
      g->owned_[i] = Owned{.storage = o.storage(),
                           .type = {o.dtype(), o.shape()},
                           .strides = o.strides()};
    }
  }
  // The owned buffers are kept by owned_ alone: no tensor of the graph's
  // holds them (a tensor the caller still holds then shows as a reference
  // more).
  std::erase_if(g->keep_alive_, [&](const Tensor& t) {
    return absl::c_any_of(g->owned_, [&](const std::optional<Owned>& own) {
      return own && own->storage == t.storage();
    });
  });
  for (size_t i = 0; i < n; ++i) {
    if (g->owned_[i]) g->outputs_[i] = Tensor();
  }
  // (A buffer something else still holds stays the graph's to copy out.)
  for (size_t i = 0; i < n; ++i) {
    std::optional<Owned>& own = g->owned_[i];
    if (!own || own->storage.use_count() == 1) continue;
    g->outputs_[i] = own->On(own->storage);
    own.reset();
  }
  return g;
}

CudaGraphReplay::~CudaGraphReplay() {
  // Pending spans of the last replay read this graph's events.
  if (!spans_.empty()) CudaTimer().Flush();
  if (Backend* b = GetBackend()) {
    (void)b->SynchronizeDevice();
    for (const GraphSpan& s : spans_) {
      b->DestroyEvent(s.start);
      b->DestroyEvent(s.end);
    }
    if (graph_ != 0) b->DestroyGraph(graph_);
    for (void* p : held_) (void)DeviceAllocator().Free(p);
  }
}

bool CudaGraphReplay::SameState(absl::Span<const Tensor> state) const {
  if (state_ptrs_.size() != state.size()) return false;
  for (size_t i = 0; i < state.size(); ++i) {
    if (state[i].data_ptr() != state_ptrs_[i]) return false;
  }
  return true;
}

std::vector<Tensor> CudaGraphReplay::Replay(Backend& b, Stream stream,
                                            absl::Span<const Tensor> inputs) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].is_same(static_inputs_[i])) continue;
    CopyInto(static_inputs_[i], inputs[i]);
    copied_bytes_ += inputs[i].numel() * inputs[i].element_size();
  }
  // The last replay's results still held: their holders keep those values
  // in a copy, and the graph's buffer goes on in a storage of its own.
  for (std::optional<Owned>& own : owned_) {
    if (!own || own->storage.use_count() == 1) continue;
    std::shared_ptr<Storage>& buffer = own->storage;
    auto spare = std::make_shared<Storage>(buffer->nbytes(), buffer->device());
    CopyInto(own->On(spare), own->On(buffer));
    copied_bytes_ += buffer->nbytes();
    buffer->SwapMemory(*spare);
    buffer = std::move(spare);
  }
  Launch(b, stream);
  ++replays_;
  std::vector<Tensor> out;
  for (size_t i = 0; i < outputs_.size(); ++i) {
    const Tensor& o = outputs_[i];
    if (output_is_state_[i]) {
      out.push_back(o);
    } else if (const std::optional<Owned>& own = owned_[i]) {
      out.push_back(own->On(own->storage));
    } else {
      Tensor c = empty(o.shape(), {.dtype = o.dtype(), .device = o.device()});
      CopyInto(c, o);
      copied_bytes_ += o.numel() * o.element_size();
      out.push_back(c);
    }
  }
  return out;
}

void CudaGraphReplay::Launch(Backend& b, Stream stream) {
  ProfileSpan host(kCatGraph);
  DeviceTimer* timer = nullptr;
  uint64_t start = 0;
  if (profiled_) {
    timer = &CudaTimer();
    timer->Flush();  // the last replay's spans, before their events recur
    start = timer->Start();
  }
  const absl::Status st = b.LaunchGraph(graph_, stream);
  SJ_REQUIRE(st.ok(),
             "compiled step on CUDA: launching the CUDA graph: ", st.message());
  if (host.active()) {
    host.set_name("cuda graph launch");
    host.End();
  }
  if (timer == nullptr) return;
  TraceEvent e;
  e.cat = kCatGraph;
  e.name = absl::StrCat("cuda graph replay (", spans_.size(), " timed spans)");
  timer->Stop(start, std::move(e));
  ReplayedGraphSpans(spans_);
}

}  // namespace stepjit::runtime::cuda
