// The host emulator Backend (testing/cuda_emulator/emulator_backend.h): memory
// and provenance errors, out-of-memory with a limit, stream order, events, the
// legacy default stream, kernels with barriers and warp shuffles, compile
// errors, graph capture and replay, and GEMMs against a float64 loop.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/cuda_emulator/emulator_backend.h"
#include "testing/cuda_emulator/host_emulation.h"

namespace stepjit::runtime::cuda {
namespace {

using ::testing::HasSubstr;

// `delay` keeps its stream busy before it writes, so work that is wrongly
// ordered after it would see the old values.
constexpr char kKernels[] = R"(
extern "C" __global__ void delay_fill(float* out, int n, float v, int spin) {
  float x = 0.0f;
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    for (int i = 0; i < spin; ++i) x = x * 0.999f + 1.0f;
  }
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += gridDim.x * blockDim.x) {
    out[i] = v + (x < 0.0f ? 1.0f : 0.0f);
  }
}
extern "C" __global__ void add_one(float* p, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += gridDim.x * blockDim.x) {
    p[i] += 1.0f;
  }
}
// Sum of in[0..n) into *out: warp shuffles, a shared array, a barrier, and
// one atomicAdd per block.
extern "C" __global__ void block_sum(const double* in, double* out, int n) {
  __shared__ double part[32];
  double v = 0.0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += gridDim.x * blockDim.x) {
    v += in[i];
  }
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.0;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x == 0) atomicAdd(out, v);
  }
}
// Lane 0 waits at a shuffle the others never reach.
extern "C" __global__ void deadlock(float* p) {
  float v = p[threadIdx.x];
  if (threadIdx.x == 0) {
    v = __shfl_down_sync(0xffffffffu, v, 1);
  } else {
    __syncthreads();
  }
  p[threadIdx.x] = v;
}
)";

class EmulatorBackendTest : public testing::Test {
 protected:
  void SetUp() override { backend_ = MakeEmulatorBackend(); }

  void* Alloc(size_t bytes) {
    absl::StatusOr<void*> p = backend_->DeviceAlloc(bytes);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *p : nullptr;
  }

  // The test kernels, or null (with the test skipped) without a compiler.
  std::shared_ptr<LoadedModule> Kernels() {
    absl::StatusOr<std::shared_ptr<LoadedModule>> m = backend_->LoadSource(
        kKernels, "emulator_test",
        {"delay_fill", "add_one", "block_sum", "deadlock"});
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? *m : nullptr;
  }

  KernelHandle Function(const LoadedModule& m, const char* name) {
    absl::StatusOr<KernelHandle> k = m.Function(name);
    EXPECT_TRUE(k.ok()) << k.status();
    return k.ok() ? *k : KernelHandle{};
  }

  absl::Status DelayFill(const LoadedModule& m, float* out, int n, float v,
                         int spin, Stream stream) {
    void* args[] = {&out, &n, &v, &spin};
    return backend_->Launch(Function(m, "delay_fill"), 100, 64, args, stream);
  }

  std::vector<float> Read(const float* device, int n, Stream stream = 0) {
    std::vector<float> host(static_cast<size_t>(n));
    EXPECT_TRUE(backend_
                    ->Copy(host.data(), device, host.size() * sizeof(float),
                           CopyKind::kDeviceToHost, stream)
                    .ok());
    return host;
  }

  std::unique_ptr<Backend> backend_;
};

#define SKIP_WITHOUT_COMPILER()              \
  if (codegen::cuda::HostCompiler().empty()) \
  GTEST_SKIP() << "no host C++ compiler for the emulation"

constexpr int kSpin = 20'000'000;  // tens of milliseconds

TEST_F(EmulatorBackendTest, DescribesItself) {
  EXPECT_EQ(backend_->Describe(), "host emulator (64-thread blocks)");
  EXPECT_EQ(backend_->Arch(), "host");
  EXPECT_EQ(backend_->Limits().max_grid, 4);
  EXPECT_EQ(backend_->Limits().preferred_block, 64);
  EXPECT_EQ(backend_->Limits().max_block, 1024);
  EXPECT_TRUE(IsEmulatorBackend(*backend_));
}

