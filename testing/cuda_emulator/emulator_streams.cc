// The host emulator's streams: a worker thread per stream running its queue
// in order, events as markers in the queues, and graphs as recorded tasks.
#include "testing/cuda_emulator/emulator_streams.h"

#include <chrono>
#include <deque>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "ir/status.h"

namespace stepjit::runtime::cuda {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

// Where an event was last recorded; `when` is set as the marker runs.
struct EmulatorStreams::Mark {
  StreamPtr stream;
  uint64_t seq = 0;
  Clock::time_point when;
};

struct EmulatorStreams::EventState {
  std::shared_ptr<Mark> latest;  // null until recorded
  bool timing = true;
};

struct EmulatorStreams::Item {
  std::function<absl::Status()> run;
  std::vector<Dep> deps;
  std::shared_ptr<Mark> mark;
};

struct EmulatorStreams::StreamState {
  Stream id = 0;
  std::deque<Item> queue;
  uint64_t submitted = 0, completed = 0;
  bool stop = false;
  std::condition_variable cv;                  // work queued or stop
  std::unique_ptr<std::vector<Task>> capture;  // non-null while capturing
  std::thread worker;
};

// ---- Queues ----

EmulatorStreams::EmulatorStreams() {
  std::lock_guard<std::mutex> lock(mu_);
  streams_[0] = NewStream(0);
}

void EmulatorStreams::Shutdown() {
  std::vector<StreamPtr> streams;
  {
    std::unique_lock<std::mutex> lock(mu_);
    DrainAll(lock);
    for (auto& [id, s] : streams_) {
      s->stop = true;
      s->cv.notify_all();
      streams.push_back(s);
    }
    streams_.clear();
  }
  for (const StreamPtr& s : streams) s->worker.join();
}

EmulatorStreams::StreamPtr EmulatorStreams::NewStream(Stream id) {
  auto s = std::make_shared<StreamState>();
  s->id = id;
  s->worker = std::thread([this, raw = s.get()] { Work(raw); });
  return s;
}

void EmulatorStreams::Work(StreamState* s) {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    s->cv.wait(lock, [&] { return s->stop || !s->queue.empty(); });
    if (s->queue.empty()) return;
    Item item = std::move(s->queue.front());
    s->queue.pop_front();
    for (const Dep& d : item.deps) WaitFor(lock, d);
    absl::Status status;
    if (item.run) {
      lock.unlock();
      status = item.run();
      lock.lock();
    }
    if (item.mark != nullptr) item.mark->when = Clock::now();
    if (!status.ok() && error_.ok()) error_ = status;
    ++s->completed;
    done_cv_.notify_all();
  }
}

uint64_t EmulatorStreams::Submit(const StreamPtr& s, Task task) {
  if (s->capture != nullptr) {
    s->capture->push_back(std::move(task));
    return 0;
  }
  Item item{std::move(task.run), std::move(task.waits), nullptr};
  // The legacy default stream: stream 0 and the other streams wait for each
  // other's earlier work.
  if (s->id == 0) {
    for (const auto& [id, other] : streams_) {
      if (id != 0 && other->submitted > other->completed)
        item.deps.push_back({other, other->submitted});
    }
  } else {
    const StreamPtr& legacy = streams_.at(0);
    if (legacy->submitted > legacy->completed)
      item.deps.push_back({legacy, legacy->submitted});
  }
  const uint64_t seq = ++s->submitted;
  if (task.record != nullptr) {
    item.mark = std::make_shared<Mark>(Mark{s, seq, {}});
    task.record->latest = item.mark;
  }
  s->queue.push_back(std::move(item));
  s->cv.notify_one();
  return seq;
}

bool EmulatorStreams::Done(const Dep& d) const {
  return d.stream->completed >= d.seq;
}

void EmulatorStreams::WaitFor(std::unique_lock<std::mutex>& lock,
                              const Dep& d) {
  done_cv_.wait(lock, [&] { return Done(d); });
}

