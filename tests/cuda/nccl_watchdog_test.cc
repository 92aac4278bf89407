// NcclComm's watchdog and deadlines without a GPU: a fake NCCL (entry points
// written here) over a fake device backend whose events complete only when
// the test says so. A collective that never completes is aborted after the
// timeout; an asynchronous NCCL error aborts at once; completed collectives
// leave the communicator healthy and it is destroyed, not aborted, at the
// end; an init that never returns gives up after the timeout.
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "devices/cuda/backend.h"
#include "devices/cuda/nccl/nccl_comm.h"
#include "devices/cuda/nccl/nccl_library.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stepjit::runtime::cuda {
namespace {

using ::testing::HasSubstr;

// What the fake NCCL saw and what it answers.
struct FakeState {
  std::atomic<int> init_delay_ms{0};
  std::atomic<int> async_error{nccl::kSuccess};
  std::atomic<int> enqueued{0}, aborts{0}, destroys{0};
};
FakeState* g_fake = new FakeState;  // init threads may outlive a test

nccl::Comm FakeHandle() {
  return reinterpret_cast<nccl::Comm>(uintptr_t{0x5eed});
}

nccl::Result FakeInit(nccl::Comm* comm, int, nccl::UniqueId, int) {
  std::this_thread::sleep_for(
      std::chrono::milliseconds(g_fake->init_delay_ms.load()));
  *comm = FakeHandle();
  return nccl::kSuccess;
}
nccl::Result FakeAllReduce(const void*, void*, size_t, nccl::DataType,
                           nccl::RedOp, nccl::Comm, nccl::CudaStream) {
  ++g_fake->enqueued;
  return nccl::kSuccess;
}
nccl::Result FakeBroadcast(const void*, void*, size_t, nccl::DataType, int,
                           nccl::Comm, nccl::CudaStream) {
  ++g_fake->enqueued;
  return nccl::kSuccess;
}
nccl::Result FakeAllGather(const void*, void*, size_t, nccl::DataType,
                           nccl::Comm, nccl::CudaStream) {
  ++g_fake->enqueued;
  return nccl::kSuccess;
}
nccl::Result FakeAsyncError(nccl::Comm, nccl::Result* error) {
  *error = g_fake->async_error.load();
  return nccl::kSuccess;
}
nccl::Result FakeAbort(nccl::Comm comm) {
  EXPECT_EQ(comm, FakeHandle());
  ++g_fake->aborts;
  return nccl::kSuccess;
}
nccl::Result FakeDestroy(nccl::Comm comm) {
  EXPECT_EQ(comm, FakeHandle());
  ++g_fake->destroys;
  return nccl::kSuccess;
}
const char* FakeErrorString(nccl::Result r) {
  return r == nccl::kRemoteError
             ? "remote process exited or there was a network error"
             : "fake NCCL error";
}

const NcclLibrary& FakeLibrary() {
  static const NcclLibrary* lib = [] {
    auto* l = new NcclLibrary;
    l->path = "fake";
    l->version = 22809;
    l->api.CommInitRank = &FakeInit;
    l->api.AllReduce = &FakeAllReduce;
    l->api.Broadcast = &FakeBroadcast;
    l->api.AllGather = &FakeAllGather;
    l->api.CommGetAsyncError = &FakeAsyncError;
    l->api.CommAbort = &FakeAbort;
    l->api.CommDestroy = &FakeDestroy;
    l->api.GetErrorString = &FakeErrorString;
    return l;
  }();
  return *lib;
}

// A "device" backend whose only working calls are events; they complete
// when `events_done` is set.
class FakeDeviceBackend final : public Backend {
 public:
  std::atomic<bool> events_done{false};
  std::atomic<int> live_events{0};

  int DeviceOrdinal() const override { return 0; }
  std::string Describe() const override { return "fake device"; }
  std::string Arch() const override { return "sm_90"; }
  absl::StatusOr<Event> CreateEvent(EventTiming) override {
    ++live_events;
    return Event{++next_event_};
  }
  absl::Status RecordEvent(Event, Stream) override { return absl::OkStatus(); }
  absl::StatusOr<bool> QueryEvent(Event) override { return events_done.load(); }
  void DestroyEvent(Event) override { --live_events; }

  absl::StatusOr<void*> DeviceAlloc(size_t) override { return No(); }
  absl::Status DeviceFree(void*) override { return No(); }
  absl::StatusOr<void*> HostAllocPinned(size_t) override { return No(); }
  absl::Status HostFreePinned(void*) override { return No(); }
  absl::Status Copy(void*, const void*, size_t, CopyKind, Stream) override {
    return No();
  }
  absl::Status Memset(void*, uint8_t, size_t, Stream) override { return No(); }
  absl::StatusOr<Stream> CreateStream() override { return No(); }
  absl::Status DestroyStream(Stream) override { return No(); }
  absl::Status SynchronizeStream(Stream) override { return No(); }
  absl::Status SynchronizeDevice() override { return No(); }
  absl::Status SynchronizeEvent(Event) override { return No(); }
  absl::Status StreamWaitEvent(Stream, Event) override { return No(); }
  absl::StatusOr<float> ElapsedMs(Event, Event) override { return No(); }
  absl::StatusOr<std::shared_ptr<LoadedModule>> LoadSource(
      const std::string&, const std::string&,
      const std::vector<std::string>&) override {
    return No();
  }
  absl::Status Launch(KernelHandle, int64_t, int, void**, Stream) override {
    return No();
  }
  absl::Status Gemm(const DeviceGemmArgs&, Stream) override { return No(); }
  absl::Status BeginCapture(Stream) override { return No(); }
  absl::StatusOr<GraphHandle> EndCapture(Stream) override { return No(); }
  absl::Status LaunchGraph(GraphHandle, Stream) override { return No(); }
  void DestroyGraph(GraphHandle) override {}

