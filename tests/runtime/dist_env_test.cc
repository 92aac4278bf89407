// dist::init refuses a timeout or rank it cannot honour, before it starts
// anything (the process stays uninitialized, so each case can try again).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <string>

#include "dist/dist.h"
#include "dist/mpi.h"
#include "ir/status.h"

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
    EXPECT_EQ(InitError(),
              std::string(
                  "STEPJIT_DIST_TIMEOUT_S: expected a finite number > 0 and <= "
                  "604800, got '") +
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

// A header names every rank's collective in the disagreement message; one
// from another build may hold any values, and still reads as text.
TEST(CollectiveHeaderTest, DescribesEveryKindAndSurvivesGarbage) {
  using dist::internal::CollectiveHeader;
  using dist::internal::DescribeHeader;
  EXPECT_EQ(DescribeHeader({.seq = 12,
                            .kind = CollectiveHeader::kAllReduce,
                            .dtype = 0,
                            .count = 1000,
                            .aux = 1}),
            "all_reduce #12 (avg) of 1000 f32 values");
  EXPECT_EQ(DescribeHeader({.seq = 3,
                            .kind = CollectiveHeader::kBroadcast,
                            .count = 64,
                            .aux = 0}),
            "broadcast #3 of 64 bytes from rank 0");
  EXPECT_EQ(DescribeHeader({.seq = 9, .kind = CollectiveHeader::kFinalize}),
            "dist::shutdown after 9 collectives (it has finished)");
  EXPECT_EQ(DescribeHeader({.seq = 1,
                            .kind = CollectiveHeader::kAllReduce,
                            .dtype = 99,
                            .count = -5,
                            .aux = -7}),
            "all_reduce #1 (op -7) of -5 dtype 99 values");
  EXPECT_EQ(DescribeHeader({.seq = 1, .kind = 1234}),
            "unknown collective #1 (kind 1234)");
}

}  // namespace
}  // namespace stepjit