absl::Status EmulatorStreams::TakeError() {
  return std::exchange(error_, absl::OkStatus());
}

void EmulatorStreams::DrainAll(std::unique_lock<std::mutex>& lock) {
  std::vector<Dep> all;
  for (const auto& [id, s] : streams_) all.push_back({s, s->submitted});
  for (const Dep& d : all) WaitFor(lock, d);
}

absl::StatusOr<EmulatorStreams::StreamPtr> EmulatorStreams::FindStream(
    Stream stream, absl::string_view call) {
  auto it = streams_.find(stream);
  if (it == streams_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        call, ": stream ", stream, " is not a stream of the host emulator"));
  }
  return it->second;
}

absl::StatusOr<std::shared_ptr<EmulatorStreams::EventState>>
EmulatorStreams::FindEvent(Event event, absl::string_view call) {
  auto it = events_.find(event);
  if (it == events_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        call, ": event ", event, " is not an event of the host emulator"));
  }
  return it->second;
}

// ---- Streams and events ----

absl::StatusOr<Stream> EmulatorStreams::CreateStream() {
  std::lock_guard<std::mutex> lock(mu_);
  const Stream id = next_stream_++;
  streams_[id] = NewStream(id);
  return id;
}

absl::Status EmulatorStreams::DestroyStream(Stream stream) {
  StreamPtr s;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (stream == 0)
      return absl::InvalidArgumentError(
          "DestroyStream: stream 0 is the default stream");
    ASSIGN_OR_RETURN(s, FindStream(stream, "DestroyStream"));
    if (s->capture != nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("DestroyStream: stream ", stream, " is being captured"));
    }
    WaitFor(lock, {s, s->submitted});
    s->stop = true;
    s->cv.notify_all();
    streams_.erase(stream);
  }
  s->worker.join();
  return absl::OkStatus();
}

absl::Status EmulatorStreams::SynchronizeStream(Stream stream) {
  std::unique_lock<std::mutex> lock(mu_);
  RETURN_IF_ERROR(CheckNotCapturing("SynchronizeStream"));
  ASSIGN_OR_RETURN(StreamPtr s, FindStream(stream, "SynchronizeStream"));
  if (s->capture != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "SynchronizeStream: stream ", stream,
        " is being captured into a graph (CUDA: operation not permitted when "
        "stream is capturing)"));
  }
  WaitFor(lock, {s, s->submitted});
  return TakeError();
}

absl::Status EmulatorStreams::SynchronizeDevice() {
  std::unique_lock<std::mutex> lock(mu_);
  for (const auto& [id, s] : streams_) {
    if (s->capture != nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "SynchronizeDevice: stream ", id, " is being captured into a graph"));
    }
  }
  DrainAll(lock);
  return TakeError();
}

absl::StatusOr<Event> EmulatorStreams::CreateEvent(bool timing) {
  std::lock_guard<std::mutex> lock(mu_);
  const Event id = next_event_++;
  auto state = std::make_shared<EventState>();
  state->timing = timing;
  events_[id] = std::move(state);
  return id;
}

absl::Status EmulatorStreams::RecordEvent(Event event, Stream stream) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(std::shared_ptr<EventState> e,
                   FindEvent(event, "RecordEvent"));
  ASSIGN_OR_RETURN(StreamPtr s, FindStream(stream, "RecordEvent"));
  Submit(s, {.record = std::move(e)});
  return absl::OkStatus();
}

absl::StatusOr<bool> EmulatorStreams::QueryEvent(Event event) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(CheckNotCapturing("QueryEvent"));
  ASSIGN_OR_RETURN(std::shared_ptr<EventState> e,
                   FindEvent(event, "QueryEvent"));
  return e->latest == nullptr || Done({e->latest->stream, e->latest->seq});
}

absl::Status EmulatorStreams::SynchronizeEvent(Event event) {
  std::unique_lock<std::mutex> lock(mu_);
  RETURN_IF_ERROR(CheckNotCapturing("SynchronizeEvent"));
  ASSIGN_OR_RETURN(std::shared_ptr<EventState> e,
                   FindEvent(event, "SynchronizeEvent"));
  if (e->latest == nullptr) return absl::OkStatus();
  WaitFor(lock, {e->latest->stream, e->latest->seq});
  return TakeError();
}

