// The driver backend and cuBLASLt. Everywhere: the clear error without a
// GPU, the kernel-architecture choice, the cuBLASLt loader and the epilogue
// kernels compiling with NVRTC (the GEMM plan: lt_plan_test.cc). With a GPU:
// memory, copies, events, NVRTC launches, graphs, and cuBLASLt GEMMs (bias,
// activations, bias gradients) against runtime::cpu::Gemm; without one
// those skip.
#include "devices/cuda/driver/driver_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "codegen/cuda/nvrtc.h"
#include "devices/cpu/gemm.h"
#include "devices/cuda/backend.h"
#include "devices/cuda/cublaslt/cublaslt_epilogue.h"
#include "devices/cuda/cublaslt/cublaslt_library.h"
#include "devices/cuda/cublaslt/cublaslt_plan.h"
#include "devices/cuda/driver/device.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/dtype.h"
#include "ir/host_math.h"
#include "ir/scalar_def.h"
#include "tests/cuda/lt_gemm_cases.h"

namespace stepjit::runtime::cuda {
namespace {

using cpu::GemmActivation;
using ir::DType;
using lt_test::AllCases;
using lt_test::ExpectBiasGradClose;
using lt_test::ExpectClose;
using lt_test::GemmCase;
using lt_test::HostGemm;
using lt_test::kActivations;
using ::testing::HasSubstr;

// ---- Without a GPU --------------------------------------------------------

TEST(DriverBackendTest, MakeReportsWhyThereIsNoDevice) {
  absl::StatusOr<std::unique_ptr<Backend>> b = MakeDriverBackend();
  const CudaAvailability& a = Availability();
  if (a.available) {
    ASSERT_TRUE(b.ok()) << b.status();
    std::printf("driver backend: %s, kernels for %s\n",
                (*b)->Describe().c_str(), (*b)->Arch().c_str());
    EXPECT_THAT((*b)->Describe(), HasSubstr(a.devices[0].arch()));
    EXPECT_TRUE(absl::StartsWith((*b)->Arch(), "sm_")) << (*b)->Arch();
    EXPECT_GE((*b)->Limits().max_grid, 65535);
    EXPECT_GE((*b)->Limits().max_block, 256);
    EXPECT_TRUE(absl::IsInvalidArgument(
        MakeDriverBackend(static_cast<int>(a.devices.size())).status()));
    return;
  }
  ASSERT_FALSE(b.ok());
  EXPECT_TRUE(absl::IsUnavailable(b.status())) << b.status();
  EXPECT_EQ(b.status().message(), a.reason);
  // "no CUDA driver: cannot load libcuda.so.1 (...)", "no usable CUDA
  // device: cuInit failed with ...", "no CUDA devices: ...".
  EXPECT_TRUE(absl::StartsWith(a.reason, "no CUDA driver") ||
              absl::StartsWith(a.reason, "no usable CUDA device") ||
              absl::StartsWith(a.reason, "no CUDA devices") ||
              absl::StartsWith(a.reason, "the CUDA driver"))
      << a.reason;
}

TEST(DriverBackendTest, PicksTheNewestCompatibleArchitecture) {
  const std::vector<std::string> nvrtc = {"sm_75", "sm_80", "sm_86",
                                          "sm_89", "sm_90", "sm_100"};
  EXPECT_EQ(PickKernelArch("sm_90", nvrtc), "sm_90");
  EXPECT_EQ(PickKernelArch("sm_100", nvrtc), "sm_100");
  EXPECT_EQ(PickKernelArch("sm_87", nvrtc), "sm_86");  // same major, older
  EXPECT_EQ(PickKernelArch("sm_103", nvrtc), "sm_100");
  EXPECT_EQ(PickKernelArch("sm_70", nvrtc), "");   // no sm_7x <= 7.0
  EXPECT_EQ(PickKernelArch("sm_120", nvrtc), "");  // newer than NVRTC
  EXPECT_EQ(PickKernelArch("gfx90a", nvrtc), "");
}

TEST(CublasLtTest, LoadsWithoutAGpuWhereTheLibraryExists) {
  bool present = false;
  for (const char* f : {"/usr/local/cuda/lib64/libcublasLt.so.13",
                        "/usr/local/cuda/lib64/libcublasLt.so.12",
                        "/usr/local/cuda/lib64/libcublasLt.so"}) {
    present = present || std::filesystem::exists(f);
  }
  absl::StatusOr<const CublasLtLibrary*> lt = LoadCublasLt();
  if (!lt.ok()) {
    EXPECT_FALSE(present) << lt.status();
    EXPECT_TRUE(absl::IsNotFound(lt.status())) << lt.status();
    EXPECT_THAT(lt.status().message(), HasSubstr("cuBLASLt not found: tried"));
    GTEST_SKIP() << lt.status();
  }
  std::printf("cuBLASLt %zu from %s\n", (*lt)->version, (*lt)->path.c_str());
  EXPECT_THAT((*lt)->path, HasSubstr("libcublasLt.so"));
  EXPECT_GE((*lt)->version, 120000u);  // cublasLtGetVersion resolved and ran
  EXPECT_NE((*lt)->api, nullptr);
  EXPECT_EQ(*LoadCublasLt(), *lt) << "opened once";
}

TEST(CublasLtTest, EpilogueKernelsCompileWithNvrtc) {
  if (!codegen::cuda::NvrtcAvailable()) GTEST_SKIP() << "built without NVRTC";
  // The kernel is named in its source and compiles for sm_90.
  auto expect_compiles = [](const EpilogueKernelSource& k) {
    EXPECT_THAT(k.source, HasSubstr(absl::StrCat("void ", k.name, "(")));
    codegen::cuda::NvrtcOptions options;
    options.arch = "sm_90";
    options.use_cache = false;
    absl::StatusOr<codegen::cuda::CompiledCuda> c =
        codegen::cuda::CompileCuda(k.source, k.name, options);
    ASSERT_TRUE(c.ok()) << c.status() << "\n" << k.source;
    EXPECT_FALSE(c->cubin.empty());
  };
  for (DType t : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16}) {
    for (GemmActivation act : kActivations) {
      ASSERT_NO_FATAL_FAILURE(expect_compiles(GemmEpilogueKernel(t, act)));
    }
    ASSERT_NO_FATAL_FAILURE(expect_compiles(GemmBiasGradKernel(t)));
  }
  // The bias gradient sums in float, in double for f64.
  EXPECT_THAT(GemmBiasGradKernel(DType::kBF16).source,
              HasSubstr("float s = 0.0f;"));
  EXPECT_THAT(GemmBiasGradKernel(DType::kF64).source,
              HasSubstr("double s = 0.0;"));
  // The exact GELU uses erf; the tanh one tanh; f64 computes in double.
  EXPECT_THAT(
      GemmEpilogueKernel(DType::kF32, GemmActivation(ir::OpId::kGelu)).source,
      HasSubstr("erff("));
  EXPECT_THAT(
      GemmEpilogueKernel(DType::kF64, GemmActivation(ir::OpId::kGelu)).source,
      HasSubstr("erf("));
  EXPECT_THAT(
      GemmEpilogueKernel(DType::kBF16, GemmActivation(ir::OpId::kGeluTanh))
          .source,
      HasSubstr("tanhf("));
}

// ---- With a GPU -------------------------------------------------------------

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Availability().available) GTEST_SKIP() << Availability().reason;
    static Backend* const shared = [] {
      absl::StatusOr<std::unique_ptr<Backend>> b = MakeDriverBackend();
      if (!b.ok()) {
        ADD_FAILURE() << b.status();
        return static_cast<Backend*>(nullptr);
      }
      return b->release();
    }();
    ASSERT_NE(shared, nullptr);
    b_ = shared;
  }

  // Device copy of `host`, freed with the test.
  void* ToDevice(const std::vector<char>& host) {
    absl::StatusOr<void*> p = b_->DeviceAlloc(host.size());
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return nullptr;
    EXPECT_TRUE(
        b_->Copy(*p, host.data(), host.size(), CopyKind::kHostToDevice, 0)
            .ok());
    owned_.push_back(*p);
    return *p;
  }
  std::vector<char> ToHost(const void* dev, size_t bytes) {
    std::vector<char> out(bytes);
    EXPECT_TRUE(
        b_->Copy(out.data(), dev, bytes, CopyKind::kDeviceToHost, 0).ok());
    return out;
  }
  void TearDown() override {
    if (b_ == nullptr) return;
    EXPECT_TRUE(b_->SynchronizeDevice().ok());
    for (void* p : owned_) EXPECT_TRUE(b_->DeviceFree(p).ok());
  }

  static constexpr const char* kAddOne = R"(
