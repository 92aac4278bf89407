// The streams, events and graphs of the host emulator: in-order work queues.
#ifndef STEPJIT_TESTING_CUDA_EMULATOR_EMULATOR_STREAMS_H_
#define STEPJIT_TESTING_CUDA_EMULATOR_EMULATOR_STREAMS_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "devices/cuda/backend.h"

namespace stepjit::runtime::cuda {

// Each stream's work runs in order on the stream's own worker thread, with
// the ordering rules emulator_backend.h describes; the first error queued
// work returns is kept for the next synchronizing call. One mutex, mu(),
// guards these queues and the emulator backend's own tables, so that the
// backend checks work and queues it atomically.
class EmulatorStreams {
 public:
  struct StreamState;
  struct EventState;
  using StreamPtr = std::shared_ptr<StreamState>;
  // Satisfied once `stream` has completed its `seq`-th item.
  struct Dep {
    StreamPtr stream;
    uint64_t seq = 0;
  };
  // Work as queued, or as recorded into a graph.
  struct Task {
    std::function<absl::Status()> run = nullptr;   // null: marker or wait
    std::shared_ptr<EventState> record = nullptr;  // RecordEvent's event
    std::vector<Dep> waits = {};  // StreamWaitEvent's dependency
  };

  EmulatorStreams();  // with stream 0
  ~EmulatorStreams() { Shutdown(); }
  EmulatorStreams(const EmulatorStreams&) = delete;
  EmulatorStreams& operator=(const EmulatorStreams&) = delete;

  // Waits for the work queued on every stream, then stops and joins the
  // workers; a second call does nothing.
  void Shutdown();

  // The Backend calls of the same names; each takes mu() itself.
  absl::StatusOr<Stream> CreateStream();
  absl::Status DestroyStream(Stream stream);
  absl::Status SynchronizeStream(Stream stream);
  absl::Status SynchronizeDevice();
  // `timing`: whether ElapsedMs may measure it (Backend::EventTiming).
  absl::StatusOr<Event> CreateEvent(bool timing);
  absl::Status RecordEvent(Event event, Stream stream);
  absl::StatusOr<bool> QueryEvent(Event event);
  absl::Status SynchronizeEvent(Event event);
  absl::Status StreamWaitEvent(Stream stream, Event event);
  absl::StatusOr<float> ElapsedMs(Event start, Event end);
  void DestroyEvent(Event event);
  absl::Status BeginCapture(Stream stream);
  absl::StatusOr<GraphHandle> EndCapture(Stream stream);
  absl::Status LaunchGraph(GraphHandle graph, Stream stream);
  void DestroyGraph(GraphHandle graph);

  // For the backend's calls that queue work: each with mu() held.
  std::mutex& mu() const { return mu_; }
  // An error when the calling thread is capturing a stream into a graph:
  // the driver captures in thread-local mode (devices/cuda/driver), where
  // the capturing thread may not free or wait (cuMemFree,
  // cuStreamSynchronize, cuEventQuery/Synchronize fail with
  // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED), so neither may it here. (It
  // allocates in relaxed mode, which the driver allows.) With mu() held.
  absl::Status CheckNotCapturing(absl::string_view call) const;
  absl::StatusOr<StreamPtr> FindStream(Stream stream, absl::string_view call);
  // Queues `task` on `s` (or records it while `s` is captured); the item's
  // sequence number on `s`, 0 when recorded.
  uint64_t Submit(const StreamPtr& s, Task task);
  // Waits, with `lock` released meanwhile, until `d` is satisfied.
  void WaitFor(std::unique_lock<std::mutex>& lock, const Dep& d);
  // Waits for the work queued so far on every stream.
  void DrainAll(std::unique_lock<std::mutex>& lock);

  // LaunchGraph calls whose replay has started running.
  int64_t graph_launches() const { return graph_launches_.load(); }

 private:
  struct Mark;
  struct Item;

  void Work(StreamState* s);
  StreamPtr NewStream(Stream id);
  bool Done(const Dep& d) const;
  absl::Status TakeError();
  absl::StatusOr<std::shared_ptr<EventState>> FindEvent(Event event,
                                                        absl::string_view call);

  mutable std::mutex mu_;
  std::condition_variable done_cv_;  // an item completed
  absl::Status error_;               // first error of queued work, unreported
  absl::flat_hash_map<Stream, StreamPtr> streams_;
  Stream next_stream_ = 1;
  absl::flat_hash_map<Event, std::shared_ptr<EventState>> events_;
  Event next_event_ = 1;
  absl::flat_hash_map<GraphHandle, std::shared_ptr<std::vector<Task>>> graphs_;
  GraphHandle next_graph_ = 1;
  std::atomic<int64_t> graph_launches_{0};
  // The thread that began the capture in progress, and its stream.
  std::thread::id capture_thread_;
  Stream capture_stream_ = 0;
};

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_TESTING_CUDA_EMULATOR_EMULATOR_STREAMS_H_
