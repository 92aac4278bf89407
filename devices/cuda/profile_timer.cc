// CUDA event timing for the profiler: a pool of events, the spans waiting to
// be read, and the anchor that maps event times onto the host clock.
#include "devices/cuda/profile_timer.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace stepjit::runtime::cuda {
namespace {

thread_local std::vector<GraphSpan>* t_graph_spans = nullptr;

class Timer final : public DeviceTimer {
 public:
  uint64_t Start() override {
    Backend* b = GetBackend();
    if (b == nullptr) return 0;
    std::lock_guard<std::mutex> lock(mu_);
    // The anchor must precede the span; it cannot be taken during a capture,
    // whose spans are read only after a replay that a Start outside the
    // capture (the graph's own span) anchors.
    if (t_graph_spans == nullptr && !Anchor(*b)) return 0;
    const Event e = NewEvent(*b, /*pooled=*/t_graph_spans == nullptr);
    if (e == 0 || !Check(b->RecordEvent(e, CurrentStream()))) return 0;
    return e;
  }

  void Stop(uint64_t start, TraceEvent event) override {
    Backend* b = GetBackend();
    if (start == 0 || b == nullptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    const bool in_graph = t_graph_spans != nullptr;
    event.outside_step = !InsideStep();
    const Event end = NewEvent(*b, !in_graph);
    const Stream stream = CurrentStream();
    if (end == 0 || !Check(b->RecordEvent(end, stream))) return;
    if (in_graph) {
      t_graph_spans->push_back({start, end, stream, std::move(event)});
    } else {
      pending_.push_back({start, end, stream, std::move(event), true});
    }
  }

  void Flush() override {
    std::lock_guard<std::mutex> lock(mu_);
    FlushLocked();
  }

  void AddReplayed(const std::vector<GraphSpan>& spans) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const GraphSpan& s : spans)
      pending_.push_back({s.start, s.end, s.stream, s.event, false});
  }

 private:
  struct Pending {
    Event start = 0, end = 0;
    Stream stream = 0;
    TraceEvent event;
    bool pooled = true;  // else the events belong to a captured graph
  };

  // False (once reported) when `st` failed.
  bool Check(const absl::Status& st) {
    if (st.ok()) return true;
    if (!warned_) {
      warned_ = true;
      std::fprintf(stderr,
                   "stepjit: profiler: timing CUDA work with events failed "
                   "(%s); device spans are missing from the profile\n",
                   std::string(st.message()).c_str());
    }
    return false;
  }

  // Forgets the events of a backend that has been replaced.
  void SyncGeneration() {
    if (generation_ == BackendGeneration()) return;
    generation_ = BackendGeneration();
    pool_.clear();
    pending_.clear();
    anchor_ = 0;
    anchored_ = false;
  }

  Event NewEvent(Backend& b, bool pooled) {
    SyncGeneration();
    if (pooled && !pool_.empty()) {
      const Event e = pool_.back();
      pool_.pop_back();
      return e;
    }
    absl::StatusOr<Event> e = b.CreateEvent(Backend::EventTiming::kOn);
    return Check(e.status()) ? *e : 0;
  }

  // Records the anchor on the idle device: it completes at about the host
  // time read just before.
  bool Anchor(Backend& b) {
    SyncGeneration();
    if (anchored_) return true;
    if (anchor_ == 0) {
      absl::StatusOr<Event> e = b.CreateEvent(Backend::EventTiming::kOn);
      if (!Check(e.status())) return false;
      anchor_ = *e;
    }
    if (!Check(b.SynchronizeDevice())) return false;
    anchor_ns_ = ProfileNowNs();
    if (!Check(b.RecordEvent(anchor_, 0))) return false;
    anchored_ = true;
    if (!exit_flush_) {
      // Registered after the backend exists, so it runs before the backend
      // is destroyed: spans still pending at exit reach the profile.
      exit_flush_ = true;
      std::atexit([] { CudaTimer().Flush(); });
    }
    return true;
  }

  void FlushLocked() {
    if (pending_.empty()) return;  // no backend query on the CPU
    SyncGeneration();
    Backend* b = GetBackend();
    if (pending_.empty() || b == nullptr) return;
    for (Pending& p : pending_) {
      if (!Check(b->SynchronizeEvent(p.end))) continue;
      absl::StatusOr<float> begin = b->ElapsedMs(anchor_, p.start);
      absl::StatusOr<float> end = b->ElapsedMs(anchor_, p.end);
      if (!Check(begin.status()) || !Check(end.status())) continue;
      const int64_t begin_ns = std::llround(static_cast<double>(*begin) * 1e6);
      const int64_t end_ns = std::llround(static_cast<double>(*end) * 1e6);
      p.event.begin_ns = anchor_ns_ + begin_ns;
      p.event.dur_ns = end_ns - begin_ns;
      p.event.tid = DeviceTrack(
          p.stream, p.stream == 0 ? std::string("cuda stream 0 (default)")
                                  : absl::StrCat("cuda stream ", p.stream));
      RecordEvent(std::move(p.event));
      if (p.pooled) {
        pool_.push_back(p.start);
        pool_.push_back(p.end);
      }
    }
    pending_.clear();
    anchored_ = false;
  }

  std::mutex mu_;
  uint64_t generation_ = 0;
  std::vector<Event> pool_;
  std::vector<Pending> pending_;
  Event anchor_ = 0;
  int64_t anchor_ns_ = 0;
  bool anchored_ = false;
  bool exit_flush_ = false;
  bool warned_ = false;
};

Timer& TheTimer() {
  static Timer* timer = new Timer;
  return *timer;
}

}  // namespace

DeviceTimer& CudaTimer() { return TheTimer(); }

GraphSpanCapture::GraphSpanCapture(std::vector<GraphSpan>* spans)
    : previous_(t_graph_spans) {
  t_graph_spans = spans;
}
GraphSpanCapture::~GraphSpanCapture() { t_graph_spans = previous_; }

void ReplayedGraphSpans(const std::vector<GraphSpan>& spans) {
  TheTimer().AddReplayed(spans);
}

}  // namespace stepjit::runtime::cuda