TEST_F(EmulatorBackendTest, CopiesRoundTripAndCheckProvenance) {
  auto* d = static_cast<float*>(Alloc(100 * sizeof(float)));
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(d) % 64, 0u);
  std::vector<float> host(100);
  std::iota(host.begin(), host.end(), 1.0f);
  ASSERT_TRUE(
      backend_->Copy(d, host.data(), 400, CopyKind::kHostToDevice, 0).ok());
  EXPECT_EQ(Read(d, 100), host);

  // A host pointer as the device side, a device pointer as the host side,
  // a range past the allocation, a device-to-device copy from the host.
  absl::Status s =
      backend_->Copy(host.data(), d, 400, CopyKind::kHostToDevice, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("Copy (host to device)"));
  EXPECT_THAT(s.message(), HasSubstr("not device memory"));
  s = backend_->Copy(d, d + 10, 40, CopyKind::kHostToDevice, 0);
  EXPECT_THAT(s.message(), HasSubstr("is device memory, but the copy kind"));
  s = backend_->Copy(host.data(), d + 50, 400, CopyKind::kDeviceToHost, 0);
  EXPECT_THAT(s.message(), HasSubstr("runs past its device allocation"));
  s = backend_->Copy(d, host.data(), 4, CopyKind::kDeviceToDevice, 0);
  EXPECT_THAT(s.message(), HasSubstr("Copy (device to device): the source"));
  s = backend_->Memset(host.data(), 0, 4, 0);
  EXPECT_THAT(s.message(), HasSubstr("Memset"));
  EXPECT_EQ(
      backend_->Copy(d, host.data(), 4, CopyKind::kHostToDevice, 77).code(),
      absl::StatusCode::kInvalidArgument);

  ASSERT_TRUE(backend_->Memset(d, 0, 400, 0).ok());
  EXPECT_EQ(Read(d, 100), std::vector<float>(100, 0.0f));

  EXPECT_EQ(backend_->DeviceFree(d + 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(backend_->DeviceFree(d).ok());
  s = backend_->DeviceFree(d);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("DeviceFree"));
  EXPECT_EQ(
      backend_->Copy(host.data(), d, 4, CopyKind::kDeviceToHost, 0).code(),
      absl::StatusCode::kInvalidArgument);
}

TEST_F(EmulatorBackendTest, OutOfMemoryAtTheLimit) {
  EmulatorOptions options;
  options.memory_limit_bytes = 1000;
  backend_ = MakeEmulatorBackend(options);
  void* a = Alloc(600);
  absl::StatusOr<void*> b = backend_->DeviceAlloc(600);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(b.status().message(), HasSubstr("out of device memory"));
  // Pinned memory does not count.
  absl::StatusOr<void*> pinned = backend_->HostAllocPinned(4000);
  ASSERT_TRUE(pinned.ok());
  EXPECT_TRUE(backend_->HostFreePinned(*pinned).ok());
  ASSERT_TRUE(backend_->DeviceFree(a).ok());
  b = backend_->DeviceAlloc(1000);
  EXPECT_TRUE(b.ok()) << b.status();
}

