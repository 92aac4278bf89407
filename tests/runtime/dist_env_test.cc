// dist::init refuses a timeout or rank it cannot honour, before it starts
// anything (the process stays uninitialized, so each case can try again).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <string>

#include "ir/status.h"
#include "runtime/dist/dist.h"

namespace stepjit {
namespace {

using ::testing::HasSubstr;

std::string InitError(const dist::InitOptions& options = {}) {
  try {
    dist::init(options);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(DistEnvironmentTest, TimeoutMustBeFiniteAndAtMostAWeek) {
  for (const char* bad : {"inf", "1e10", "nan", "0", "-3", "5s", "604801"}) {
    ASSERT_EQ(setenv("STEPJIT_DIST_TIMEOUT_S", bad, 1), 0);
    EXPECT_EQ(
        InitError(),
        std::string(
            "dist::init: STEPJIT_DIST_TIMEOUT_S (seconds): expected a finite "
            "number > 0 and <= 604800, got '") +
            bad + "'");
  }
  unsetenv("STEPJIT_DIST_TIMEOUT_S");
  dist::InitOptions options;
  options.timeout_s = INFINITY;
  EXPECT_THAT(
      InitError(options),
      HasSubstr(
          "InitOptions::timeout_s: expected seconds up to 604800 (<= 0: the "
          "default), got inf"));
}

TEST(DistEnvironmentTest, RankAndWorldSizeMustFitAnInt) {
  ASSERT_EQ(setenv("RANK", "4294967297", 1), 0);
  EXPECT_EQ(InitError(),
            "dist::init: RANK: expected an integer from 0 to 2147483647, got "
            "'4294967297'");
  unsetenv("RANK");
}

}  // namespace
}  // namespace stepjit
