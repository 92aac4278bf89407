// The CUDA device's profiler timer (runtime/profiler.h): CUDA events recorded
// on the current stream around each kernel, read once the work is done.
//
// Clock: an anchor event recorded on an idle device at a known host time
// maps event times onto the profiler's host clock (the anchor is taken again
// after each Flush, so that float milliseconds keep their precision).
//
// CUDA graphs: while a GraphSpanCapture is alive on a thread (the capture of
// a compiled step), the events of Start and Stop are recorded into the graph
// being captured and their spans are kept by the capture; every replay of
// the graph records those events again, and ReplayedGraphSpans makes their
// spans pending, so the kernels inside a replayed graph appear with the
// device time they took in that replay.
#ifndef STEPJIT_DEVICES_CUDA_PROFILE_TIMER_H_
#define STEPJIT_DEVICES_CUDA_PROFILE_TIMER_H_

#include <vector>

#include "devices/cuda/backend.h"
#include "runtime/profiler.h"

namespace stepjit::runtime::cuda {

// A span whose events belong to a captured graph.
struct GraphSpan {
  Event start = 0, end = 0;
  Stream stream = 0;
  TraceEvent event;
};

// The timer of DeviceRuntime::timer for CUDA.
DeviceTimer& CudaTimer();

// While alive on this thread, CudaTimer's spans go to `spans` (which then
// own their events) instead of waiting for a Flush.
class GraphSpanCapture {
 public:
  explicit GraphSpanCapture(std::vector<GraphSpan>* spans);
  ~GraphSpanCapture();
  GraphSpanCapture(const GraphSpanCapture&) = delete;
  GraphSpanCapture& operator=(const GraphSpanCapture&) = delete;

 private:
  std::vector<GraphSpan>* previous_;
};

// After a launch of the graph that captured `spans`: their events were
// recorded again; the next Flush reads them.
void ReplayedGraphSpans(const std::vector<GraphSpan>& spans);

}  // namespace stepjit::runtime::cuda

#endif  // STEPJIT_DEVICES_CUDA_PROFILE_TIMER_H_