 private:
  static absl::Status No() {
    return absl::UnimplementedError("not on the fake device");
  }
  std::atomic<Event> next_event_{0};
};

class NcclWatchdogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_fake->init_delay_ms = 0;
    g_fake->async_error = nccl::kSuccess;
    g_fake->enqueued = 0;
    g_fake->aborts = 0;
    g_fake->destroys = 0;
  }
  std::unique_ptr<NcclComm> Make(double timeout_s) {
    NcclCommOptions o{.rank = 1, .world = 2, .timeout_s = timeout_s};
    o.on_failure = [this](const absl::Status& s) { failures.push_back(s); };
    absl::StatusOr<std::unique_ptr<NcclComm>> comm =
        NcclComm::Create(FakeLibrary(), backend, o);
    EXPECT_TRUE(comm.ok()) << comm.status();
    return comm.ok() ? *std::move(comm) : nullptr;
  }
  FakeDeviceBackend backend;
  std::vector<absl::Status> failures;
  float buffer[4] = {};
};

TEST_F(NcclWatchdogTest,
       ACollectiveThatNeverCompletesIsAbortedAfterTheTimeout) {
  std::unique_ptr<NcclComm> comm = Make(0.2);
  ASSERT_NE(comm, nullptr);
  ASSERT_TRUE(
      comm->AllReduce(buffer, buffer, 4, ir::DType::kF32, nccl::kSum, 0).ok());
  const absl::Status s = comm->WaitAll();
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("rank 1: NCCL AllReduce #1 (16 bytes) did not "
                        "complete within the timeout of 0.2 s"));
  EXPECT_EQ(g_fake->aborts, 1);
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0], s);
  EXPECT_EQ(comm->health(), s);
  EXPECT_EQ(backend.live_events, 0);  // the watched event was released
  // Later calls fail at once with the same error and reach NCCL no more.
  EXPECT_EQ(comm->Broadcast(buffer, buffer, 4, ir::DType::kF32, 0, 0), s);
  EXPECT_EQ(g_fake->enqueued, 1);
  comm.reset();
  EXPECT_EQ(g_fake->aborts, 1);    // not aborted twice,
  EXPECT_EQ(g_fake->destroys, 0);  // and not destroyed after the abort
}

TEST_F(NcclWatchdogTest, AnAsyncErrorAbortsBeforeTheTimeout) {
  std::unique_ptr<NcclComm> comm = Make(600);
  ASSERT_NE(comm, nullptr);
  ASSERT_TRUE(comm->AllGather(buffer, buffer, 2, ir::DType::kF32, 0).ok());
  g_fake->async_error = nccl::kRemoteError;
  // Returns long before the 600 s timeout, or the test would hang.
  const absl::Status s = comm->WaitAll();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("NCCL failed during AllGather #1 (8 bytes)"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("remote process exited"));
  EXPECT_EQ(g_fake->aborts, 1);
  EXPECT_EQ(failures.size(), 1u);
}

TEST_F(NcclWatchdogTest, CompletedCollectivesLeaveItHealthy) {
  backend.events_done = true;
  std::unique_ptr<NcclComm> comm = Make(60);
  ASSERT_NE(comm, nullptr);
  ASSERT_TRUE(
      comm->AllReduce(buffer, buffer, 4, ir::DType::kBF16, nccl::kAvg, 0).ok());
  ASSERT_TRUE(comm->Broadcast(buffer, buffer, 4, ir::DType::kF32, 1, 0).ok());
  ASSERT_TRUE(comm->AllGather(buffer, buffer, 1, ir::DType::kI64, 0).ok());
  EXPECT_TRUE(comm->WaitAll().ok());
  EXPECT_EQ(comm->collectives(), 3);
  EXPECT_EQ(g_fake->enqueued, 3);
  // A bool tensor and a root outside the world are refused before NCCL.
  EXPECT_TRUE(absl::IsInvalidArgument(
      comm->AllReduce(buffer, buffer, 4, ir::DType::kBool, nccl::kSum, 0)));
  EXPECT_TRUE(absl::IsInvalidArgument(
      comm->Broadcast(buffer, buffer, 4, ir::DType::kF32, 2, 0)));
  EXPECT_EQ(g_fake->enqueued, 3);
  EXPECT_TRUE(comm->health().ok());
  comm.reset();
  EXPECT_EQ(g_fake->destroys, 1);
  EXPECT_EQ(g_fake->aborts, 0);
  EXPECT_TRUE(failures.empty());
}

TEST_F(NcclWatchdogTest, InitThatNeverReturnsGivesUpAfterTheTimeout) {
  g_fake->init_delay_ms = 1500;
  absl::StatusOr<std::unique_ptr<NcclComm>> comm = NcclComm::Create(
      FakeLibrary(), backend, {.rank = 1, .world = 2, .timeout_s = 0.1});
  ASSERT_FALSE(comm.ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(comm.status())) << comm.status();
  EXPECT_THAT(
      std::string(comm.status().message()),
      HasSubstr(
          "rank 1: ncclCommInitRank (world of 2) did not finish within 0.1 s"));
}

TEST_F(NcclWatchdogTest, RankOutsideTheWorldIsRefused) {
  absl::StatusOr<std::unique_ptr<NcclComm>> comm =
      NcclComm::Create(FakeLibrary(), backend, {.rank = 2, .world = 2});
  EXPECT_TRUE(absl::IsInvalidArgument(comm.status())) << comm.status();
}

}  // namespace
}  // namespace stepjit::runtime::cuda