extern "C" __global__ void add_one(float* x, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    x[i] += 1.0f;
}
)";

  Backend* b_ = nullptr;
  std::vector<void*> owned_;
};

TEST_F(GpuTest, CopiesRoundTripSyncAndAsync) {
  constexpr size_t kBytes = 3 << 20;
  std::vector<char> in(kBytes);
  for (size_t i = 0; i < kBytes; ++i) in[i] = static_cast<char>(i * 13 + 1);
  // Pageable memory on stream 0: each call returns with the host side done.
  void* dev = ToDevice(in);
  ASSERT_NE(dev, nullptr);
  ASSERT_TRUE(b_->Memset(static_cast<char*>(dev) + 100, 0xab, 50, 0).ok());
  std::vector<char> want = in;
  std::memset(&want[100], 0xab, 50);
  EXPECT_EQ(ToHost(dev, kBytes), want);

  // Pinned memory on a stream of our own: async until synchronized.
  absl::StatusOr<Stream> s = b_->CreateStream();
  ASSERT_TRUE(s.ok()) << s.status();
  absl::StatusOr<void*> pin_in = b_->HostAllocPinned(kBytes);
  absl::StatusOr<void*> pin_out = b_->HostAllocPinned(kBytes);
  ASSERT_TRUE(pin_in.ok() && pin_out.ok()) << pin_in.status();
  std::memcpy(*pin_in, in.data(), kBytes);
  std::memset(*pin_out, 0, kBytes);
  absl::StatusOr<void*> dev2 = b_->DeviceAlloc(kBytes);
  ASSERT_TRUE(dev2.ok()) << dev2.status();
  owned_.push_back(*dev2);
  ASSERT_TRUE(
      b_->Copy(*dev2, *pin_in, kBytes, CopyKind::kHostToDevice, *s).ok());
  ASSERT_TRUE(b_->Copy(dev, *dev2, kBytes, CopyKind::kDeviceToDevice, *s).ok());
  ASSERT_TRUE(
      b_->Copy(*pin_out, dev, kBytes, CopyKind::kDeviceToHost, *s).ok());
  ASSERT_TRUE(b_->SynchronizeStream(*s).ok());
  EXPECT_EQ(std::memcmp(*pin_out, in.data(), kBytes), 0);
  EXPECT_TRUE(b_->HostFreePinned(*pin_in).ok());
  EXPECT_TRUE(b_->HostFreePinned(*pin_out).ok());
  EXPECT_TRUE(b_->DestroyStream(*s).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(b_->DestroyStream(0)));

  // Out of memory is ResourceExhausted naming the call and the size.
  absl::StatusOr<void*> huge = b_->DeviceAlloc(size_t{1} << 50);
  EXPECT_TRUE(absl::IsResourceExhausted(huge.status())) << huge.status();
  EXPECT_THAT(huge.status().message(),
              HasSubstr("cuMemAlloc(1125899906842624 bytes): "
                        "CUDA_ERROR_OUT_OF_MEMORY"));
}

