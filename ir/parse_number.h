// One parser for every number a user hands stepjit as text (command-line
// flags, environment variables): whole numbers and finite reals in a stated
// range. Overflow, truncation, trailing junk, inf and nan are errors whose
// message names the setting, the range and the text:
//   "--workers: expected an integer from 0 to 256, got '4294967297'".
#ifndef STEPJIT_IR_PARSE_NUMBER_H_
#define STEPJIT_IR_PARSE_NUMBER_H_

#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace stepjit::ir {

// A whole number in [min, max] (decimal, optional sign, no spaces). `name`
// prefixes the message ("name: expected ..."); empty leaves it out.
absl::StatusOr<int64_t> ParseInteger(
    absl::string_view name, absl::string_view text, int64_t min,
    int64_t max = std::numeric_limits<int64_t>::max());

// A finite real in the range: above `min` (or at it, with min_inclusive)
// and at most `max`.
struct RealRange {
  double min = 0;
  bool min_inclusive = false;
  double max = std::numeric_limits<double>::max();
};
absl::StatusOr<double> ParseReal(absl::string_view name, absl::string_view text,
                                 RealRange range);

// What the range reads as in a message: "an integer from 1 to 256", "an
// integer >= 0", "a number > 0", "a number > 0 and <= 1e+06".
std::string DescribeRange(int64_t min, int64_t max);
std::string DescribeRange(RealRange range);

}  // namespace stepjit::ir

#endif  // STEPJIT_IR_PARSE_NUMBER_H_