absl::Status EmulatorStreams::StreamWaitEvent(Stream stream, Event event) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(std::shared_ptr<EventState> e,
                   FindEvent(event, "StreamWaitEvent"));
  ASSIGN_OR_RETURN(StreamPtr s, FindStream(stream, "StreamWaitEvent"));
  if (e->latest == nullptr) return absl::OkStatus();  // as in CUDA
  Submit(s, {.waits = {{e->latest->stream, e->latest->seq}}});
  return absl::OkStatus();
}

absl::StatusOr<float> EmulatorStreams::ElapsedMs(Event start, Event end) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(std::shared_ptr<EventState> a,
                   FindEvent(start, "ElapsedMs"));
  ASSIGN_OR_RETURN(std::shared_ptr<EventState> b, FindEvent(end, "ElapsedMs"));
  for (const auto& e : {a, b}) {
    if (!e->timing) {
      return absl::InvalidArgumentError(
          "ElapsedMs: an event was created without timing (CUDA: invalid "
          "handle)");
    }
    if (e->latest == nullptr) {
      return absl::InvalidArgumentError(
          "ElapsedMs: an event has not been recorded");
    }
    if (!Done({e->latest->stream, e->latest->seq})) {
      return absl::FailedPreconditionError(
          "ElapsedMs: an event has not completed yet (CUDA: not ready)");
    }
  }
  return std::chrono::duration<float, std::milli>(b->latest->when -
                                                  a->latest->when)
      .count();
}

void EmulatorStreams::DestroyEvent(Event event) {
  std::lock_guard<std::mutex> lock(mu_);
  events_.erase(event);  // queued markers keep their state alive
}

absl::Status EmulatorStreams::CheckNotCapturing(absl::string_view call) const {
  if (capture_thread_ == std::thread::id() ||
      capture_thread_ != std::this_thread::get_id())
    return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      call, ": this thread is capturing stream ", capture_stream_,
      " into a graph (CUDA: operation not permitted when stream is capturing, "
      "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)"));
}

// ---- Graphs ----

absl::Status EmulatorStreams::BeginCapture(Stream stream) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(StreamPtr s, FindStream(stream, "BeginCapture"));
  for (const auto& [id, other] : streams_) {
    if (other->capture != nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "BeginCapture: stream ", id,
          " is already being captured; the host emulator captures one stream "
          "at a time"));
    }
  }
  s->capture = std::make_unique<std::vector<Task>>();
  capture_thread_ = std::this_thread::get_id();
  capture_stream_ = stream;
  return absl::OkStatus();
}

absl::StatusOr<GraphHandle> EmulatorStreams::EndCapture(Stream stream) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(StreamPtr s, FindStream(stream, "EndCapture"));
  if (s->capture == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("EndCapture: stream ", stream, " is not being captured"));
  }
  const GraphHandle id = next_graph_++;
  graphs_[id] = std::shared_ptr<std::vector<Task>>(std::move(s->capture));
  capture_thread_ = std::thread::id();
  return id;
}

absl::Status EmulatorStreams::LaunchGraph(GraphHandle graph, Stream stream) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(StreamPtr s, FindStream(stream, "LaunchGraph"));
  auto it = graphs_.find(graph);
  if (it == graphs_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LaunchGraph: ", graph, " is not a graph of the host emulator"));
  }
  Submit(s, {.run = [this] {
           ++graph_launches_;
           return absl::OkStatus();
         }});
  for (const Task& t : *it->second) Submit(s, t);
  return absl::OkStatus();
}

void EmulatorStreams::DestroyGraph(GraphHandle graph) {
  std::lock_guard<std::mutex> lock(mu_);
  graphs_.erase(graph);  // queued replays hold copies of the work
}

}  // namespace stepjit::runtime::cuda