TEST_F(GpuTest, EventsTimeAndOrderStreams) {
  absl::StatusOr<Stream> s1 = b_->CreateStream();
  absl::StatusOr<Stream> s2 = b_->CreateStream();
  absl::StatusOr<Event> start = b_->CreateEvent(Backend::EventTiming::kOn);
  absl::StatusOr<Event> end = b_->CreateEvent(Backend::EventTiming::kOn);
  ASSERT_TRUE(s1.ok() && s2.ok() && start.ok() && end.ok());
  constexpr size_t kBytes = size_t{256} << 20;
  absl::StatusOr<void*> big = b_->DeviceAlloc(kBytes);
  ASSERT_TRUE(big.ok()) << big.status();
  owned_.push_back(*big);
  ASSERT_TRUE(b_->RecordEvent(*start, *s1).ok());
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(
        b_->Memset(*big, static_cast<uint8_t>(i + 1), kBytes, *s1).ok());
  ASSERT_TRUE(b_->RecordEvent(*end, *s1).ok());
  // s2 reads the buffer only after s1's fills.
  ASSERT_TRUE(b_->StreamWaitEvent(*s2, *end).ok());
  absl::StatusOr<void*> pin = b_->HostAllocPinned(64);
  ASSERT_TRUE(pin.ok()) << pin.status();
  ASSERT_TRUE(b_->Copy(*pin, static_cast<char*>(*big) + kBytes - 64, 64,
                       CopyKind::kDeviceToHost, *s2)
                  .ok());
  ASSERT_TRUE(b_->SynchronizeEvent(*end).ok());
  absl::StatusOr<bool> done = b_->QueryEvent(*end);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_TRUE(*done);
  absl::StatusOr<float> ms = b_->ElapsedMs(*start, *end);
  ASSERT_TRUE(ms.ok()) << ms.status();
  EXPECT_GT(*ms, 0.0f);
  std::printf("4 x memset of 256 MiB: %.3f ms\n", *ms);
  ASSERT_TRUE(b_->SynchronizeStream(*s2).ok());
  for (int i = 0; i < 64; ++i)
    EXPECT_EQ(static_cast<uint8_t*>(*pin)[i], 4) << i;
  EXPECT_TRUE(b_->HostFreePinned(*pin).ok());
  b_->DestroyEvent(*start);
  b_->DestroyEvent(*end);
  EXPECT_TRUE(b_->DestroyStream(*s1).ok());
  EXPECT_TRUE(b_->DestroyStream(*s2).ok());
}

