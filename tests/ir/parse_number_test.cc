// ir/parse_number.h: the one parser of numbers given as text (flags and
// environment variables), against hand-checked values.
#include "ir/parse_number.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace stepjit::ir {
namespace {

using ::testing::HasSubstr;

TEST(ParseIntegerTest, AcceptsTheRangeInclusive) {
  EXPECT_EQ(*ParseInteger("n", "0", 0, 256), 0);
  EXPECT_EQ(*ParseInteger("n", "256", 0, 256), 256);
  EXPECT_EQ(*ParseInteger("n", "-5", -5), -5);
  EXPECT_EQ(*ParseInteger("n", "9223372036854775807", 1),
            std::numeric_limits<int64_t>::max());
}

TEST(ParseIntegerTest, RejectsOverflowTruncationJunkAndSpaces) {
  for (const char* bad :
       {"4294967297", "257", "-1", "1.5", "1e3", "4abc", "", " 4", "4 ",
        "99999999999999999999", "0x10", "inf", "nan"}) {
    const absl::StatusOr<int64_t> v = ParseInteger("--workers", bad, 0, 256);
    ASSERT_FALSE(v.ok()) << "accepted '" << bad << "'";
    EXPECT_EQ(
        v.status().message(),
        std::string("--workers: expected an integer from 0 to 256, got '") +
            bad + "'");
  }
  EXPECT_EQ(ParseInteger("", "x", 1).status().message(),
            "expected an integer >= 1, got 'x'");
}

TEST(ParseRealTest, AcceptsFiniteValuesInRange) {
  EXPECT_DOUBLE_EQ(*ParseReal("lr", "1e-3", {}), 1e-3);
  EXPECT_DOUBLE_EQ(*ParseReal("lr", "3.4e38", {.max = 3.5e38}), 3.4e38);
  EXPECT_DOUBLE_EQ(*ParseReal("x", "0", {.min = 0, .min_inclusive = true}),
                   0.0);
}

TEST(ParseRealTest, RejectsNonFiniteOutOfRangeAndJunk) {
  for (const char* bad :
       {"inf", "-inf", "nan", "1e400", "0", "-1", "1e7", "1,5", "", " 1"}) {
    const absl::StatusOr<double> v =
        ParseReal("T", bad, {.min = 0, .max = 1e6});
    ASSERT_FALSE(v.ok()) << "accepted '" << bad << "'";
    EXPECT_EQ(
        v.status().message(),
        std::string("T: expected a finite number > 0 and <= 1e+06, got '") +
            bad + "'");
  }
  EXPECT_THAT(
      std::string(ParseReal("x", "-0.5", {.min = 0, .min_inclusive = true})
                      .status()
                      .message()),
      HasSubstr("expected a finite number >= 0, got '-0.5'"));
}

}  // namespace
}  // namespace stepjit::ir