TEST_F(EmulatorBackendTest, PinnedCopiesAreAsynchronous) {
  constexpr int n = 256;
  auto* d = static_cast<float*>(Alloc(n * sizeof(float)));
  absl::StatusOr<void*> p = backend_->HostAllocPinned(n * sizeof(float));
  ASSERT_TRUE(p.ok());
  auto* pinned = static_cast<float*>(*p);
  for (int i = 0; i < n; ++i) pinned[i] = 0.5f * i;
  const EmulatorStats before = GetEmulatorStats(*backend_);
  absl::StatusOr<Stream> s = backend_->CreateStream();
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(
      backend_->Copy(d, pinned, n * 4, CopyKind::kHostToDevice, *s).ok());
  // Pinned memory is host memory, not a device-to-device destination.
  EXPECT_EQ(
      backend_->Copy(pinned, d, n * 4, CopyKind::kDeviceToDevice, *s).code(),
      absl::StatusCode::kInvalidArgument);
  std::vector<float> expect(pinned, pinned + n);
  auto* back = static_cast<float*>(*backend_->HostAllocPinned(n * 4));
  ASSERT_TRUE(backend_->Copy(back, d, n * 4, CopyKind::kDeviceToHost, *s).ok());
  ASSERT_TRUE(backend_->SynchronizeStream(*s).ok());
  EXPECT_EQ(std::vector<float>(back, back + n), expect);
  const EmulatorStats after = GetEmulatorStats(*backend_);
  EXPECT_EQ(after.copies - before.copies, 2);
  EXPECT_EQ(after.bytes_copied - before.bytes_copied, 2 * n * 4);
  EXPECT_EQ(backend_->HostFreePinned(d).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(backend_->HostFreePinned(pinned).ok());
  EXPECT_TRUE(backend_->HostFreePinned(back).ok());
  EXPECT_TRUE(backend_->DestroyStream(*s).ok());
}

TEST_F(EmulatorBackendTest, StreamOrderEventsAndCrossStreamWaits) {
  SKIP_WITHOUT_COMPILER();
  std::shared_ptr<LoadedModule> m = Kernels();
  ASSERT_NE(m, nullptr);
  constexpr int n = 1000;
  auto* a = static_cast<float*>(Alloc(n * 4));
  auto* b = static_cast<float*>(Alloc(n * 4));
  absl::StatusOr<Stream> s1 = backend_->CreateStream();
  absl::StatusOr<Stream> s2 = backend_->CreateStream();
  ASSERT_TRUE(s1.ok() && s2.ok());
  absl::StatusOr<Event> start =
      backend_->CreateEvent(Backend::EventTiming::kOn);
  absl::StatusOr<Event> done = backend_->CreateEvent(Backend::EventTiming::kOn);
  ASSERT_TRUE(start.ok() && done.ok());
  // An event made only to order work cannot be timed, as on the driver.
  absl::StatusOr<Event> order =
      backend_->CreateEvent(Backend::EventTiming::kOff);
  ASSERT_TRUE(order.ok());
  EXPECT_EQ(*backend_->QueryEvent(*done), true);  // never recorded
  EXPECT_EQ(backend_->ElapsedMs(*start, *done).status().code(),
            absl::StatusCode::kInvalidArgument);

  // Same stream: a pageable copy after a slow kernel sees its writes.
  ASSERT_TRUE(DelayFill(*m, a, n, 3.0f, kSpin, *s1).ok());
  EXPECT_EQ(Read(a, n, *s1), std::vector<float>(n, 3.0f));

  // Across streams: b is copied from a on s2 after an event on s1.
  ASSERT_TRUE(backend_->RecordEvent(*start, *s1).ok());
  ASSERT_TRUE(DelayFill(*m, a, n, 4.0f, kSpin, *s1).ok());
  ASSERT_TRUE(backend_->RecordEvent(*done, *s1).ok());
  EXPECT_EQ(*backend_->QueryEvent(*done), false);  // the kernel is still busy
  ASSERT_TRUE(backend_->StreamWaitEvent(*s2, *done).ok());
  ASSERT_TRUE(backend_->Copy(b, a, n * 4, CopyKind::kDeviceToDevice, *s2).ok());
  EXPECT_EQ(Read(b, n, *s2), std::vector<float>(n, 4.0f));
  ASSERT_TRUE(backend_->SynchronizeEvent(*done).ok());
  EXPECT_EQ(*backend_->QueryEvent(*done), true);
  absl::StatusOr<float> ms = backend_->ElapsedMs(*start, *done);
  ASSERT_TRUE(ms.ok()) << ms.status();
  EXPECT_GT(*ms, 0.0f);
  ASSERT_TRUE(backend_->RecordEvent(*order, *s1).ok());
  ASSERT_TRUE(backend_->SynchronizeEvent(*order).ok());
  EXPECT_EQ(backend_->ElapsedMs(*start, *order).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->ElapsedMs(*order, *done).status().code(),
            absl::StatusCode::kInvalidArgument);
  backend_->DestroyEvent(*order);

  // The legacy default stream waits for the other streams' earlier work.
  ASSERT_TRUE(DelayFill(*m, a, n, 5.0f, kSpin, *s1).ok());
  ASSERT_TRUE(backend_->Copy(b, a, n * 4, CopyKind::kDeviceToDevice, 0).ok());
  ASSERT_TRUE(backend_->SynchronizeStream(0).ok());
  EXPECT_EQ(Read(b, n, *s2), std::vector<float>(n, 5.0f));
  ASSERT_TRUE(backend_->SynchronizeDevice().ok());
  backend_->DestroyEvent(*start);
  backend_->DestroyEvent(*done);
  EXPECT_EQ(backend_->QueryEvent(*done).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(EmulatorBackendTest, LaunchCopiesArgumentValues) {
  SKIP_WITHOUT_COMPILER();
  std::shared_ptr<LoadedModule> m = Kernels();
  ASSERT_NE(m, nullptr);
  constexpr int n = 300;
  auto* a = static_cast<float*>(Alloc(n * 4));
  absl::StatusOr<Stream> s = backend_->CreateStream();
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(DelayFill(*m, a, n, 0.0f, kSpin, *s).ok());  // keeps s busy
  {
    float* p = a;
    int count = n;
    void* args[] = {&p, &count};
    ASSERT_TRUE(
        backend_->Launch(Function(*m, "add_one"), 1000, 64, args, *s).ok());
    p = nullptr;  // the queued launch must not read these any more
    count = -1;
  }
  ASSERT_TRUE(backend_->SynchronizeStream(*s).ok());
  EXPECT_EQ(Read(a, n), std::vector<float>(n, 1.0f));
  EXPECT_EQ(backend_->Launch(KernelHandle{}, 1, 1, nullptr, *s).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      backend_->Launch(Function(*m, "add_one"), 1, 2000, nullptr, *s).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m->Function("absent").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(EmulatorBackendTest, BarriersAndWarpShufflesReduce) {
  SKIP_WITHOUT_COMPILER();
  std::shared_ptr<LoadedModule> m = Kernels();
  ASSERT_NE(m, nullptr);
  constexpr int n = 5000;
  std::vector<double> in(n);
  std::iota(in.begin(), in.end(), 1.0);
  auto* d_in = static_cast<double*>(Alloc(n * 8));
  auto* d_out = static_cast<double*>(Alloc(8));
  ASSERT_TRUE(
      backend_->Copy(d_in, in.data(), n * 8, CopyKind::kHostToDevice, 0).ok());
  for (int block : {32, 64, 256, 1024}) {
    ASSERT_TRUE(backend_->Memset(d_out, 0, 8, 0).ok());
    int count = n;
    void* args[] = {&d_in, &d_out, &count};
    // 1000 blocks asked for: the grid is clamped and the loop wraps.
    ASSERT_TRUE(
        backend_->Launch(Function(*m, "block_sum"), 1000, block, args, 0).ok());
    double sum = 0;
    ASSERT_TRUE(
        backend_->Copy(&sum, d_out, 8, CopyKind::kDeviceToHost, 0).ok());
    EXPECT_EQ(sum, 5000.0 * 5001.0 / 2) << block << " threads per block";
  }
}

TEST_F(EmulatorBackendTest, KernelDeadlockIsReportedBySynchronize) {
  SKIP_WITHOUT_COMPILER();
  std::shared_ptr<LoadedModule> m = Kernels();
  ASSERT_NE(m, nullptr);
  auto* p = static_cast<float*>(Alloc(32 * 4));
  ASSERT_TRUE(backend_->Memset(p, 0, 32 * 4, 0).ok());
  void* args[] = {&p};
  ASSERT_TRUE(backend_->Launch(Function(*m, "deadlock"), 1, 32, args, 0).ok());
  absl::Status s = backend_->SynchronizeDevice();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("deadlock"));
  EXPECT_TRUE(backend_->SynchronizeDevice().ok());  // reported once
  // The emulation recovers: other kernels still run.
  int n = 32;
  void* add_args[] = {&p, &n};
  ASSERT_TRUE(
      backend_->Launch(Function(*m, "add_one"), 1, 32, add_args, 0).ok());
  EXPECT_EQ(Read(p, 1)[0], 1.0f);
}

TEST_F(EmulatorBackendTest, CompileErrorsCarryTheLog) {
  SKIP_WITHOUT_COMPILER();
  absl::StatusOr<std::shared_ptr<LoadedModule>> m = backend_->LoadSource(
      "extern \"C\" __global__ void broken(float* p) { p[0] = no_such_name; "
      "}\n",
      "broken_module", {"broken"});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("broken_module"));
  EXPECT_THAT(m.status().message(), HasSubstr("no_such_name"));
  // A kernel the source does not define.
  m = backend_->LoadSource("extern \"C\" __global__ void k(float* p) {}\n",
                           "missing_kernel", {"k", "absent_kernel"});
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("absent_kernel"));
}

TEST_F(EmulatorBackendTest, CapturedGraphRunsOnlyWhenLaunched) {
  SKIP_WITHOUT_COMPILER();
  std::shared_ptr<LoadedModule> m = Kernels();
  ASSERT_NE(m, nullptr);
  constexpr int n = 700;
  auto* a = static_cast<float*>(Alloc(n * 4));
  auto* b = static_cast<float*>(Alloc(n * 4));
  ASSERT_TRUE(backend_->Memset(a, 0, n * 4, 0).ok());
  absl::StatusOr<Stream> s = backend_->CreateStream();
  absl::StatusOr<Stream> other = backend_->CreateStream();
  ASSERT_TRUE(s.ok() && other.ok());
  ASSERT_TRUE(backend_->SynchronizeDevice().ok());
  const EmulatorStats before = GetEmulatorStats(*backend_);

  ASSERT_TRUE(backend_->BeginCapture(*s).ok());
  EXPECT_EQ(backend_->BeginCapture(*other).code(),
            absl::StatusCode::kFailedPrecondition);
  int count = n;
  void* args[] = {&a, &count};
  ASSERT_TRUE(backend_->Launch(Function(*m, "add_one"), 64, 64, args, *s).ok());
  count = 1;  // the graph keeps the value it was captured with
  ASSERT_TRUE(backend_->Launch(Function(*m, "add_one"), 64, 64, args, *s).ok());
  ASSERT_TRUE(backend_->Copy(b, a, n * 4, CopyKind::kDeviceToDevice, *s).ok());
  EXPECT_EQ(backend_->SynchronizeStream(*s).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(backend_->SynchronizeDevice().code(),
            absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<GraphHandle> graph = backend_->EndCapture(*s);
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ(backend_->EndCapture(*s).status().code(),
            absl::StatusCode::kFailedPrecondition);

  ASSERT_TRUE(backend_->SynchronizeDevice().ok());
  EXPECT_EQ(Read(a, n), std::vector<float>(n, 0.0f));
  EXPECT_EQ(GetEmulatorStats(*backend_).launches, before.launches);

  ASSERT_TRUE(backend_->LaunchGraph(*graph, *s).ok());
  ASSERT_TRUE(backend_->LaunchGraph(*graph, *s).ok());
  ASSERT_TRUE(backend_->SynchronizeStream(*s).ok());
  // Each replay adds 1 everywhere, then 1 more to element 0 alone.
  std::vector<float> expect(n, 2.0f);
  expect[0] = 4.0f;
  EXPECT_EQ(Read(a, n), expect);
  EXPECT_EQ(Read(b, n), expect);
  const EmulatorStats after = GetEmulatorStats(*backend_);
  EXPECT_EQ(after.launches - before.launches, 4);
  EXPECT_EQ(after.graph_launches - before.graph_launches, 2);
  backend_->DestroyGraph(*graph);
  EXPECT_EQ(backend_->LaunchGraph(*graph, *s).code(),
            absl::StatusCode::kInvalidArgument);
}

// As the driver in thread-local capture mode: the capturing thread may not
// free, query or wait while it captures (it may allocate: the driver
// backend allocates in relaxed mode); another thread may, and the capturing
// one may again once the capture ends.
TEST_F(EmulatorBackendTest, TheCapturingThreadMayNotFreeQueryOrWait) {
  void* kept = Alloc(64);
  absl::StatusOr<Stream> s = backend_->CreateStream();
  absl::StatusOr<Event> e = backend_->CreateEvent(Backend::EventTiming::kOff);
  ASSERT_TRUE(s.ok() && e.ok());
  ASSERT_TRUE(backend_->RecordEvent(*e, *s).ok());
  ASSERT_TRUE(backend_->BeginCapture(*s).ok());
  const auto refused = [](const absl::Status& st, const char* call) {
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition)
        << call << ": " << st;
    EXPECT_THAT(std::string(st.message()),
                ::testing::HasSubstr("is capturing stream"))
        << call;
  };
  absl::StatusOr<void*> during = backend_->DeviceAlloc(64);
  ASSERT_TRUE(during.ok()) << during.status();
  absl::StatusOr<void*> pinned = backend_->HostAllocPinned(64);
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  refused(backend_->DeviceFree(kept), "DeviceFree");
  refused(backend_->HostFreePinned(*pinned), "HostFreePinned");
  refused(backend_->SynchronizeStream(0),
          "SynchronizeStream of another stream");
  refused(backend_->QueryEvent(*e).status(), "QueryEvent");
  refused(backend_->SynchronizeEvent(*e), "SynchronizeEvent");
  std::thread other([&] {
    absl::StatusOr<void*> p = backend_->DeviceAlloc(64);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_TRUE(backend_->DeviceFree(*p).ok());
  });
  other.join();
  absl::StatusOr<GraphHandle> graph = backend_->EndCapture(*s);
  ASSERT_TRUE(graph.ok()) << graph.status();
  absl::StatusOr<void*> after = backend_->DeviceAlloc(64);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_TRUE(backend_->DeviceFree(*after).ok());
  EXPECT_TRUE(backend_->QueryEvent(*e).ok());
  backend_->DestroyGraph(*graph);
  backend_->DestroyEvent(*e);
  EXPECT_TRUE(backend_->DestroyStream(*s).ok());
  EXPECT_TRUE(backend_->DeviceFree(kept).ok());
  EXPECT_TRUE(backend_->DeviceFree(*during).ok());
  EXPECT_TRUE(backend_->HostFreePinned(*pinned).ok());
}

// C = A (m x k) * B^T (B stored n x k) + bias, against a float64 loop.
TEST_F(EmulatorBackendTest, GemmMatchesADoubleLoop) {
  constexpr int m = 5, n = 7, k = 9;
  std::vector<float> a(m * k), b(n * k), bias(n), c(m * n, -1.0f);
  for (int i = 0; i < m * k; ++i) a[i] = std::sin(0.3 * i);
  for (int i = 0; i < n * k; ++i) b[i] = std::cos(0.7 * i);
  for (int j = 0; j < n; ++j) bias[j] = 0.25f * j;
  auto upload = [&](const std::vector<float>& v) {
    auto* d = static_cast<float*>(Alloc(v.size() * 4));
    EXPECT_TRUE(
        backend_->Copy(d, v.data(), v.size() * 4, CopyKind::kHostToDevice, 0)
            .ok());
    return d;
  };
  float* da = upload(a);
  float* db = upload(b);
  float* dbias = upload(bias);
  float* dc = upload(c);
  DeviceGemmArgs args;
  args.gemm = {.dtype = ir::DType::kF32,
               .trans_b = true,
               .m = m,
               .n = n,
               .k = k,
               .a = da,
               .lda = k,
               .b = db,
               .ldb = k,
               .c = dc,
               .ldc = n,
               .bias = dbias};
  ASSERT_TRUE(backend_->Gemm(args, 0).ok());
  std::vector<float> got = Read(dc, m * n);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double ref = bias[j];
      for (int p = 0; p < k; ++p)
        ref += static_cast<double>(a[i * k + p]) * b[j * k + p];
      // f32 products and sums of 9 terms of magnitude <= 1.
      EXPECT_NEAR(got[i * n + j], ref, 1e-5 * (1 + std::abs(ref)))
          << i << "," << j;
    }
  }
  EXPECT_EQ(GetEmulatorStats(*backend_).gemms, 1);
  // With the bias gradient: the row sums of A (devices/cpu/gemm.h).
  float* dgrad = upload(std::vector<float>(m, -1.0f));
  args.gemm.bias_grad = dgrad;
  ASSERT_TRUE(backend_->Gemm(args, 0).ok());
  std::vector<float> grad = Read(dgrad, m);
  for (int i = 0; i < m; ++i) {
    double ref = 0;
    for (int p = 0; p < k; ++p) ref += a[i * k + p];
    EXPECT_NEAR(grad[i], ref, 1e-6 * k) << i;
  }
  // Host memory as an operand is caught before it is queued.
  std::vector<float> host_grad(m);
  args.gemm.bias_grad = host_grad.data();
  absl::Status s = backend_->Gemm(args, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("Gemm: the bias_grad"));
  args.gemm.bias_grad = nullptr;
  args.gemm.a = a.data();
  s = backend_->Gemm(args, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("Gemm: the A"));
}

}  // namespace
}  // namespace stepjit::runtime::cuda