TEST_F(GpuTest, LaunchesAnNvrtcKernel) {
  absl::StatusOr<std::shared_ptr<LoadedModule>> m =
      b_->LoadSource(kAddOne, "add_one_test", {"add_one"});
  ASSERT_TRUE(m.ok()) << m.status();
  absl::StatusOr<KernelHandle> k = (*m)->Function("add_one");
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_TRUE(absl::IsNotFound((*m)->Function("add_two").status()));
  constexpr long long kN = 1 << 20;
  std::vector<float> host(kN);
  for (long long i = 0; i < kN; ++i) host[i] = static_cast<float>(i);
  std::vector<char> bytes(kN * 4);
  std::memcpy(bytes.data(), host.data(), bytes.size());
  void* x = ToDevice(bytes);
  long long n = kN;
  void* args[] = {&x, &n};
  ASSERT_TRUE(b_->Launch(*k, 64, 256, args, 0).ok());  // grid-stride loop
  EXPECT_TRUE(absl::IsInvalidArgument(b_->Launch(*k, 1, 4096, args, 0)));
  std::vector<char> out = ToHost(x, bytes.size());
  const float* f = reinterpret_cast<const float*>(out.data());
  for (long long i = 0; i < kN; i += 4097) EXPECT_EQ(f[i], i + 1.0f) << i;

  absl::StatusOr<std::shared_ptr<LoadedModule>> bad = b_->LoadSource(
      "extern \"C\" __global__ void f() { nope; }", "bad", {"f"});
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
  EXPECT_THAT(bad.status().message(), HasSubstr("nope"));
  absl::StatusOr<std::shared_ptr<LoadedModule>> missing =
      b_->LoadSource(kAddOne, "add_one_test", {"add_one", "add_two"});
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
}

TEST_F(GpuTest, CapturesAndReplaysAGraph) {
  absl::StatusOr<std::shared_ptr<LoadedModule>> m =
      b_->LoadSource(kAddOne, "add_one_test", {"add_one"});
  ASSERT_TRUE(m.ok()) << m.status();
  absl::StatusOr<KernelHandle> k = (*m)->Function("add_one");
  ASSERT_TRUE(k.ok()) << k.status();
  absl::StatusOr<Stream> s = b_->CreateStream();
  ASSERT_TRUE(s.ok()) << s.status();
  constexpr long long kN = 1000;
  absl::StatusOr<void*> pin = b_->HostAllocPinned(kN * 4);
  ASSERT_TRUE(pin.ok()) << pin.status();
  float* src = static_cast<float*>(*pin);
  for (long long i = 0; i < kN; ++i) src[i] = static_cast<float>(i);
  void* x = ToDevice(std::vector<char>(kN * 4, 0));
  long long n = kN;
  void* args[] = {&x, &n};

  ASSERT_TRUE(b_->BeginCapture(*s).ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(b_->BeginCapture(*s)));
  ASSERT_TRUE(b_->Copy(x, src, kN * 4, CopyKind::kHostToDevice, *s).ok());
  ASSERT_TRUE(b_->Launch(*k, 4, 256, args, *s).ok());
  ASSERT_TRUE(b_->Launch(*k, 4, 256, args, *s).ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(b_->SynchronizeStream(*s)));
  EXPECT_TRUE(absl::IsFailedPrecondition(b_->SynchronizeDevice()));
  absl::StatusOr<GraphHandle> g = b_->EndCapture(*s);
  ASSERT_TRUE(g.ok()) << g.status();
  // Recorded, not run.
  std::vector<char> out = ToHost(x, kN * 4);
  EXPECT_EQ(reinterpret_cast<const float*>(out.data())[10], 0.0f);

  for (float base : {0.0f, 100.0f}) {
    for (long long i = 0; i < kN; ++i) src[i] = base + static_cast<float>(i);
    ASSERT_TRUE(b_->LaunchGraph(*g, *s).ok());
    ASSERT_TRUE(b_->SynchronizeStream(*s).ok());
    out = ToHost(x, kN * 4);
    const float* f = reinterpret_cast<const float*>(out.data());
    for (long long i = 0; i < kN; i += 37)
      EXPECT_EQ(f[i], base + static_cast<float>(i) + 2.0f) << i;
  }
  b_->DestroyGraph(*g);
  EXPECT_TRUE(b_->HostFreePinned(*pin).ok());
  EXPECT_TRUE(b_->DestroyStream(*s).ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(b_->EndCapture(*s).status()));
}

