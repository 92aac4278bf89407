// NCCL, opened at run time. Everywhere: the mirrored ABI, the loader's
// clear error for a missing library, the unique-id file exchange (two
// threads and two processes) and its timeout, and the refusal on the host
// emulator. With NCCL installed (no GPU needed): a real unique id through
// the file. With a GPU (STEPJIT_TEST_CUDA_BACKEND=driver) and NCCL: a world
// of one runs all_reduce, broadcast and all_gather on the device; without
// them those skip.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "devices/cuda/backend.h"
#include "devices/cuda/nccl/nccl_api.h"
#include "devices/cuda/nccl/nccl_comm.h"
#include "devices/cuda/nccl/nccl_library.h"
#include "devices/cuda/nccl/unique_id_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cuda/cuda_test_backend.h"
#include "tests/util/scoped_env.h"

namespace stepjit::runtime::cuda {
namespace {

using ::testing::HasSubstr;

// The values of NCCL's documented enums and the id's size, independent of
// whether nccl.h is installed (nccl_library.cc checks them against it too).
static_assert(sizeof(nccl::UniqueId) == 128);
static_assert(nccl::kSuccess == 0 && nccl::kUnhandledCudaError == 1 &&
              nccl::kSystemError == 2 && nccl::kInternalError == 3 &&
              nccl::kInvalidArgument == 4 && nccl::kInvalidUsage == 5 &&
              nccl::kRemoteError == 6 && nccl::kInProgress == 7);
static_assert(nccl::kInt8 == 0 && nccl::kUint8 == 1 && nccl::kInt32 == 2 &&
              nccl::kUint32 == 3 && nccl::kInt64 == 4 && nccl::kUint64 == 5 &&
              nccl::kFloat16 == 6 && nccl::kFloat32 == 7 &&
              nccl::kFloat64 == 8 && nccl::kBfloat16 == 9);
static_assert(nccl::kSum == 0 && nccl::kProd == 1 && nccl::kMax == 2 &&
              nccl::kMin == 3 && nccl::kAvg == 4);
static_assert(nccl::kVersionWithAvg == 21000);

using test::ScopedEnv;

// A fresh path under the test's temporary directory (not created).
std::string TempPath(const std::string& name) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      absl::StrCat("stepjit_nccl_test_", getpid());
  std::filesystem::create_directories(dir);
  const std::filesystem::path p = dir / name;
  std::filesystem::remove(p);
  return p.string();
}

nccl::UniqueId PatternId(int seed) {
  nccl::UniqueId id;
  for (size_t i = 0; i < sizeof(id.internal); ++i) {
    id.internal[i] = static_cast<char>((i * 37 + seed) & 0xff);
  }
  return id;
}

TEST(NcclLibraryTest, MissingLibraryNamesThePathAndHowToInstall) {
  const std::string bogus = "/nonexistent/stepjit/libnccl.so.2";
  ScopedEnv env("STEPJIT_NCCL_LIBRARY", bogus);
  EXPECT_EQ(NcclCandidates(), std::vector<std::string>{bogus});
  absl::StatusOr<std::unique_ptr<const NcclLibrary>> lib = LoadNcclUncached();
  ASSERT_FALSE(lib.ok());
  EXPECT_TRUE(absl::IsNotFound(lib.status())) << lib.status();
  const std::string message(lib.status().message());
  std::printf("%s\n", message.c_str());
  EXPECT_THAT(message, HasSubstr(bogus));
  EXPECT_THAT(message, HasSubstr("STEPJIT_NCCL_LIBRARY"));
  EXPECT_THAT(message, HasSubstr("pip install nvidia-nccl-cu13"));
  EXPECT_THAT(message, HasSubstr("CUDA installation"));
}

TEST(NcclLibraryTest, CandidatesCoverTheLoaderPathToolkitAndWheels) {
  ScopedEnv env("STEPJIT_NCCL_LIBRARY", std::nullopt);
  const std::vector<std::string> c = NcclCandidates();
  ASSERT_FALSE(c.empty());
  EXPECT_EQ(c[0], "libnccl.so.2");  // the loader's own search first
  EXPECT_THAT(c, ::testing::Contains("/usr/local/cuda/lib64/libnccl.so.2"));
  EXPECT_THAT(c, ::testing::Contains("/usr/local/cuda/lib/libnccl.so.2"));
}

TEST(NcclLibraryTest, VersionStringDecodesBothEncodings) {
  NcclLibrary lib;
  lib.version = 22809;
  EXPECT_EQ(lib.VersionString(), "2.28.9");
  lib.version = 2804;  // 2.8.4, before the encoding changed in 2.9
  EXPECT_EQ(lib.VersionString(), "2.8.4");
}

// Runs where NCCL is installed (this needs no GPU): the library loads, is
// new enough, and gives a unique id that passes through the file intact.
TEST(NcclLibraryTest, RealUniqueIdThroughTheFile) {
  absl::StatusOr<std::unique_ptr<const NcclLibrary>> lib = LoadNcclUncached();
  if (!lib.ok()) GTEST_SKIP() << lib.status();
  std::printf("NCCL %s from %s\n", (*lib)->VersionString().c_str(),
              (*lib)->path.c_str());
  EXPECT_GE((*lib)->version, nccl::kVersionWithAvg);
  nccl::UniqueId id;
  std::memset(&id, 0, sizeof(id));
  ASSERT_TRUE(
      NcclStatus(**lib, (*lib)->api.GetUniqueId(&id), "ncclGetUniqueId").ok());
  const nccl::UniqueId zero{};
  EXPECT_NE(std::memcmp(&id, &zero, sizeof(id)), 0)
      << "ncclGetUniqueId left the id zero";
  const std::string path = TempPath("real_id");
  ASSERT_TRUE(WriteUniqueIdFile(path, id).ok());
  absl::StatusOr<nccl::UniqueId> read = ReadUniqueIdFile(path, 1.0, 1);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(std::memcmp(&*read, &id, sizeof(id)), 0);
  EXPECT_THAT(std::string((*lib)->api.GetErrorString(nccl::kInvalidArgument)),
              HasSubstr("invalid"));
}

TEST(UniqueIdFileTest, RankOneReadsWhatRankZeroWritesLater) {
  const std::string path = TempPath("threads");
  const nccl::UniqueId id = PatternId(3);
  // Rank 1 starts waiting before the file exists.
  std::thread rank0([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_TRUE(WriteUniqueIdFile(path, id).ok());
  });
  absl::StatusOr<nccl::UniqueId> read = ReadUniqueIdFile(path, 10.0, 1);
  rank0.join();
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(std::memcmp(read->internal, id.internal, sizeof(id.internal)), 0);
  // The temporary file was renamed, not left behind.
  EXPECT_FALSE(std::filesystem::exists(absl::StrCat(path, ".tmp.", getpid())));
  EXPECT_EQ(std::filesystem::file_size(path), 128u);
}

TEST(UniqueIdFileTest, AcrossProcesses) {
  const std::string path = TempPath("processes");
  const nccl::UniqueId id = PatternId(11);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Rank 0 in another process; exits without running gtest's teardown.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    _exit(WriteUniqueIdFile(path, id).ok() ? 0 : 1);
  }
  absl::StatusOr<nccl::UniqueId> read = ReadUniqueIdFile(path, 10.0, 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(std::memcmp(read->internal, id.internal, sizeof(id.internal)), 0);
}

TEST(UniqueIdFileTest, TimesOutWithAClearMessage) {
  const std::string path = TempPath("never_written");
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<nccl::UniqueId> read = ReadUniqueIdFile(path, 0.3, 2);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  ASSERT_FALSE(read.ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(read.status())) << read.status();
  const std::string message(read.status().message());
  std::printf("%s\n", message.c_str());
  EXPECT_THAT(message, HasSubstr(path));
  EXPECT_THAT(message, HasSubstr("rank 2"));
  EXPECT_THAT(message, HasSubstr("0.3 s"));
  EXPECT_THAT(message, HasSubstr("STEPJIT_DIST_INIT_FILE"));
  // It waited the timeout (not less), and not much more (the poll is <= 50 ms).
  EXPECT_GE(waited, 0.3);
  EXPECT_LT(waited, 2.0);
}

TEST(UniqueIdFileTest, RefusesAFileThatIsNotAnId) {
  const std::string path = TempPath("not_an_id");
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("hello", f);
    std::fclose(f);
  }
  absl::StatusOr<nccl::UniqueId> read = ReadUniqueIdFile(path, 1.0, 1);
  ASSERT_FALSE(read.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(read.status())) << read.status();
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("holds 5 bytes"));
}

