// Smoke test of the CUDA layer as a shipped binary sees it: NVRTC is linked
// and compiles, and with STEPJIT_TEST_CUDA_BACKEND=driver (bench/gpu/check.sh
// on the GPU machine) the driver must load and run a kernel; without that
// variable a missing driver is reported with a reason instead.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "codegen/cuda/nvrtc.h"
#include "devices/cuda/driver/device.h"
#include "gtest/gtest.h"

namespace stepjit::runtime::cuda {
namespace {

constexpr char kSaxpy[] = R"(
extern "C" __global__ void smoke_saxpy(const float* x, float* y, float a,
                                       int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
)";

bool DriverRequested() {
  const char* v = std::getenv("STEPJIT_TEST_CUDA_BACKEND");
  return v != nullptr && std::string(v) == "driver";
}

// The architecture to compile for: the device's, else the default target.
std::string TargetArch() {
  const CudaAvailability& a = Availability();
  return a.available ? a.devices[0].arch() : "sm_90";
}

TEST(CudaSmokeTest, DriverIsThereWhenRequestedElseExplained) {
  const CudaAvailability& a = Availability();
  if (DriverRequested()) {
    // On the GPU machine a silent skip would hide a broken bundle.
    ASSERT_TRUE(a.available)
        << "STEPJIT_TEST_CUDA_BACKEND=driver but: " << a.reason;
    EXPECT_GT(a.driver_version, 0);
    EXPECT_TRUE(RequireDevice().ok());
    return;
  }
  if (a.available) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_FALSE(a.reason.empty());
  EXPECT_TRUE(a.devices.empty());
  const absl::Status st = RequireDevice();
  EXPECT_TRUE(absl::IsUnavailable(st)) << st;
  EXPECT_EQ(st.message(), a.reason);
}

TEST(CudaSmokeTest, NvrtcCompilesForTheTargetArch) {
  if (!codegen::cuda::NvrtcAvailable()) GTEST_SKIP() << "built without NVRTC";
  absl::StatusOr<codegen::cuda::CompiledCuda> bin = codegen::cuda::CompileCuda(
      kSaxpy, "smoke_saxpy", {.arch = TargetArch(), .use_cache = false});
  ASSERT_TRUE(bin.ok()) << bin.status();
  // A cubin is an ELF image.
  ASSERT_GE(bin->cubin.size(), 4u);
  EXPECT_EQ(bin->cubin.substr(0, 4), "\177ELF");
}

TEST(CudaSmokeTest, GeneratedKernelRunsOnTheDevice) {
  if (!Availability().available && !DriverRequested())
    GTEST_SKIP() << "needs a CUDA device: " << Availability().reason;
  ASSERT_TRUE(Availability().available) << Availability().reason;
  ASSERT_TRUE(codegen::cuda::NvrtcAvailable());
  ASSERT_TRUE(SetDevice(0).ok());
  absl::StatusOr<codegen::cuda::CompiledCuda> bin = codegen::cuda::CompileCuda(
      kSaxpy, "smoke_saxpy", {.arch = TargetArch(), .use_cache = false});
  ASSERT_TRUE(bin.ok()) << bin.status();
  absl::StatusOr<Module> module = Module::Load(bin->cubin);
  ASSERT_TRUE(module.ok()) << module.status();
  absl::StatusOr<Function> fn = module->GetFunction("smoke_saxpy");
  ASSERT_TRUE(fn.ok()) << fn.status();

  // Small integers keep a * x + y exact in f32 on both sides; n is not a
  // multiple of the block so the bounds check is exercised.
  int n = 100003;
  float a = 3.0f;
  std::vector<float> x(n), y(n), got(n, -12345.0f);
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 97 - 48);
    y[i] = static_cast<float>(i % 31 + 1);
  }
  const size_t bytes = n * sizeof(float);
  absl::StatusOr<DevicePtr> dx = Malloc(bytes), dy = Malloc(bytes);
  ASSERT_TRUE(dx.ok() && dy.ok());
  ASSERT_TRUE(CopyToDevice(*dx, x.data(), bytes).ok());
  ASSERT_TRUE(CopyToDevice(*dy, y.data(), bytes).ok());
  DevicePtr px = *dx, py = *dy;
  void* args[] = {&px, &py, &a, &n};
  const int block = 256;
  ASSERT_TRUE(Launch(*fn, (n + block - 1) / block, block, args).ok());
  ASSERT_TRUE(Synchronize().ok());
  ASSERT_TRUE(CopyToHost(got.data(), py, bytes).ok());
  EXPECT_TRUE(Free(px).ok());
  EXPECT_TRUE(Free(py).ok());
  int wrong = 0;
  for (int i = 0; i < n; ++i) wrong += got[i] != a * x[i] + y[i];
  EXPECT_EQ(wrong, 0) << "first: got " << got[0] << ", want "
                      << a * x[0] + y[0];
}

}  // namespace
}  // namespace stepjit::runtime::cuda