// Tolerance relative to sum |a||b| + |bias| + |C|, per dtype.
double DeviceTolerance(const GemmCase& c) {
  switch (c.dtype) {
    case DType::kF64:
      return 1e-12;
    case DType::kF32:
      if (c.allow_tf32) return 3e-3;  // inputs rounded to 10-bit mantissas
      // cuBLASLt's GELU epilogue may evaluate tanh less exactly than libm.
      return c.activation == GemmActivation(ir::OpId::kGeluTanh) ? 1e-4 : 1e-5;
    case DType::kF16:
      return 1e-2;  // C rounded to 11 bits, twice with an exact GELU
    default:
      return 2e-2;  // bf16: 8 bits
  }
}

void RunOnDevice(Backend* b, const GemmCase& gc, uint32_t seed,
                 Stream stream = 0) {
  HostGemm h(gc, seed);
  std::vector<char> before = h.out, want = h.out, want_grad = h.grad;
  cpu::GemmArgs cpu_args = h.args;
  cpu_args.c = want.data();
  if (gc.bias_grad) cpu_args.bias_grad = want_grad.data();
  ASSERT_TRUE(cpu::Gemm(cpu_args).ok()) << gc.Name();
  auto upload = [&](const std::vector<char>& v) -> void* {
    absl::StatusOr<void*> p = b->DeviceAlloc(v.size());
    EXPECT_TRUE(p.ok()) << p.status();
    EXPECT_TRUE(
        b->Copy(*p, v.data(), v.size(), CopyKind::kHostToDevice, stream).ok());
    return *p;
  };
  DeviceGemmArgs d = h.Device();
  void* a = upload(h.a);
  void* bb = upload(h.b);
  void* c = upload(h.out);
  void* bias = h.c.bias ? upload(h.bias) : nullptr;
  void* grad = h.c.bias_grad ? upload(h.grad) : nullptr;
  d.gemm.a = a;
  d.gemm.b = bb;
  d.gemm.c = c;
  d.gemm.bias = bias;
  d.gemm.bias_grad = grad;
  absl::Status st = b->Gemm(d, stream);
  EXPECT_TRUE(st.ok()) << gc.Name() << ": " << st;
  std::vector<char> got(h.out.size()), got_grad(h.grad.size());
  EXPECT_TRUE(
      b->Copy(got.data(), c, got.size(), CopyKind::kDeviceToHost, stream).ok());
  if (grad != nullptr) {
    EXPECT_TRUE(b->Copy(got_grad.data(), grad, got_grad.size(),
                        CopyKind::kDeviceToHost, stream)
                    .ok());
  }
  EXPECT_TRUE(b->SynchronizeStream(stream).ok());
  for (void* p : {a, bb, c, bias, grad}) {
    if (p != nullptr) {
      EXPECT_TRUE(b->DeviceFree(p).ok());
    }
  }
  if (!st.ok()) return;
  ExpectClose(gc, h.args, got, want, h.Scale(before), DeviceTolerance(gc));
  if (gc.bias_grad) {
    ExpectBiasGradClose(gc, h.args, got_grad, want_grad, DeviceTolerance(gc));
  }
}