TEST(UniqueIdFileTest, WriteIntoAMissingDirectoryFails) {
  const absl::Status s =
      WriteUniqueIdFile("/nonexistent/stepjit/dir/id", PatternId(0));
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("/nonexistent/stepjit/dir/id"));
}

TEST(UniqueIdFileTest, PathFromOptionOrEnvironment) {
  ScopedEnv env("STEPJIT_DIST_INIT_FILE", "/shared/env_id");
  EXPECT_EQ(UniqueIdFilePath(""), "/shared/env_id");
  EXPECT_EQ(UniqueIdFilePath("/shared/opt_id"), "/shared/opt_id");
  EXPECT_EQ(UniqueIdFilePath("file:///shared/torch_style"),
            "/shared/torch_style");
}

TEST(NcclCommTest, TypesNcclHasAndHasNot) {
  EXPECT_EQ(*NcclType(ir::DType::kF32), nccl::kFloat32);
  EXPECT_EQ(*NcclType(ir::DType::kBF16), nccl::kBfloat16);
  EXPECT_EQ(*NcclType(ir::DType::kF16), nccl::kFloat16);
  EXPECT_EQ(*NcclType(ir::DType::kI64), nccl::kInt64);
  EXPECT_TRUE(absl::IsInvalidArgument(NcclType(ir::DType::kBool).status()));
}

