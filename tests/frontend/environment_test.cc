// Environment variables a user can get wrong never turn compilation off
// silently: a misspelt pass in STEPJIT_DISABLE is an error naming it, and a
// STEPJIT_DUMP directory that cannot be written is reported while the step
// still compiles.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "frontend/stepjit.h"
#include "gtest/gtest.h"

namespace stepjit {
namespace {

struct Env {
  Env(const char* name, const std::string& value) : name_(name) {
    setenv(name, value.c_str(), 1);
  }
  ~Env() { unsetenv(name_); }
  const char* name_;
};

TEST(EnvironmentTest, AnUnknownPassInStepjitDisableIsAnError) {
  Env off("STEPJIT_DISABLE", "fuse,garbage");
  try {
    auto step = compile([](const Tensor& x) { return relu(x * 2.0); });
    ADD_FAILURE() << "compile accepted STEPJIT_DISABLE=fuse,garbage";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind(
                  "STEPJIT_DISABLE: unknown pass 'garbage'; known passes: ", 0),
              0u)
        << "[" << what << "]";
  }
}

TEST(EnvironmentTest, AnUnwritableDumpDirectoryStillCompiles) {
  // A file where the directory should be: nothing can be created under it.
  const std::string file = ::testing::TempDir() + "/stepjit_dump_is_a_file";
  std::ofstream(file) << "not a directory";
  Env dump("STEPJIT_DUMP", file);
  auto step = compile([](const Tensor& x) { return relu(x * 2.0 + 1.0); });
  const Tensor x = randn({64});
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 4; ++i) step(x);
  const std::string err = ::testing::internal::GetCapturedStderr();
  const CompileStats s = step.stats();
  EXPECT_EQ(s.replays, 2) << s;
  EXPECT_GE(s.native_regions, 1) << s;
  EXPECT_NE(err.find("STEPJIT_DUMP: cannot write"), std::string::npos) << err;
  EXPECT_EQ(amax(abs(step(x) - relu(x * 2.0 + 1.0))).item(), 0.0);
  std::filesystem::remove(file);
}

}  // namespace
}  // namespace stepjit