TEST_F(GpuTest, GemmMatchesCpuGemm) {
  uint32_t seed = 100;
  struct Variant {
    DType dtype;
    bool tf32;
  };
  for (Variant v : {Variant{DType::kF32, false}, Variant{DType::kF32, true},
                    Variant{DType::kF16, false}, Variant{DType::kBF16, false},
                    Variant{DType::kF64, false}}) {
    for (GemmCase gc : AllCases(v.dtype, 33, 47, 65)) {
      gc.allow_tf32 = v.tf32;
      RunOnDevice(b_, gc, ++seed);
      if (HasFatalFailure()) return;
    }
    // One shape big enough for tensor-core tiles.
    GemmCase big;
    big.dtype = v.dtype;
    big.allow_tf32 = v.tf32;
    big.m = 256;
    big.n = 512;
    big.k = 384;
    big.bias = true;
    big.activation = GemmActivation(ir::OpId::kGelu);
    RunOnDevice(b_, big, ++seed);
  }
  // Weight gradients dW = dY^T X with their bias gradients (cuBLASLt's
  // BGRADB, or our kernel where it has none: f64, beside a bias).
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}) {
    GemmCase wgrad;
    wgrad.dtype = t;
    wgrad.trans_a = true;
    wgrad.m = 512;
    wgrad.n = 784;
    wgrad.k = 128;
    wgrad.bias_grad = true;
    RunOnDevice(b_, wgrad, ++seed);
  }
  // An empty product: bias and activation alone, in the epilogue kernel.
  GemmCase empty;
  empty.k = 0;
  empty.bias = true;
  empty.activation = GemmActivation(ir::OpId::kRelu);
  empty.accumulate = true;
  RunOnDevice(b_, empty, ++seed);
}

TEST_F(GpuTest, GemmIsCapturedIntoAGraph) {
  // A fresh backend: cuBLASLt, its workspace and the GELU kernel are all set
  // up during the capture.
  absl::StatusOr<std::unique_ptr<Backend>> fresh = MakeDriverBackend();
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  Backend* b = fresh->get();
  absl::StatusOr<Stream> s = b->CreateStream();
  ASSERT_TRUE(s.ok()) << s.status();
  GemmCase gc;
  gc.m = 64;
  gc.n = 96;
  gc.k = 32;
  gc.bias = true;
  gc.activation = GemmActivation(ir::OpId::kGelu);
  HostGemm h(gc, 5);
  std::vector<char> want = h.out;
  cpu::GemmArgs cpu_args = h.args;
  cpu_args.c = want.data();
  ASSERT_TRUE(cpu::Gemm(cpu_args).ok());
  std::vector<void*> dev;
  for (const std::vector<char>* v : {&h.a, &h.b, &h.out, &h.bias}) {
    absl::StatusOr<void*> p = b->DeviceAlloc(v->size());
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_TRUE(
        b->Copy(*p, v->data(), v->size(), CopyKind::kHostToDevice, 0).ok());
    dev.push_back(*p);
  }
  DeviceGemmArgs d = h.Device();
  d.gemm.a = dev[0];
  d.gemm.b = dev[1];
  d.gemm.c = dev[2];
  d.gemm.bias = dev[3];
  ASSERT_TRUE(b->BeginCapture(*s).ok());
  const absl::Status st = b->Gemm(d, *s);
  absl::StatusOr<GraphHandle> g = b->EndCapture(*s);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_TRUE(g.ok()) << g.status();
  // The graph outlives the stream it was captured on (and its workspace).
  ASSERT_TRUE(b->DestroyStream(*s).ok());
  ASSERT_TRUE(b->LaunchGraph(*g, 0).ok());
  std::vector<char> got(h.out.size());
  ASSERT_TRUE(
      b->Copy(got.data(), dev[2], got.size(), CopyKind::kDeviceToHost, 0).ok());
  ASSERT_TRUE(b->SynchronizeStream(0).ok());
  std::vector<char> before = h.out;
  ExpectClose(gc, h.args, got, want, h.Scale(before), DeviceTolerance(gc));
  b->DestroyGraph(*g);
  for (void* p : dev) EXPECT_TRUE(b->DeviceFree(p).ok());
}

}  // namespace
}  // namespace stepjit::runtime::cuda