class NcclDeviceTest : public test::CudaTest {};

TEST_F(NcclDeviceTest, RefusedOnTheHostEmulator) {
  if (test::OnRealGpu()) GTEST_SKIP() << "checks the emulator";
  NcclLibrary fake;  // never called: the emulator is refused first
  absl::StatusOr<std::unique_ptr<NcclComm>> comm =
      NcclComm::Create(fake, BackendOrThrow(), {.rank = 0, .world = 1});
  ASSERT_FALSE(comm.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(comm.status())) << comm.status();
  EXPECT_THAT(std::string(comm.status().message()),
              HasSubstr("NCCL needs a CUDA device"));
}

// A world of one on the real device: the three collectives on raw buffers.
TEST_F(NcclDeviceTest, WorldOfOneOnTheDevice) {
  if (!test::OnRealGpu())
    GTEST_SKIP() << "needs STEPJIT_TEST_CUDA_BACKEND=driver and a GPU";
  absl::StatusOr<const NcclLibrary*> lib = LoadNccl();
  if (!lib.ok()) GTEST_SKIP() << lib.status();
  nccl::UniqueId id;
  ASSERT_TRUE(
      NcclStatus(**lib, (*lib)->api.GetUniqueId(&id), "ncclGetUniqueId").ok());
  absl::StatusOr<std::unique_ptr<NcclComm>> comm =
      NcclComm::Create(**lib, BackendOrThrow(),
                       {.rank = 0, .world = 1, .id = id, .timeout_s = 60});
  ASSERT_TRUE(comm.ok()) << comm.status();
  const Device cuda = Device::cuda(0);
  const std::vector<float> v = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f};
  Tensor x = from_vector(v, {5}).to(cuda);
  Tensor sum = empty({5}, {.device = cuda});
  Tensor avg = empty({5}, {.device = cuda});
  Tensor bcast = empty({5}, {.device = cuda});
  Tensor gathered = empty({5}, {.device = cuda});
  const Stream s = CurrentStream();
  ASSERT_TRUE((*comm)
                  ->AllReduce(x.data_ptr(), sum.data_ptr(), 5, ir::DType::kF32,
                              nccl::kSum, s)
                  .ok());
  ASSERT_TRUE((*comm)
                  ->AllReduce(x.data_ptr(), avg.data_ptr(), 5, ir::DType::kF32,
                              nccl::kAvg, s)
                  .ok());
  ASSERT_TRUE(
      (*comm)
          ->Broadcast(x.data_ptr(), bcast.data_ptr(), 5, ir::DType::kF32, 0, s)
          .ok());
  ASSERT_TRUE(
      (*comm)
          ->AllGather(x.data_ptr(), gathered.data_ptr(), 5, ir::DType::kF32, s)
          .ok());
  ASSERT_TRUE((*comm)->WaitAll().ok()) << (*comm)->WaitAll();
  EXPECT_EQ((*comm)->collectives(), 4);
  // A world of one: every result is the input, bit for bit.
  for (const Tensor& t : {sum, avg, bcast, gathered}) {
    EXPECT_EQ(test::Values(t), test::Values(x));
  }
  EXPECT_TRUE(absl::IsInvalidArgument((*comm)->Broadcast(
      x.data_ptr(), bcast.data_ptr(), 5, ir::DType::kF32, 1, s)));
  EXPECT_TRUE((*comm)->health().ok());
}

}  // namespace
}  // namespace stepjit::runtime::cuda
